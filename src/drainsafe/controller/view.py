"""The shared view every replica answers from: informers, and the facts for one eviction.

Each replica keeps its own list+watch caches (drainsafe.kube.watch.Informer) of pods,
Deployments, ReplicaSets, nodes and namespaces, so any replica can answer any review without
a round trip to the API server. `gather` turns a cache snapshot into the plain data the
decision takes (drainsafe.controller.decision); it is pure.

Available pods are counted from the pod cache, not from the Deployment's status, which lags
behind by a controller sync: a pod counts when it is Ready for minReadySeconds, not
terminating and not finished (the ReplicaSet controller's FilterActivePods and
podutil.IsPodAvailable, kubernetes/kubernetes pkg/controller/controller_utils.go). Pods this
replica has just let go are counted as gone until the cache shows them terminating, so two
evictions of one workload in the same instant are not both let through on one count (the
PodDisruptionBudget, checked by the API server after the webhook, is the final guard across
replicas).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from drainsafe import placement
from drainsafe.controller.decision import (
    GUARD_LABEL,
    Facts,
    PodFacts,
    SurgeFacts,
    WorkloadFacts,
)
from drainsafe.controller.record import (
    HOLD_ANNOTATION,
    RELEASED_ANNOTATION,
)
from drainsafe.drain.ownership import SurgeRecord

Obj = dict[str, Any]
RecordReader = Callable[[Mapping[str, Any]], SurgeRecord | None]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((r for r in _meta(obj).get("ownerReferences") or [] if r.get("controller")),
                None)


def is_ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def is_available(pod: Mapping[str, Any], min_ready_seconds: int, now: dt.datetime) -> bool:
    """podutil.IsPodAvailable: Ready for at least minReadySeconds."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "True":
            if min_ready_seconds <= 0:
                return True
            since = _parse_time(c.get("lastTransitionTime"))
            return since is not None and (now - since).total_seconds() >= min_ready_seconds
    return False


def is_active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return not _meta(pod).get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


def pod_key(pod: Mapping[str, Any]) -> str:
    return f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}"


def opted_in(pod: Mapping[str, Any], namespace: Mapping[str, Any] | None) -> bool:
    """The pod label, or the same label on its namespace."""
    if (_meta(pod).get("labels") or {}).get(GUARD_LABEL) == "true":
        return True
    return namespace is not None and (_meta(namespace).get("labels") or {}).get(
        GUARD_LABEL) == "true"


def deployment_of(pod: Mapping[str, Any], replicasets: Mapping[str, Obj]
                  ) -> tuple[str | None, str | None]:
    """(owner kind, Deployment name): the pod's controller, through its ReplicaSet."""
    ref = controller_ref(pod)
    if ref is None:
        return None, None
    if ref.get("kind") != "ReplicaSet":
        return str(ref.get("kind")), None
    rs = replicasets.get(f"{_meta(pod).get('namespace')}/{ref.get('name')}")
    rs_ref = controller_ref(rs) if rs is not None else None
    if rs_ref is None or rs_ref.get("kind") != "Deployment":
        return "ReplicaSet", None
    return "Deployment", str(rs_ref.get("name"))


def workload_pods(deployment: Mapping[str, Any], pods: Iterable[Obj],
                  replicasets: Mapping[str, Obj]) -> list[Obj]:
    ns, name = _meta(deployment).get("namespace"), _meta(deployment).get("name")
    out = []
    for pod in pods:
        if _meta(pod).get("namespace") != ns:
            continue
        kind, owner = deployment_of(pod, replicasets)
        if kind == "Deployment" and owner == name:
            out.append(pod)
    return out


def mid_rollout(deployment: Mapping[str, Any], replicasets: Mapping[str, Obj]) -> bool:
    """More than one ReplicaSet of the Deployment still has replicas."""
    uid = _meta(deployment).get("uid")
    live = 0
    for rs in replicasets.values():
        ref = controller_ref(rs)
        if ref is None or ref.get("uid") != uid:
            continue
        if int((rs.get("spec") or {}).get("replicas") or 0) > 0 or \
                int((rs.get("status") or {}).get("replicas") or 0) > 0:
            live += 1
    return live > 1


def room_for_stand_in(pod: Mapping[str, Any], nodes: Iterable[Obj], pods: Iterable[Obj]
                      ) -> bool:
    """Does a copy of `pod` fit on a node other than its own (drainsafe.placement)?"""
    own = (pod.get("spec") or {}).get("nodeName")
    candidates = [n for n in nodes if _meta(n).get("name") != own]
    bound: dict[str, list[Obj]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node:
            bound.setdefault(str(node), []).append(p)
    stand_in = {"metadata": {k: v for k, v in _meta(pod).items()
                             if k in ("namespace", "labels", "ownerReferences")},
                "spec": {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}}
    best, _ = placement.choose(candidates, stand_in, bound)
    return best is not None


def held_pods(members: Iterable[Obj]) -> set[str]:
    """Active pods that asked for a stand-in and were not released."""
    out = set()
    for p in members:
        annotations = _meta(p).get("annotations") or {}
        if is_active(p) and HOLD_ANNOTATION in annotations \
                and RELEASED_ANNOTATION not in annotations:
            out.add(pod_key(p))
    return out


def gather(pod: Obj, *, namespace: Obj | None, deployments: Mapping[str, Obj],
           replicasets: Mapping[str, Obj], pods: Mapping[str, Obj], nodes: Mapping[str, Obj],
           record_of: RecordReader, let_go: Iterable[str] = (), now: dt.datetime,
           dry_run: bool = False) -> Facts:
    """The decision's facts for an eviction of `pod`. Pure."""
    meta = _meta(pod)
    kind, deployment_name = deployment_of(pod, replicasets)
    status = pod.get("status") or {}
    pfacts = PodFacts(
        namespace=str(meta.get("namespace")), name=str(meta.get("name")),
        uid=str(meta.get("uid") or ""), opted_in=opted_in(pod, namespace),
        phase=str(status.get("phase") or "Pending"),
        terminating=bool(meta.get("deletionTimestamp")), ready=is_ready(pod), owner_kind=kind)
    held_since = _parse_time((meta.get("annotations") or {}).get(HOLD_ANNOTATION))
    held_for = None if held_since is None else max(0.0, (now - held_since).total_seconds())
    deployment = (deployments.get(f"{pfacts.namespace}/{deployment_name}")
                  if deployment_name else None)
    if deployment is None:
        return Facts(pfacts, None, None, room=False, held_for=held_for, dry_run=dry_run)
    members = workload_pods(deployment, pods.values(), replicasets)
    gone = set(let_go)
    min_ready = int((deployment.get("spec") or {}).get("minReadySeconds") or 0)
    available = sum(1 for p in members if is_active(p) and pod_key(p) not in gone
                    and is_available(p, min_ready, now))
    workload = WorkloadFacts(
        name=str(deployment_name),
        replicas=int((deployment.get("spec") or {}).get("replicas", 1)),
        available=available, mid_rollout=mid_rollout(deployment, replicasets))
    record = record_of(deployment)
    surge = None
    if record is not None:
        active = {pod_key(p) for p in members if is_active(p)}
        surge = SurgeFacts(record.replicas,
                           frozenset((set(record.pods) & active) | held_pods(members)),
                           owned=record.guard)
    room = room_for_stand_in(pod, nodes.values(), pods.values()) if surge is None else True
    return Facts(pfacts, workload, surge, room=room, held_for=held_for, dry_run=dry_run)
