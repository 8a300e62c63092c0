"""The strategy per workload: surge (make before break) or evict (break before make).

`plan_workloads` decides, for each workload with pods to replace, as docs/drain.md's table:
a Deployment not mid-rollout surges (+k pods in one step, k its pods on the nodes; with a
HorizontalPodAutoscaler its minReplicas is raised instead, since the HPA takes a scale
outside its bounds back: kubernetes pkg/controller/podautoscaler/horizontal.go
normalizeDesiredReplicas); a Deployment mid-rollout (kube.objects.rollout_in_progress, as
kubectl pkg/polymorphichelpers/rollout_status.go reads it) stands down to evict-first,
since a scale then is spread over its ReplicaSets (pkg/controller/deployment/sync.go,
proportional scaling). A scale alone, a surge record's (the eviction guard's or a
drain's) or its restore not yet synced by the deployment controller, is not a rollout
(the same rule), so a drain planned in that window still surges. A StatefulSet not
mid-update (kube.objects.statefulset_rollout_in_progress) surges too, with stable
identities: its k new ordinals stand in while each old pod is evicted and recreated under
its own name (pkg/controller/statefulset/stateful_set_control.go processReplica), and the restore
removes the highest ordinals, the stand-ins (processCondemned); mid-update it stands
down, since its stand-ins would start at the update revision. A LeaderWorkerSet
(kubernetes-sigs/lws v0.10.0) surges by whole groups: g new groups stand in for the g
groups with pods on the nodes, and capacity is counted in Ready groups (a group is Ready
when all its pods are: leaderworkerset_controller.go updateConditions). One pod of each
affected group is evicted, and lws recreates the whole group (restartPolicy
RecreateGroupOnPodRestart, the default: pod_controller.go handleRestartPolicy deletes the
leader, and the group's worker StatefulSet goes with it); with restartPolicy None each pod
on the nodes is evicted and recreated alone by its StatefulSet, the group not Ready
meanwhile. The restore lowers the scale and lws removes the highest group indices, the
stand-ins. Mid-update (kube.objects.lws_rollout_in_progress) it stands down, as a
StatefulSet does. Bare ReplicaSets and other controllers evict first.
Each plan carries its Ready floor and expected time. A surge record of an earlier run on
these nodes is continued (its recorded replicas are the scale to restore); a Deployment's
record whose parts are held for nodes of this run is joined (drain.sharedsurge); one of
another node's drain refuses ("surge-owned"); the eviction guard's own surge is a bounded hold the
drain waits out. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from drainsafe.drain.blockers import Blocker
from drainsafe.drain.filters import DrainOptions, Strategy
from drainsafe.drain.pods import PodPlan
from drainsafe.drain.workloads import (
    GROUP_KIND,
    ClusterState,
    Workload,
    observed_startup,
    owned_replicasets,
    pod_template,
    surge_record,
)
from drainsafe.kube.objects import (
    WorkloadRef,
    autoscaler_for,
    key_of,
    lws_recreates_group,
    lws_rollout_in_progress,
    lws_size,
    meta,
    rollout_in_progress,
    statefulset_rollout_in_progress,
)

# Who takes an old pod's place in a surge. "interchangeable" (a Deployment): the surge pods
# themselves, so the scale comes down by one right after each accepted eviction.
# "stable" (a StatefulSet): the old pod, recreated under its name by its controller; the
# stand-ins serve until the recreation is Ready elsewhere, then the restore removes them.
# "group" (a LeaderWorkerSet): whole groups stand in while each affected group is
# recreated (all its pods, or with restartPolicy None the evicted ones) under its index.
Identity = Literal["interchangeable", "stable", "group"]
IDENTITY: dict[str, Identity] = {"Deployment": "interchangeable", "StatefulSet": "stable",
                                 GROUP_KIND: "group"}


@dataclass(frozen=True)
class WorkloadPlan:
    """How one workload's pods leave the nodes, and what that costs in capacity and time.

    surge (make before break): scale up by `surge`, wait until that many new pods are Ready
    and Available on other nodes, evict the old pods, scale back. Ready never drops below
    `replicas`.
    evict (break before make): one pod at a time, each only when the workload is back at its
    Ready count; during each replacement's start-up Ready is `replicas - 1`.
    """

    workload: str
    strategy: Strategy
    pods: tuple[str, ...]  # its pods on the nodes that need a replacement
    replicas: int | None  # desired before the drain (the surge record's, on a rerun)
    surge: int  # extra replicas during the drain; 0 for evict
    floor: int | None  # lowest Ready count expected during the drain
    startup_seconds: float | None  # a replacement's start-up, as observed on its pods
    expected_seconds: float | None  # upper estimate: start-up(s) plus grace period(s)
    why: str
    autoscaler: str | None = None  # "ns/name" of the HPA that owns the scale
    resumed: bool = False  # a surge record of an earlier run on these nodes exists
    identity: Identity = "interchangeable"  # who takes an old pod's place (above)
    # A LeaderWorkerSet: replicas, surge and floor count groups of group_size pods; the
    # affected groups' indices; whether one eviction takes (and recreates) a whole group.
    group_size: int | None = None
    groups: tuple[int, ...] = ()
    recreates_group: bool = False



def plan_workloads(
    state: ClusterState,
    targets: Sequence[str],
    pods: Sequence[PodPlan],
    workloads: Mapping[str, Workload],
    options: DrainOptions,
    blockers: list[Blocker],
    evict_first: Collection[str] = (),
    sharing: Collection[str] = (),
) -> list[WorkloadPlan]:
    """Choose surge or evict for each workload with pods to replace on the nodes. Pure.
    `evict_first`: workloads whose surge has no room and whose capacity floor allows
    evict-first (drain.plan, drain.floors). `sharing`: the other nodes of this run, whose
    parts of a Deployment's surge this node's joins (drain.sharedsurge)."""
    out = []
    for key, w in sorted(workloads.items()):
        mine = [p for p in pods if p.workload == key and p.needs_replacement]
        if not mine:
            continue
        obj = state.controllers.get(key) or {}
        record = surge_record(obj)
        replicas = record.replicas if record is not None else w.replicas
        if record is not None and record.guard:
            # The eviction guard's surge for another drainer is a bounded hold, not a drain
            # left unfinished: the drain waits for its restore before surging (execute),
            # never on top of it. Its scale is no rollout (rollout_in_progress), so this
            # plan surges rather than evicting first through the guard's hold.
            record = None
        template = pod_template(obj)
        startup = observed_startup(state, key, template)
        grace = max(p.grace_seconds for p in mine)
        autoscaler = None
        strategy: Strategy = "evict"
        why = ""
        # A Deployment's surge is shared by the nodes of one run; another's is not.
        joinable = set(targets) | (set(sharing) if IDENTITY.get(w.kind) == "interchangeable"
                                   else set())
        foreign = [] if record is None else [n for n in record.nodes if n not in joinable]
        if record is not None and foreign:
            blockers.append(Blocker(
                "surge-owned", f"{w.kind} {w.namespace}/{w.name}",
                f"is surged for an unfinished drain of node {foreign[0]} (recorded "
                f"{record.at} by {record.by})",
                f"finish that drain first (drainsafe drain {foreign[0]}), or give it up "
                f"(drainsafe uncordon {foreign[0]}) which restores the scale",
                node=foreign[0]))
        if options.strategy == "evict" and record is None:
            why = "--strategy evict"
        elif key in evict_first and record is None:
            why = ("no room for a surge; evict-first keeps Ready at or above its capacity "
                   "floor")
        elif w.kind not in IDENTITY or not obj:
            why = {
                "ReplicaSet": "a bare ReplicaSet (no Deployment): evict-first",
            }.get(w.kind, f"{w.kind}: evict-first")
        else:
            identity = IDENTITY[w.kind]
            if record is not None:
                rollout = None
            elif identity == "group":
                rollout = lws_rollout_in_progress(obj)
            elif identity == "stable":
                rollout = statefulset_rollout_in_progress(obj)
            else:
                rollout = rollout_in_progress(obj, owned_replicasets(state, obj))
            if rollout is not None:
                why = (f"mid-rollout ({rollout}): a scale now is spread over the "
                       "ReplicaSets, so drainsafe stands down to evict-first"
                       if identity == "interchangeable" else
                       f"mid-update ({rollout}): stand-ins would start at the update "
                       "revision, so drainsafe stands down to evict-first")
            else:
                strategy = "surge"
                hpa = autoscaler_for(w.ref, state.autoscalers)
                if hpa is not None:
                    autoscaler = key_of(hpa)
                why = ((f"Deployment: {len(mine)} more pod(s) first, Ready elsewhere "
                        "before the old ones are evicted" if identity == "interchangeable"
                        else _group_why(w, mine) if identity == "group"
                        else f"StatefulSet: {len(mine)} more ordinal(s) first, Ready "
                        "elsewhere; each old pod is then evicted and recreated under its "
                        "name elsewhere before the scale is restored (the highest ordinals "
                        "go)")
                       + (f"; the HPA {autoscaler} owns the scale: its minReplicas is "
                          "raised instead" if autoscaler else ""))
        groups = tuple(sorted({p.group for p in mine if p.group is not None}))
        k = len(groups) if w.group_size is not None else len(mine)
        if strategy == "surge" and IDENTITY.get(w.kind) == "group":
            # The stand-in groups' start-up (their pods start together), then the evicted
            # pods' grace and the recreated groups' start-up.
            floor = replicas
            expected = None if startup is None else startup + grace + startup
        elif strategy == "surge" and IDENTITY.get(w.kind) == "stable":
            # The stand-ins' start-up (OrderedReady creates them one at a time,
            # stateful_set_control.go), then the old pods' grace and their recreations'.
            floor = replicas
            ordered = (obj.get("spec") or {}).get("podManagementPolicy") != "Parallel"
            expected = None if startup is None else (
                (k if ordered else 1) * startup + grace + startup)
        elif strategy == "surge":
            floor = replicas
            expected = None if startup is None else startup + grace
        else:
            floor = None if replicas is None else max(replicas - 1, 0)
            expected = None if startup is None else k * (startup + grace)
        if strategy == "evict" and options.floors is not None and replicas:
            _floor_blocker(options, w, obj, replicas, why, blockers)
        out.append(WorkloadPlan(
            workload=key, strategy=strategy, pods=tuple(p.key for p in mine),
            replicas=replicas, surge=k if strategy == "surge" else 0, floor=floor,
            startup_seconds=startup, expected_seconds=expected, why=why,
            autoscaler=autoscaler,
            resumed=record is not None and any(n in targets for n in record.nodes),
            identity=IDENTITY.get(w.kind, "interchangeable"), group_size=w.group_size,
            groups=groups, recreates_group=w.recreates_group))
    # A rerun after the old pods were all evicted but before the scale was restored: nothing
    # left to move, but the scale (or the HPA's bounds) still to restore.
    planned = {w.workload for w in out}
    for key, obj in sorted(state.controllers.items()):
        record = surge_record(obj)
        if (key in planned or record is None or record.guard
                or not any(n in targets for n in record.nodes)):
            continue
        bounds = record.autoscaler
        out.append(WorkloadPlan(
            workload=key, strategy="surge", pods=(), replicas=record.replicas, surge=0,
            floor=record.replicas, startup_seconds=None, expected_seconds=0.0,
            why="an earlier run surged it and was stopped before the restore: restore",
            autoscaler=None if bounds is None
            else f"{meta(obj).get('namespace')}/{bounds.name}",
            resumed=True, identity=IDENTITY.get(WorkloadRef.parse(key).kind,
                                                "interchangeable"),
            group_size=lws_size(obj) if WorkloadRef.parse(key).kind == GROUP_KIND else None,
            recreates_group=WorkloadRef.parse(key).kind == GROUP_KIND
            and lws_recreates_group(obj)))
    return out


def _floor_blocker(options: DrainOptions, w: Workload, obj: Mapping[str, object],
                   replicas: int, why: str, blockers: list[Blocker]) -> None:
    """Evict-first below the workload's capacity floor refuses (drain.floors)."""
    assert options.floors is not None
    labels = meta(obj).get("labels") or {}
    if options.floors.allows_evict_first(w.ref, labels, replicas):
        return
    floor = options.floors.floor(w.ref, labels, replicas)
    unit = "groups" if w.group_size is not None else "Ready"
    blockers.append(Blocker(
        "below-floor", f"{w.kind} {w.namespace}/{w.name}",
        f"cannot surge ({why}); evict-first would take it to {replicas - 1}/{replicas} "
        f"{unit}, below its capacity floor of {floor}",
        "make room for its surge, or lower its capacity floor (spec.capacityFloor) to "
        f"{replicas - 1} or less to allow evict-first"))


def _group_why(w: Workload, mine: Sequence[PodPlan]) -> str:
    groups = sorted({p.group for p in mine if p.group is not None})
    head = (f"LeaderWorkerSet: {len(groups)} more group(s) of {w.group_size} pods first, "
            "all Ready elsewhere; ")
    if w.recreates_group:
        return head + ("then one pod of each affected group is evicted and lws recreates the "
                       "whole group (restartPolicy RecreateGroupOnPodRestart) before the "
                       "scale is restored (the highest group indices go)")
    return head + ("then each of its pods here is evicted and recreated alone by its "
                   "StatefulSet (restartPolicy None; the group is not Ready meanwhile) "
                   "before the scale is restored (the highest group indices go)")
