"""LifecycleTracker alone: watched pod and EndpointSlice states -> lifecycle events."""

from __future__ import annotations

from typing import Any

from drainsafe.kube.objects import parse_time
from drainsafe.verify.lifecycle import LifecycleTracker

T0 = parse_time("2026-12-02T16:40:00Z") or 0.0


def pod(name: str, *, ready: bool = True, deleting: str | None = None,
        exited: int | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": "2026-12-02T16:39:00Z"}
    if deleting:
        meta["deletionTimestamp"] = deleting
        meta["deletionGracePeriodSeconds"] = 30
    statuses = []
    if exited is not None:
        statuses.append({"name": "app", "state": {"terminated": {
            "exitCode": exited, "reason": "Completed", "finishedAt": "2026-12-02T16:40:09Z"}}})
    return {"metadata": meta, "status": {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                        "lastTransitionTime": "2026-12-02T16:40:02Z"}],
        "containerStatuses": statuses}}


def endpoint_slice(name: str, endpoints: dict[str, bool | None]) -> dict[str, Any]:
    eps = []
    for pod_name, ready in endpoints.items():
        conditions = {} if ready is None else {"ready": ready}
        eps.append({"addresses": ["10.0.0.1"], "conditions": conditions,
                    "targetRef": {"kind": "Pod", "name": pod_name}})
    return {"metadata": {"name": name}, "endpoints": eps}


def kinds(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.kind, e.pod) for e in events]


def test_rollout_of_one_pod_in_order() -> None:
    tracker = LifecycleTracker(started_at=T0)
    assert tracker.pod_seen(0.0, pod("web-a"), initial=True) == []
    assert tracker.slice_seen(0.0, endpoint_slice("s1", {"web-a": True})) == []

    events = tracker.pod_seen(1.0, pod("web-a", deleting="2026-12-02T16:40:01Z"))
    assert kinds(events) == [("terminating", "web-a")]
    # deletionTimestamp is when the pod will be deleted: request time + grace
    assert events[0].at == 1.0 - 30 and events[0].detail == "grace 30s"

    # nil ready counts as ready (k8s.io/api discovery/v1 EndpointConditions)
    assert tracker.slice_seen(1.1, endpoint_slice("s1", {"web-a": None})) == []
    assert kinds(tracker.slice_seen(1.2, endpoint_slice("s1", {"web-a": False}))) == [
        ("endpoint_not_ready", "web-a")]
    assert kinds(tracker.pod_seen(2.0, pod("web-a", ready=False, deleting="x"))) == [
        ("not_ready", "web-a")]
    assert kinds(tracker.slice_seen(3.0, endpoint_slice("s1", {}))) == [
        ("endpoint_removed", "web-a")]
    exited = tracker.pod_seen(9.0, pod("web-a", ready=False, deleting="x", exited=0))
    assert kinds(exited) == [("exited", "web-a")] and exited[0].detail == "app exit 0 (Completed)"
    assert kinds(tracker.pod_gone(9.5, "web-a")) == [("deleted", "web-a")]
    assert tracker.pod_gone(9.6, "web-a") == []


def test_new_pod_and_other_services_endpoints() -> None:
    tracker = LifecycleTracker(started_at=T0)
    assert kinds(tracker.pod_seen(1.0, pod("web-b", ready=False))) == [("pod_added", "web-b")]
    assert kinds(tracker.pod_seen(2.0, pod("web-b"))) == [("ready", "web-b")]
    # Endpoints of pods we do not watch never produce events.
    tracker.slice_seen(2.0, endpoint_slice("other", {"db-0": True}))
    assert tracker.slice_gone(3.0, "other") == []


def test_address_in_two_slices_leaves_when_gone_from_both() -> None:
    tracker = LifecycleTracker(started_at=T0)
    tracker.pod_seen(0.0, pod("web-a"), initial=True)
    tracker.slice_seen(0.0, endpoint_slice("s1", {"web-a": True}))
    tracker.slice_seen(0.0, endpoint_slice("s2", {"web-a": True}))
    assert tracker.slice_gone(1.0, "s1") == []
    assert kinds(tracker.slice_gone(2.0, "s2")) == [("endpoint_removed", "web-a")]
