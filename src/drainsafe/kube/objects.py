"""Kubernetes object semantics, read from plain API dicts: one home for each.

What a pod's state means is defined upstream; each reader here follows its source:

- Ready: the pod's `Ready` condition is "True" (k8s.io/kubernetes pkg/api/v1/pod/util.go
  IsPodReady). A pod without the condition is not Ready.
- Available: Ready for at least minReadySeconds (same file, IsPodAvailable): the
  condition's lastTransitionTime plus minReadySeconds is not in the future.
- terminal: phase Succeeded or Failed (pkg/api/v1/pod/util.go IsPodTerminal).
- terminating: metadata.deletionTimestamp is set.
- active: neither terminal nor terminating (pkg/controller/controller_utils.go
  FilterActivePods), which is what a ReplicaSet counts against spec.replicas.
- controller reference: the ownerReference with controller: true
  (apimachinery pkg/apis/meta/v1/controller_ref.go GetControllerOf).
- the default grace period is 30 s when terminationGracePeriodSeconds is absent
  (pkg/apis/core/v1/defaults.go; core/v1 PodSpec docs). An explicit 0 stays 0.
- unschedulable: the PodScheduled condition is False with reason Unschedulable
  (pkg/apis/core/types.go PodReasonUnschedulable).
- the object key is "namespace/name", or "name" for cluster-scoped objects, as client-go's
  cache.MetaNamespaceKeyFunc (tools/cache/store.go).

Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

Obj = Mapping[str, Any]

DEFAULT_GRACE_SECONDS = 30


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def key_of(obj: Obj) -> str:
    m = meta(obj)
    ns = m.get("namespace") or ""
    return f"{ns}/{m.get('name')}" if ns else str(m.get("name"))


def uid_of(obj: Obj) -> str:
    return str(meta(obj).get("uid") or "")


def controller_ref(obj: Obj) -> Obj | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def _condition(pod: Obj, kind: str) -> Obj | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def is_ready(pod: Obj) -> bool:
    c = _condition(pod, "Ready")
    return c is not None and c.get("status") == "True"


def is_available(pod: Obj, min_ready_seconds: float, now: float) -> bool:
    if not is_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = parse_time((_condition(pod, "Ready") or {}).get("lastTransitionTime"))
    return since is not None and since + min_ready_seconds <= now


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_terminating(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def is_active(pod: Obj) -> bool:
    return not is_terminal(pod) and not is_terminating(pod)


def node_of(pod: Obj) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def grace_seconds(pod: Obj) -> int:
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else (
        DEFAULT_GRACE_SECONDS)


def unschedulable_reason(pod: Obj) -> str | None:
    c = _condition(pod, "PodScheduled")
    if c is not None and c.get("status") == "False" and c.get("reason") == "Unschedulable":
        return str(c.get("message") or "Unschedulable")
    return None


def started_up_seconds(pod: Obj) -> float | None:
    """How long the pod took from start to Ready (its observed start-up), when it is Ready."""
    if not is_ready(pod):
        return None
    start = parse_time((pod.get("status") or {}).get("startTime"))
    ready = parse_time((_condition(pod, "Ready") or {}).get("lastTransitionTime"))
    if start is None or ready is None or ready < start:
        return None
    return ready - start


def endpoint_uid(endpoint: Obj) -> Any:
    return (endpoint.get("targetRef") or {}).get("uid")


def slice_lists(endpoint_slice: Obj, uid: str) -> bool:
    return any(endpoint_uid(e) == uid for e in endpoint_slice.get("endpoints") or [])


def rfc3339(ts: float | None = None) -> str:
    """Seconds-resolution RFC 3339 in UTC, as the API server writes metav1.Time."""
    moment = datetime.now(UTC) if ts is None else datetime.fromtimestamp(ts, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
