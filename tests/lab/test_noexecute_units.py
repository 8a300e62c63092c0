"""The rules of a lost node, pure: when the node lifecycle controller calls a node silent,
which taints it sets, and which pods the taint eviction controller deletes when
(drainsafe.lab.controllers.nodelifecycle and .tainteviction; upstream v1.33)."""

from __future__ import annotations

from typing import Any

from drainsafe.kube.objects import condition
from drainsafe.lab.controllers.nodelifecycle import (
    NodeMonitor,
    NoExecute,
    ZoneState,
    desired_taints,
    grace_left,
    no_execute_policy,
    observe,
    with_status_unknown,
    zone_state,
)
from drainsafe.lab.controllers.tainteviction import (
    FOREVER,
    Scheduled,
    due,
    plan,
    toleration_window,
    with_disruption_target,
)
from drainsafe.placement import NOT_READY_TAINT, UNREACHABLE_TAINT

UNREACHABLE = {"key": UNREACHABLE_TAINT, "effect": "NoExecute"}
NOT_READY = {"key": NOT_READY_TAINT, "effect": "NoExecute"}


def tol(key: str, seconds: int | None = None, effect: str = "NoExecute") -> dict[str, Any]:
    t: dict[str, Any] = {"key": key, "operator": "Exists", "effect": effect}
    if seconds is not None:
        t["tolerationSeconds"] = seconds
    return t


def node(ready: str | None, heartbeat: str = "h1", **spec: Any) -> dict[str, Any]:
    conditions = [] if ready is None else [
        {"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat,
         "lastTransitionTime": "t0"},
        {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": heartbeat}]
    return {"metadata": {"name": "n", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec, "status": {"conditions": conditions}}


def lease(renew: str) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "spec": {"renewTime": renew}}


# --- tolerations -> how long a pod may stay -------------------------------------------

def test_the_window_is_the_least_tolerationseconds_of_the_tolerations_used() -> None:
    assert toleration_window([], [UNREACHABLE]) == 0  # not tolerated: at once
    assert toleration_window([tol(NOT_READY_TAINT, 300)], [UNREACHABLE]) == 0
    assert toleration_window([tol(UNREACHABLE_TAINT, 300)], [UNREACHABLE]) == 300
    assert toleration_window([tol(UNREACHABLE_TAINT)], [UNREACHABLE]) is FOREVER
    # the first toleration matching a taint is the one used (GetMatchingTolerations)
    assert toleration_window([tol(UNREACHABLE_TAINT, 20), tol(UNREACHABLE_TAINT, 5)],
                             [UNREACHABLE]) == 20
    assert toleration_window([tol(UNREACHABLE_TAINT, 20), tol(NOT_READY_TAINT, 5)],
                             [UNREACHABLE, NOT_READY]) == 5
    assert toleration_window([tol(UNREACHABLE_TAINT), tol(NOT_READY_TAINT, 5)],
                             [UNREACHABLE, NOT_READY]) == 5
    assert toleration_window([tol(UNREACHABLE_TAINT, 0)], [UNREACHABLE]) == 0
    assert toleration_window([{"operator": "Exists"}], [UNREACHABLE]) is FOREVER
    # a NoSchedule toleration does not tolerate a NoExecute taint
    assert toleration_window([tol(UNREACHABLE_TAINT, effect="NoSchedule")],
                             [UNREACHABLE]) == 0


def pod(uid: str, tolerations: list[dict[str, Any]], *, on: str = "n",
        terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "name": uid, "namespace": "default"}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": on, "tolerations": tolerations}}


def test_plan_keeps_the_first_start_and_drops_what_no_longer_applies() -> None:
    tainted = {"n": {"spec": {"taints": [UNREACHABLE]}}, "m": {"spec": {}}}
    pods = [pod("default", [tol(UNREACHABLE_TAINT, 300)]),
            pod("short", [tol(UNREACHABLE_TAINT, 60)]),
            pod("daemon", [tol(UNREACHABLE_TAINT)]),
            pod("none", []),
            pod("elsewhere", [], on="m"),
            pod("going", [], terminating=True)]
    first = plan(pods, tainted, {}, now=100.0)
    assert first == {"default": Scheduled(100.0, 400.0), "short": Scheduled(100.0, 160.0),
                     "none": Scheduled(100.0, 100.0)}
    assert due(first, 100.0) == (["none"], 60.0)
    later = plan(pods, tainted, first, now=200.0)  # a later pass: same starts
    assert later["short"] == Scheduled(100.0, 160.0)
    assert due(later, 200.0) == (["none", "short"], 200.0)
    # taints gone: every scheduled deletion is cancelled
    assert plan(pods, {"n": {"spec": {"taints": []}}}, later, now=201.0) == {}


# --- heartbeats -> Unknown ------------------------------------------------------------

def test_a_node_is_silent_when_neither_heartbeat_moved_for_the_grace_period() -> None:
    monitor = NodeMonitor(grace_seconds=50, startup_grace_seconds=60)
    h = observe(None, node("True"), lease("r1"), now=0.0)
    assert grace_left(h, node("True"), monitor, 49.0) > 0
    h = observe(h, node("True"), lease("r2"), now=40.0)  # the lease renewed
    assert h.probe_at == 40.0
    h = observe(h, node("True", heartbeat="h2"), lease("r2"), now=80.0)  # a status post
    assert h.probe_at == 80.0
    h = observe(h, node("True", heartbeat="h2"), lease("r2"), now=131.0)  # nothing new
    assert grace_left(h, node("True", heartbeat="h2"), monitor, 131.0) < 0
    # never posted Ready: the startup grace from creationTimestamp
    fresh = observe(None, node(None), None, now=1767225600.0 + 30)
    assert grace_left(fresh, node(None), monitor, 1767225600.0 + 59) > 0
    assert grace_left(fresh, node(None), monitor, 1767225600.0 + 61) < 0


def test_a_silent_nodes_kubelet_conditions_become_unknown_once() -> None:
    silent = with_status_unknown(node("True"), "t9")
    assert silent is not None
    ready = condition(silent, "Ready") or {}
    assert (ready["status"], ready["reason"], ready["message"], ready["lastTransitionTime"]
            ) == ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.", "t9")
    assert ready["lastHeartbeatTime"] == "h1"  # the kubelet's last, untouched
    assert (condition(silent, "MemoryPressure") or {})["status"] == "Unknown"
    never = condition(silent, "PIDPressure") or {}
    assert (never["status"], never["reason"]) == ("Unknown", "NodeStatusNeverUpdated")
    assert with_status_unknown(silent, "t10") is None


# --- conditions -> taints ---------------------------------------------------------------

def keys(taints: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in taints}


def test_taints_follow_ready_and_swap_between_not_ready_and_unreachable() -> None:
    assert keys(desired_taints(node("Unknown"), "t1")) == {
        (UNREACHABLE_TAINT, "NoSchedule"), (UNREACHABLE_TAINT, "NoExecute")}
    assert keys(desired_taints(node("False"), "t1")) == {
        (NOT_READY_TAINT, "NoSchedule"), (NOT_READY_TAINT, "NoExecute")}
    user = {"key": "gpu", "effect": "NoExecute"}
    tainted = node("True", taints=[user, {**UNREACHABLE, "timeAdded": "t1"}])
    assert desired_taints(tainted, "t2") == [user]  # back: ours removed, the user's kept
    kept = node("Unknown", taints=[{**UNREACHABLE, "timeAdded": "t1"}])
    assert {"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": "t1"} in \
        desired_taints(kept, "t2")  # timeAdded is when it was added
    assert keys(desired_taints(kept, "t2", NoExecute.LIFT)) == {
        (UNREACHABLE_TAINT, "NoSchedule")}
    assert keys(desired_taints(node("Unknown"), "t2", NoExecute.HOLD)) == {
        (UNREACHABLE_TAINT, "NoSchedule")}
    assert (UNREACHABLE_TAINT, "NoExecute") in keys(
        desired_taints(kept, "t2", NoExecute.HOLD))


def test_disrupted_zones_add_no_noexecute_taints() -> None:
    assert zone_state([True, True, False]) is ZoneState.NORMAL
    assert zone_state([False, False]) is ZoneState.FULL_DISRUPTION
    assert zone_state([True, False, False, False]) is ZoneState.PARTIAL_DISRUPTION
    assert no_execute_policy(ZoneState.NORMAL, 3, False) is NoExecute.TAINT
    assert no_execute_policy(ZoneState.FULL_DISRUPTION, 3, False) is NoExecute.TAINT
    assert no_execute_policy(ZoneState.FULL_DISRUPTION, 3, True) is NoExecute.LIFT
    assert no_execute_policy(ZoneState.PARTIAL_DISRUPTION, 4, False) is NoExecute.HOLD
    assert no_execute_policy(ZoneState.PARTIAL_DISRUPTION, 51, False) is NoExecute.TAINT


def test_the_disruption_target_is_set_once() -> None:
    p = {"metadata": {"name": "p"}, "status": {"conditions": [
        {"type": "Ready", "status": "True"}]}}
    marked = with_disruption_target(p, "t1")
    assert marked is not None
    target = condition(marked, "DisruptionTarget") or {}
    assert (target["status"], target["reason"], target["lastTransitionTime"]) == (
        "True", "DeletionByTaintManager", "t1")
    assert with_disruption_target(marked, "t2") is None
