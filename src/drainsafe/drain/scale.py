"""Surge-first scaling: a workload scaled up by k and back, recorded on it before any change.

One engine for the scalable kinds (drain.ownership.SURGE_KINDS: Deployment, StatefulSet,
LeaderWorkerSet), used by the drain and by the eviction guard. The record
(drain.ownership.SurgeRecord, annotation drainsafe.io/surge) is written on the workload (its
spec.replicas is what the scale subresource reads and writes for every kind) in a
resourceVersion-guarded patch before the first scale change, and holds the
scale before the drain, or the HorizontalPodAutoscaler's minReplicas/maxReplicas before it.
Whatever stops the drain (Ctrl-C, SIGKILL, a crash), a rerun of the same drain, or
`drainsafe uncordon`, sets exactly those values again and only then removes the record.

An HPA owns its target's spec.replicas and would take a direct scale back on its next sync
(kubernetes/kubernetes pkg/controller/podautoscaler/horizontal.go normalizeDesiredReplicas
clamps to [minReplicas, maxReplicas]), so for an HPA-managed Deployment the surge raises
minReplicas (and maxReplicas when needed) first, then scales the workload to the same
count, which the HPA then agrees with instead of waiting a sync period for it.

A LeaderWorkerSet's scale is written through its scale subresource (kubernetes-sigs/lws
v0.10.0 api/leaderworkerset/v1/leaderworkerset_types.go: the CRD's scale subresource maps
.spec.replicas, counted in groups); lws lowers its leader StatefulSet to match, which
removes the highest group indices, each leader taking its worker StatefulSet with it
(pkg/controllers/leaderworkerset_controller.go; the worker StatefulSet is owned by its
leader pod, pod_controller.go): the stand-in groups.

What a StatefulSet removes when the scale comes back: the highest ordinals
(kubernetes pkg/controller/statefulset/stateful_set_control.go processCondemned; with
OrderedReady one at a time and only while every other pod is healthy), which are the
stand-ins the surge created, once the pods they stood in for are recreated and Ready.

What the ReplicaSet removes when the scale comes back (pkg/controller/controller_utils.go
ActivePodsWithRanks, the order of getPodsToDelete): among *active* pods only (a pod with a
deletionTimestamp, which every evicted pod has, is no longer counted) it deletes unassigned
before assigned, Pending before Running, not Ready before Ready, lower
controller.kubernetes.io/pod-deletion-cost first, more pods of the set on the same node
first, then the more recently Ready and the newer, compared in log2 buckets of their age
(LogarithmicScaleDown: within one bucket the pod UID decides, so a surge pod Ready a few
seconds after the others may not be the one removed). drainsafe lowers the scale by one only
after each eviction the server accepted, so the scale-down either finds nothing to remove
(the ReplicaSet had not yet replaced the evicted pod) or removes the replacement it had just
created for the evicted pod, which is not Ready yet (it has not started up), so it ranks
first. That replacement can also be made after the evicted pod is gone, by a ReplicaSet
that has not yet seen the lowered scale: the drain is done only once the deployment
controller has carried the scale out (drain.nodewatch.confirm_done). A Ready serving pod
is removed only when restoring a surge that is given up before its evictions (uncordon, or
a restore after the old pods left some other way); Ready stays at the recorded scale then
too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

from drainsafe.drain.ownership import (
    SURGE,
    SURGE_KINDS,
    AutoscalerBounds,
    SurgedWorkload,
    SurgePart,
    SurgeRecord,
    surge_clear_patch,
    surge_record_patch,
)
from drainsafe.drain.parts import target as shared_target
from drainsafe.drain.parts import with_part, without_pods
from drainsafe.kube import KubeClient, NotFound, api_path
from drainsafe.kube.objects import WorkloadRef, rfc3339
from drainsafe.kube.retry import retry_on_conflict
from drainsafe.maintenance.facts import maintenance_facts

Obj = dict[str, Any]


def workload_path(ref: WorkloadRef) -> str:
    """The workload's object: the record (and, but for a custom resource, spec.replicas)
    is written there."""
    kind = SURGE_KINDS[ref.kind]
    return api_path(kind.api_version, kind.plural, namespace=ref.namespace, name=ref.name)


def scale_path(ref: WorkloadRef) -> str:
    """Where the workload's replicas are written: the object, or its scale subresource."""
    kind = SURGE_KINDS[ref.kind]
    if not kind.scale_subresource:
        return workload_path(ref)
    return api_path(kind.api_version, kind.plural, namespace=ref.namespace, name=ref.name,
                    subresource="scale")


def hpa_path(namespace: str, name: str) -> str:
    return api_path("autoscaling/v2", "horizontalpodautoscalers", namespace=namespace, name=name)


async def begin(client: KubeClient, workload: str, *, node: str, autoscaler: str | None,
                pods: dict[str, str], guard: bool = False,
                clock: Callable[[], float] = time.time) -> SurgeRecord:
    """Record the surge on the workload (if no record is there yet) and return the record:
    the one already there when there is one, whoever wrote it (see its `node` and
    `guard`). Changes no scale: call `set_scale` after."""
    ref = WorkloadRef.parse(workload)
    namespace, path = ref.namespace, workload_path(ref)

    async def decide(obj: Obj) -> SurgeRecord:
        existing = SurgeRecord.of(obj)
        if existing is not None:
            return existing
        bounds = None
        if autoscaler is not None:
            hpa = await client.get(hpa_path(namespace, autoscaler.split("/", 1)[1]))
            spec = hpa.get("spec") or {}
            bounds = AutoscalerBounds(
                name=str((hpa.get("metadata") or {}).get("name")),
                min_replicas=spec.get("minReplicas"), max_replicas=int(spec["maxReplicas"]))
        record = SurgeRecord(node=node, replicas=int((obj.get("spec") or {}).get("replicas", 1)),
                             by=client.identity.actor(), at=rfc3339(clock()), autoscaler=bounds,
                             pods=pods, guard=guard)
        await client.patch(path, surge_record_patch(obj, record))
        return record

    return await retry_on_conflict(client, path, decide)


class NotOurSurge(Exception):
    """The workload no longer carries the surge record a scale change was decided from:
    restored and removed meanwhile, or another drainer's. Nothing was written."""


def same_surge(a: SurgeRecord, b: SurgeRecord) -> bool:
    """One record, as written once (who, when, for which node, which tool)."""
    return (a.node, a.by, a.at, a.guard) == (b.node, b.by, b.at, b.guard)


async def set_scale(client: KubeClient, workload: str, record: SurgeRecord, target: int) -> None:
    """Scale to `target` (the record's replicas plus what is still surged), only while the
    workload carries `record`: a decision taken from a stale copy (the guard's informer
    cache a moment behind a restore and another drainer's record) must not scale on top
    of someone else's surge. The object's scale is written with the resourceVersion the
    record was read at; a scale subresource (LeaderWorkerSet) right after the check. With
    an HPA, its bounds first: minReplicas up to the target while surged, exactly the
    recorded values once the target is back at the recorded scale."""
    ref = WorkloadRef.parse(workload)
    path = workload_path(ref)
    bounds = record.autoscaler

    async def decide(obj: Obj) -> None:
        current = SurgeRecord.of(obj)
        if current is None or not same_surge(current, record):
            raise NotOurSurge(f"{workload}: its surge record is not the one for {record.node}"
                              f" ({'none' if current is None else 'for ' + current.node})")
        if bounds is not None:
            spec: dict[str, int | None]
            if target > record.replicas:
                spec = {"minReplicas": max(bounds.min_replicas or 1, target),
                        "maxReplicas": max(bounds.max_replicas, target)}
            else:
                spec = {"minReplicas": bounds.min_replicas, "maxReplicas": bounds.max_replicas}
            await client.patch(hpa_path(ref.namespace, bounds.name), {"spec": spec})
        if SURGE_KINDS[ref.kind].scale_subresource:
            await client.patch(scale_path(ref), {"spec": {"replicas": target}})
        else:
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            await client.patch(path, {"metadata": {"resourceVersion": rv},
                                      "spec": {"replicas": target}})

    await retry_on_conflict(client, path, decide)


async def finish(client: KubeClient, workload: str, record: SurgeRecord) -> None:
    """Restore exactly the recorded scale (and HPA bounds), then remove the record: both
    only while the workload carries this record (NotOurSurge otherwise)."""
    await set_scale(client, workload, record, record.replicas)
    path = workload_path(WorkloadRef.parse(workload))

    async def decide(obj: Obj) -> None:
        current = SurgeRecord.of(obj)
        if current is not None and same_surge(current, record):
            await client.patch(path, surge_clear_patch(obj))

    await retry_on_conflict(client, path, decide)


async def _write_shared(client: KubeClient, ref: WorkloadRef, obj: Obj,
                        bounds: AutoscalerBounds | None, base: int,
                        record: SurgeRecord | None) -> None:
    """One resourceVersion-guarded patch of a Deployment: the record (None: removed) and
    spec.replicas at its target (drain.parts.target; `base` once removed). With an
    HPA, its bounds first, as set_scale, and when they go up the record before them."""
    target = base if record is None else shared_target(record)
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    annotation = None if record is None else record.to_json()
    now = int((obj.get("spec") or {}).get("replicas", 1))
    if bounds is not None and target > now:
        # The HPA's bounds are raised before the scale, so the record that restores them
        # goes on first (a kill between the two leaves it to say what to restore).
        written = await client.patch(workload_path(ref), {
            "metadata": {"resourceVersion": rv, "annotations": {SURGE: annotation}}})
        rv = (written.get("metadata") or {}).get("resourceVersion")
    if bounds is not None:
        spec: dict[str, int | None]
        if target > base:
            spec = {"minReplicas": max(bounds.min_replicas or 1, target),
                    "maxReplicas": max(bounds.max_replicas, target)}
        else:
            spec = {"minReplicas": bounds.min_replicas, "maxReplicas": bounds.max_replicas}
        await client.patch(hpa_path(ref.namespace, bounds.name), {"spec": spec})
    await client.patch(workload_path(ref), {
        "metadata": {"resourceVersion": rv, "annotations": {SURGE: annotation}},
        "spec": {"replicas": target}})


async def join_shared(client: KubeClient, workload: str, *, seen: SurgeRecord | None,
                      node: str, part: SurgePart, autoscaler: str | None) -> SurgeRecord:
    """Add (or replace) `node`'s part of a Deployment's shared surge, the record and the
    scale in one guarded patch: a new record when `seen` is None and the workload has
    none, else only while it carries `seen` (NotOurSurge otherwise: decide again)."""
    ref = WorkloadRef.parse(workload)
    assert not SURGE_KINDS[ref.kind].scale_subresource, "a shared surge is a Deployment's"

    async def decide(obj: Obj) -> SurgeRecord:
        current = SurgeRecord.of(obj)
        if seen is None and current is None:
            bounds = None
            if autoscaler is not None:
                hpa = await client.get(hpa_path(ref.namespace, autoscaler.split("/", 1)[1]))
                spec = hpa.get("spec") or {}
                bounds = AutoscalerBounds(
                    name=str((hpa.get("metadata") or {}).get("name")),
                    min_replicas=spec.get("minReplicas"), max_replicas=int(spec["maxReplicas"]))
            started = SurgeRecord(node=node, replicas=int((obj.get("spec") or {}).get(
                "replicas", 1)), by=part.by, at=part.at, autoscaler=bounds)
            record = with_part(started, node, part)
        elif seen is not None and current is not None and same_surge(current, seen):
            record = with_part(current, node, part)
        else:
            raise NotOurSurge(f"{workload}: its surge record changed while {node} joined")
        await _write_shared(client, ref, obj, record.autoscaler, record.replicas, record)
        return record

    return await retry_on_conflict(client, workload_path(ref), decide)


async def lower_shared(client: KubeClient, workload: str, record: SurgeRecord, node: str,
                       pods: Collection[str]) -> SurgeRecord | None:
    """Take `pods` ("ns/name") out of `node`'s part, its part out once it names none,
    and the record off (the recorded scale and HPA bounds back) once no part is left:
    the record and the scale in one guarded patch, only while the workload carries
    `record` (NotOurSurge otherwise). Returns the record as written (None: removed)."""
    ref = WorkloadRef.parse(workload)

    async def decide(obj: Obj) -> SurgeRecord | None:
        current = SurgeRecord.of(obj)
        if current is None or not same_surge(current, record):
            raise NotOurSurge(f"{workload}: its surge record is not the one {node} holds a "
                              "part of")
        after = without_pods(current, node, pods)
        await _write_shared(client, ref, obj, current.autoscaler, current.replicas, after)
        return after

    return await retry_on_conflict(client, workload_path(ref), decide)


async def list_workloads(client: KubeClient) -> dict[str, list[Obj]]:
    """Every workload of the scalable kinds, by kind."""
    out: dict[str, list[Obj]] = {}
    for kind, surge in SURGE_KINDS.items():
        try:
            out[kind], _ = await client.list(api_path(surge.api_version, surge.plural))
        except NotFound:
            continue  # a kind this server does not serve (no LeaderWorkerSet CRD)
    return out


async def surged(client: KubeClient) -> list[tuple[WorkloadRef, Obj, SurgeRecord]]:
    """Every workload (of the scalable kinds) carrying a surge record."""
    out = []
    for kind, items in (await list_workloads(client)).items():
        for obj in items:
            try:
                record = SurgeRecord.of(obj)
            except ValueError:
                continue
            if record is not None:
                out.append((_ref(kind, obj), obj, record))
    return out


async def restore_all_for_node(client: KubeClient, node: str) -> list[str]:
    """Give up every surge recorded for `node`: restore and un-record. Returns the keys."""
    done = []
    for ref, _obj, record in await surged(client):
        if node not in record.holders or record.guard:  # the guard restores its own
            continue
        workload = str(ref)
        if record.parts:
            # A shared surge: this node's part goes; the last part out restores the
            # recorded scale (and HPA bounds) and removes the record.
            await lower_shared(client, workload, record, node, record.parts[node].pods)
        else:
            await finish(client, workload, record)
        done.append(workload)
    return done


async def audit_surged(client: KubeClient) -> list[SurgedWorkload]:
    """The workloads left scaled up, as `drainsafe audit` lists them
    (maintenance.facts)."""
    facts = maintenance_facts(workloads=await list_workloads(client))
    return [s.record for s in facts.surges]


def _ref(kind: str, obj: Obj) -> WorkloadRef:
    # A list's items carry no kind of their own.
    meta = obj.get("metadata") or {}
    return WorkloadRef(kind, str(meta.get("namespace") or ""), str(meta.get("name")))
