"""The workloads behind the pods on a node: what the planner reads, and what it resolves.

A pod's workload is its top controller, followed through the ownerReference with
controller: true (kube.objects.controller_ref): ReplicaSet -> Deployment as the deployment
controller owns its ReplicaSets. A pod of a LeaderWorkerSet group belongs to the LWS
(kubernetes-sigs/lws v0.10.0): a worker is owned by its group's worker StatefulSet, which
is owned by the leader pod, which is owned by the leader StatefulSet, which the LWS owns
(pkg/controllers/pod_controller.go, leaderworkerset_controller.go); lws labels every pod
of the chain with the set's name and the group index (kube.objects.lws_group_of), so the
plan resolves a pod owned by a StatefulSet and labelled so to the LWS of that name when
it exists. Its scale is counted in groups of `group_size` pods. The plan resolves each
workload once, with its scale and its label selector (`WorkloadSelector`: the drain's
watch tells the workload's pods by it), so the executing side never reads a controller's
spec again. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drainsafe.drain.ownership import GUARDED_KINDS, SurgeRecord, guard_surged
from drainsafe.kube.objects import (
    LWS_NAME_LABEL,
    WorkloadRef,
    controller_ref,
    lws_group_of,
    lws_recreates_group,
    lws_size,
    meta,
    started_up_seconds,
)
from drainsafe.labels import Selector, SelectorError, from_label_selector

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class ClusterState:
    """What the planner reads. `controllers` maps "Kind/namespace/name" (str of a
    WorkloadRef) to the object (ReplicaSets, Deployments, StatefulSets, ...)."""

    nodes: Sequence[Obj]
    pods: Sequence[Obj]
    pdbs: Sequence[Obj] = ()
    controllers: Mapping[str, Obj] = field(default_factory=dict)
    autoscalers: Sequence[Obj] = ()  # HorizontalPodAutoscalers (autoscaling/v2)


GROUP_KIND = "LeaderWorkerSet"


@dataclass(frozen=True)
class Workload:
    kind: str
    namespace: str
    name: str
    replicas: int | None  # desired; None when the controller is not known (in groups
    # for a LeaderWorkerSet)
    group_size: int | None = None  # pods per group (a LeaderWorkerSet), else None
    recreates_group: bool = False  # one pod's eviction takes its whole group (lws)

    @property
    def pods_per_replica(self) -> int:
        return self.group_size or 1

    @property
    def ref(self) -> WorkloadRef:
        return WorkloadRef(self.kind, self.namespace, self.name)

    @property
    def key(self) -> str:
        return str(self.ref)


@dataclass(frozen=True)
class WorkloadSelector:
    """How the drain's watch tells a workload's pods, and how many it wants Available."""

    key: str  # str of the WorkloadRef, "Kind/ns/name"
    namespace: str
    selector: Selector
    min_ready_seconds: float = 0.0
    replicas: int = 0  # desired Ready count after the drain (the recorded one on a rerun)
    group_size: int | None = None  # a LeaderWorkerSet: replicas counts whole Ready groups


def resolve_workload(pod: Obj, controllers: Mapping[str, Obj]) -> Workload | None:
    """The top controller (ReplicaSet -> Deployment; StatefulSet -> LeaderWorkerSet) and
    its desired replicas."""
    ref = controller_ref(pod)
    if ref is None:
        return None
    ns = str(meta(pod).get("namespace") or "")
    kind, name = str(ref.get("kind")), str(ref.get("name"))
    group = lws_group_of(pod) if kind == "StatefulSet" else None
    lws = None if group is None else controllers.get(str(WorkloadRef(GROUP_KIND, ns, group[0])))
    if group is not None and lws is not None:
        value = (lws.get("spec") or {}).get("replicas")
        return Workload(kind=GROUP_KIND, namespace=ns, name=group[0],
                        replicas=value if isinstance(value, int) else 1,
                        group_size=lws_size(lws), recreates_group=lws_recreates_group(lws))
    obj = controllers.get(str(WorkloadRef(kind, ns, name)))
    if kind == "ReplicaSet" and obj is not None:
        parent = controller_ref(obj)
        if parent is not None and parent.get("kind") == "Deployment":
            dep = controllers.get(str(WorkloadRef("Deployment", ns, str(parent.get("name")))))
            if dep is not None:
                obj, kind, name = dep, "Deployment", str(parent.get("name"))
    replicas = None
    if obj is not None:
        value = (obj.get("spec") or {}).get("replicas")
        replicas = int(value) if isinstance(value, int) else 1
    return Workload(kind=kind, namespace=ns, name=name, replicas=replicas)


def workload_selector(key: str, obj: Obj | None, replicas: int | None
                      ) -> WorkloadSelector | None:
    """The selector of the workload `key` from its controller object, or None when the
    controller, its scale or its selector is not known (or the selector is invalid, which
    the API server would not have stored)."""
    spec = (obj or {}).get("spec") or {}
    if obj is not None and replicas is not None and WorkloadRef.parse(key).kind == GROUP_KIND:
        # lws selects a set's pods by its name label (the HPA selector adds the leader's
        # worker-index); capacity is counted in whole Ready groups.
        return WorkloadSelector(key=key, namespace=WorkloadRef.parse(key).namespace,
                                selector=from_label_selector({"matchLabels": {
                                    LWS_NAME_LABEL: WorkloadRef.parse(key).name}}),
                                replicas=replicas, group_size=lws_size(obj))
    if obj is None or replicas is None or not spec.get("selector"):
        return None
    try:
        selector = from_label_selector(spec["selector"])
    except SelectorError:
        return None
    return WorkloadSelector(key=key, namespace=WorkloadRef.parse(key).namespace,
                            selector=selector,
                            min_ready_seconds=float(spec.get("minReadySeconds") or 0),
                            replicas=replicas)


def surge_record(obj: Obj) -> SurgeRecord | None:
    """The workload's surge record; an unreadable one counts as none here (the drain's
    own guarded write reports it)."""
    try:
        return SurgeRecord.of(obj)
    except ValueError:
        return None


def owned_replicasets(state: ClusterState, deployment: Obj) -> list[Obj]:
    ns, name = meta(deployment).get("namespace"), meta(deployment).get("name")
    out = []
    for key, obj in state.controllers.items():
        if WorkloadRef.parse(key).kind != "ReplicaSet" or meta(obj).get("namespace") != ns:
            continue
        ref = controller_ref(obj)
        if ref is not None and ref.get("kind") == "Deployment" and ref.get("name") == name:
            out.append(obj)
    return out


def pod_template(obj: Obj) -> Obj:
    """The workload's pod template (a LeaderWorkerSet: its leader's, else its workers')."""
    spec = obj.get("spec") or {}
    lwt = spec.get("leaderWorkerTemplate")
    if isinstance(lwt, Mapping):
        return lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}
    return spec.get("template") or {}


def observed_startup(state: ClusterState, workload: str, template: Obj) -> float | None:
    """A replacement's start-up: the longest observed on the workload's Ready pods, else the
    readiness probe's initialDelaySeconds."""
    seen = [
        t for p in state.pods
        if (w := resolve_workload(p, state.controllers)) is not None and w.key == workload
        and (t := started_up_seconds(p)) is not None
    ]
    if seen:
        return max(seen)
    delays = [
        float((c.get("readinessProbe") or c.get("startupProbe") or {})
               .get("initialDelaySeconds") or 0)
        for c in ((template.get("spec") or {}).get("containers") or [])
    ]
    return max(delays) if delays and max(delays) > 0 else None


def guard_surges(state: ClusterState) -> list[str]:
    """Workloads ("Kind/ns/name") the eviction guard has surged right now: their
    stand-ins hold room that its restore gives back within seconds to minutes."""
    return sorted(key for key, obj in state.controllers.items()
                  if WorkloadRef.parse(key).kind in GUARDED_KINDS and guard_surged(obj))
