"""Pod lifecycle as verify sees it: events derived from successive pod and EndpointSlice states.

`LifecycleTracker` is pure: it is fed the objects a list+watch delivers (plain dicts, as the API
serves them) with the time they were observed, and returns the lifecycle events they imply.
The watching itself (drainsafe.kube) is the thin shell in `watch.py`.

Kubernetes facts used (cited so they can be checked):
- Termination starts when the API server sets metadata.deletionTimestamp; graceful deletion
  (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination).
- A terminating pod's endpoint stays in its EndpointSlice with conditions.ready=false,
  serving=<readiness>, terminating=true; "ready should never be true for terminating
  endpoints", and a nil ready means ready (k8s.io/api discovery/v1 types.go
  EndpointConditions; KEP-1672 "Tracking Terminating Endpoints"). Proxies route new
  connections to ready endpoints, so "endpoint not ready" is the moment proxies start dropping
  the pod, and "endpoint removed" is when the address leaves the slices altogether.
- Endpoints reference their pod through targetRef {kind: Pod, name, namespace}
  (discovery.k8s.io/v1 Endpoint).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from drainsafe.kube.objects import condition, is_ready, parse_time
from drainsafe.verify.record import (
    ENDPOINT_NOT_READY,
    ENDPOINT_REMOVED,
    POD_ADDED,
    POD_DELETED,
    POD_EXITED,
    POD_NOT_READY,
    POD_READY,
    POD_TERMINATING,
    LifecycleEvent,
)

Obj = Mapping[str, Any]


def termination_start(meta: Obj) -> float | None:
    """When graceful deletion was requested. The API server sets deletionTimestamp to the
    moment the object *will* be deleted, request time + grace period (apimachinery
    ObjectMeta.DeletionTimestamp: "the time after which this resource will be deleted";
    BeforeDelete in staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go), so subtract
    the grace."""
    deletion = parse_time(meta.get("deletionTimestamp"))
    grace = meta.get("deletionGracePeriodSeconds")
    if deletion is None:
        return None
    return deletion - grace if isinstance(grace, int | float) else deletion


def terminated_containers(pod: Obj) -> dict[str, Obj]:
    """Container name -> its state.terminated, for containers that have exited."""
    out: dict[str, Obj] = {}
    for status in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            out[str(status.get("name"))] = terminated
    return out


@dataclass
class _PodState:
    ready: bool = False
    terminating: bool = False
    exited: set[str] = field(default_factory=set)


@dataclass
class _EndpointState:
    present: bool = False
    ready: bool = False


class LifecycleTracker:
    """Turns watched object states into lifecycle events, one pod at a time.

    started_at is the run's wall-clock zero (Unix seconds) so API timestamps share the axis.
    Pods seen during the initial list are recorded without an 'added' event.
    """

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at
        self._pods: dict[str, _PodState] = {}
        # slice name -> pod name -> (ready) for the endpoints in that slice
        self._slices: dict[str, dict[str, bool]] = {}
        self._endpoints: dict[str, _EndpointState] = {}

    def _rel(self, when: float | None) -> float | None:
        return None if when is None else round(when - self.started_at, 3)

    def pod_seen(self, t: float, pod: Obj, *, initial: bool = False) -> list[LifecycleEvent]:
        meta = pod.get("metadata", {})
        name = str(meta.get("name", ""))
        events: list[LifecycleEvent] = []
        state = self._pods.get(name)
        if state is None:
            state = self._pods[name] = _PodState()
            if not initial:
                events.append(LifecycleEvent(t, POD_ADDED, name,
                                             at=self._rel(parse_time(
                                                 meta.get("creationTimestamp")))))
            elif is_ready(pod):
                state.ready = True
        deletion = meta.get("deletionTimestamp")
        if deletion and not state.terminating:
            state.terminating = True
            grace = meta.get("deletionGracePeriodSeconds")
            detail = f"grace {grace}s" if grace is not None else ""
            events.append(LifecycleEvent(t, POD_TERMINATING, name, detail,
                                         at=self._rel(termination_start(meta))))
        ready = is_ready(pod)
        if ready != state.ready:
            state.ready = ready
            changed = (condition(pod, "Ready") or {}).get("lastTransitionTime")
            events.append(LifecycleEvent(t, POD_READY if ready else POD_NOT_READY, name,
                                         at=self._rel(parse_time(changed))))
        for container, terminated in terminated_containers(pod).items():
            if container in state.exited:
                continue
            state.exited.add(container)
            code = terminated.get("exitCode")
            reason = terminated.get("reason") or ""
            detail = f"{container} exit {code}" + (f" ({reason})" if reason else "")
            events.append(LifecycleEvent(t, POD_EXITED, name, detail,
                                         at=self._rel(parse_time(terminated.get("finishedAt")))))
        return events

    def pod_gone(self, t: float, name: str) -> list[LifecycleEvent]:
        if self._pods.pop(name, None) is None:
            return []
        return [LifecycleEvent(t, POD_DELETED, name)]

    def slice_seen(self, t: float, endpoint_slice: Obj) -> list[LifecycleEvent]:
        name = str(endpoint_slice.get("metadata", {}).get("name", ""))
        pods: dict[str, bool] = {}
        for endpoint in endpoint_slice.get("endpoints") or []:
            ref = endpoint.get("targetRef") or {}
            if ref.get("kind") != "Pod" or not ref.get("name"):
                continue
            # KEP-1672: a missing 'ready' means ready (discovery.k8s.io/v1 EndpointConditions).
            ready = (endpoint.get("conditions") or {}).get("ready")
            pods[str(ref["name"])] = pods.get(str(ref["name"]), False) or ready is not False
        self._slices[name] = pods
        return self._endpoint_changes(t)

    def slice_gone(self, t: float, name: str) -> list[LifecycleEvent]:
        self._slices.pop(name, None)
        return self._endpoint_changes(t)

    def _endpoint_changes(self, t: float) -> list[LifecycleEvent]:
        now: dict[str, _EndpointState] = {}
        for pods in self._slices.values():
            for pod, ready in pods.items():
                state = now.setdefault(pod, _EndpointState(present=True))
                state.ready = state.ready or ready
        events: list[LifecycleEvent] = []
        for pod in sorted(set(now) | set(self._endpoints)):
            before = self._endpoints.get(pod, _EndpointState())
            after = now.get(pod, _EndpointState())
            if pod not in self._pods and pod not in self._endpoints:
                continue  # not one of the watched pods (another Service's endpoint)
            if before.present and before.ready and after.present and not after.ready:
                events.append(LifecycleEvent(t, ENDPOINT_NOT_READY, pod))
            if before.present and not after.present:
                events.append(LifecycleEvent(t, ENDPOINT_REMOVED, pod))
        self._endpoints = {p: s for p, s in now.items() if p in self._pods or p in
                           self._endpoints}
        return events

