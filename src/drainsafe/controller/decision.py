"""Whether an eviction waits for a stand-in: a pure function of plain data.

The guard answers a pods/eviction admission review (kube-apiserver calls it before the
PodDisruptionBudget check, EvictionREST.Create's createValidation) with one of:

- **Allow** at once when no stand-in is needed: the pod did not opt in, it has finished
  (Succeeded/Failed), it is already terminating, it is not Ready (it serves nothing, and the
  eviction API itself lets not-Ready pods go without using the budget), or the workload
  already has an Available pod beyond its desired scale (recorded before a surge), so the
  eviction leaves at least the desired count Available. The PDB still decides afterwards.
- **Hold** (429, the guard's message): a surge is asked for (or already recorded, by the
  guard or by `drainsafe drain`, so the same workload is never surged twice) and the stand-in
  is not yet Ready and Available.
- **Release** (allow, with an Event saying why) when a stand-in cannot help: a pod without a
  Deployment, StatefulSet or LeaderWorkerSet (nothing to scale), a pod whose StatefulSet has
  a controller of its own other than a LeaderWorkerSet the guard sees (that controller sets
  the StatefulSet's replicas, so a surge there would be undone), and, after
  the hold limit, no room for a stand-in, a rollout in progress (a Deployment's scale is
  spread over the ReplicaSets by proportional scaling, website deployment.md), or a stand-in
  that never became Available. So the guard never fails a managed upgrade (EKS gives a node
  15 minutes before PodEvictionFailure, AKS 30 by default).

Deployment-owned pods (through their ReplicaSet's owner) and StatefulSet pods are surged.
A StatefulSet's stand-in cannot take the evicted pod's identity and need not: the scale goes
up by one, the new highest ordinal serves while the evicted ordinal is recreated under its
own name (kubernetes v1.33.0 pkg/controller/statefulset/stateful_set_control.go
processReplica), and the restore removes the highest ordinal, the stand-in
(processCondemned). The capacity rule is the same for both kinds; when the restore may run
differs (drainsafe.controller.reconciler).

A LeaderWorkerSet's group pods (kubernetes-sigs/lws v0.10.0) are surged by whole groups,
never through their leader or worker StatefulSets, whose replicas lws sets
(pkg/controllers/leaderworkerset_controller.go, pod_controller.go): the unit is the group
(`PodFacts.unit`, its leader's key), the capacity is whole Ready groups, the scale is the
LWS's in groups, a stand-in is a new highest group (drainsafe.drain.groups, the rules
`drainsafe drain` uses too), and a pod whose group is not whole Ready serves nothing as a
group, so its eviction costs no capacity. One pod evicted takes its group down (lws's
default restartPolicy), so the Hold lasts until a stand-in group is entirely Ready, and,
as the budgets count pods, until they let a whole group go (drainsafe.pdb.GroupBudget over
status.disruptionsAllowed: the pacing `drainsafe drain` uses).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from drainsafe.pdb import GroupBudget

GUARD_LABEL = "drainsafe.io/guard"


class AllowReason(enum.StrEnum):
    DRAIN_SURGED = "surged-by-drain"
    NOT_OPTED_IN = "not-opted-in"
    FINISHED = "finished"
    TERMINATING = "terminating"
    NOT_READY = "not-ready"
    CAPACITY = "capacity-beyond-desired"
    STAND_IN_READY = "stand-in-available"
    DRY_RUN = "dry-run"


class ReleaseReason(enum.StrEnum):
    NO_CONTROLLER = "no-deployment"
    NO_ROOM = "no-room"
    MID_ROLLOUT = "mid-rollout"
    TIMEOUT = "stand-in-not-available"
    NO_ENGINE = "no-surge-engine"
    MANAGED = "workload-has-a-controller"
    # A LeaderWorkerSet's budget never let a whole group go within the hold limit.
    BUDGET = "budget-below-a-group"


@dataclass(frozen=True)
class PodFacts:
    namespace: str
    name: str
    uid: str
    opted_in: bool
    phase: str
    terminating: bool
    ready: bool
    owner_kind: str | None  # "Deployment", "StatefulSet", "ReplicaSet" (bare), "DaemonSet"...
    # The controller of the pod's StatefulSet ("LeaderWorkerSet/llm"), when it has one
    # and the guard does not surge through it.
    managed_by: str | None = None
    # What a stand-in replaces ("ns/name"): the pod, or for a LeaderWorkerSet pod its
    # group (its leader's key, drain.groups.group_unit).
    unit: str | None = None


SurgeKind = Literal["Deployment", "StatefulSet", "LeaderWorkerSet"]


@dataclass(frozen=True)
class WorkloadFacts:
    """The Deployment, StatefulSet or LeaderWorkerSet behind the pod."""

    name: str
    replicas: int  # spec.replicas now (groups, for a LeaderWorkerSet)
    available: int  # its Available pods, counting no terminating pod (whole Ready groups)
    mid_rollout: bool  # a rollout (Deployment) or rolling update (StatefulSet) under way
    kind: SurgeKind = "Deployment"
    # A LeaderWorkerSet's pods per group; the fewest disruptions the PDBs over the pod
    # allow now (status.disruptionsAllowed, drainsafe.pdb.status_disruptions), None: none.
    group_size: int | None = None
    budget_allows: int | None = None


@dataclass(frozen=True)
class SurgeFacts:
    """The surge record on the workload (drainsafe.io/surge), whoever wrote it."""

    replicas: int  # the scale before the surge
    # "ns/name" of the active pods it surges for (and the held ones); their groups
    # (PodFacts.unit) for a LeaderWorkerSet
    pods: frozenset[str]
    owned: bool = True  # written by the guard; False: by `drainsafe drain`, which paces itself


@dataclass(frozen=True)
class Facts:
    pod: PodFacts
    workload: WorkloadFacts | None
    surge: SurgeFacts | None
    room: bool  # a stand-in fits on a schedulable node other than the pod's
    held_for: float | None  # seconds since the first hold of this pod, None if never held
    dry_run: bool = False
    can_surge: bool = True  # False: this build has no surge engine, so no stand-in will come


@dataclass(frozen=True)
class Allow:
    reason: AllowReason


@dataclass(frozen=True)
class Hold:
    message: str
    surge_to: int | None  # the scale to ask for; None: hold without surging (waiting for room)
    waiting_for: str  # a short label for metrics: "surge", "stand-in", "room", "rollout"


@dataclass(frozen=True)
class Release:
    reason: ReleaseReason
    message: str


Verdict = Allow | Hold | Release


def decide(facts: Facts, *, hold_limit: float) -> Verdict:
    """The guard's answer for one eviction (see the module docstring)."""
    pod = facts.pod
    if not pod.opted_in:
        return Allow(AllowReason.NOT_OPTED_IN)
    if pod.phase in ("Succeeded", "Failed"):
        return Allow(AllowReason.FINISHED)
    if pod.terminating:
        return Allow(AllowReason.TERMINATING)
    if not pod.ready:
        return Allow(AllowReason.NOT_READY)
    workload = facts.workload
    if pod.managed_by is not None:
        # Its controller sets the StatefulSet's replicas (a LeaderWorkerSet sizes its
        # leader and worker StatefulSets): a surge there would be taken back or fight it.
        return Release(ReleaseReason.MANAGED,
                       f"pod {pod.namespace}/{pod.name} belongs to a StatefulSet that "
                       f"{pod.managed_by} controls: the guard does not scale it, so the "
                       "eviction is not held")
    if pod.owner_kind not in ("Deployment", "StatefulSet", "LeaderWorkerSet") \
            or workload is None:
        return Release(ReleaseReason.NO_CONTROLLER,
                       f"pod {pod.namespace}/{pod.name} is not part of a Deployment, a "
                       "StatefulSet or a LeaderWorkerSet: there is nothing to surge, so the "
                       "eviction is not held")
    surge = facts.surge
    desired = surge.replicas if surge is not None else workload.replicas
    victim = f"{pod.namespace}/{pod.name}"
    key = pod.unit or victim
    if surge is not None and not surge.owned and key in surge.pods:
        # `drainsafe drain` surged for this very pod and evicts it only once its stand-in
        # is Ready: holding it would hold the drain against itself.
        return Allow(AllowReason.DRAIN_SURGED)
    # Stand-ins already promised to other pods of the record are not this pod's.
    reserved = len(surge.pods - {key}) if surge is not None else 0
    held = facts.held_for or 0.0
    over = held >= hold_limit
    where = f"{workload.kind.lower()} {pod.namespace}/{workload.name}"
    if workload.available - 1 >= desired + reserved:
        surged = surge is not None and key in surge.pods
        allow = Allow(AllowReason.STAND_IN_READY if surged else AllowReason.CAPACITY)
        size = workload.group_size
        if size is None or workload.budget_allows is None or facts.dry_run or \
                GroupBudget(workload.budget_allows, size).groups_allowed >= 1:
            return allow
        # The budget counts pods; the eviction of one takes its whole group (lws's group
        # restart): hold until the budget lets `size` pods go, as `drainsafe drain` paces.
        if over:
            return Release(ReleaseReason.BUDGET,
                           f"the budget over {where} let {workload.budget_allows} pod(s) go, "
                           f"less than a group of {size}; released after {held:.0f} s")
        return Hold(f"drainsafe guard: the budget over {where} lets "
                    f"{workload.budget_allows} pod(s) go and the eviction of {victim} takes "
                    f"its group of {size}; holding it until the budget allows a whole group "
                    f"(at most {hold_limit:.0f} s)", None, "budget")
    if facts.dry_run:
        return Allow(AllowReason.DRY_RUN)
    if workload.mid_rollout and surge is None:
        if over:
            return Release(ReleaseReason.MID_ROLLOUT,
                           f"{where} is mid-rollout: a surge would be spread over its "
                           f"ReplicaSets; released after {held:.0f} s")
        return Hold(f"drainsafe guard: {where} is mid-rollout; holding the eviction of "
                    f"{victim} until it finishes (at most {hold_limit:.0f} s)", None, "rollout")
    if not facts.room and surge is None:
        if over:
            return Release(ReleaseReason.NO_ROOM,
                           f"no room for a stand-in of {where} on another schedulable node; "
                           f"released after {held:.0f} s")
        return Hold(f"drainsafe guard: no room for a stand-in of {where} on another node; "
                    f"holding the eviction of {victim} (at most {hold_limit:.0f} s)", None, "room")
    if over:
        return Release(ReleaseReason.TIMEOUT,
                       f"the stand-in of {where} was not Available after {held:.0f} s")
    if surge is not None and not surge.owned:
        return Hold(f"drainsafe guard: {where} is being surged by a drainsafe drain; holding "
                    f"the eviction of {victim} until that surge is done (at most "
                    f"{hold_limit:.0f} s)", None, "surge")
    if surge is None and not facts.can_surge:
        return Release(ReleaseReason.NO_ENGINE,
                       f"this drainsafe build cannot surge {where}, so no stand-in will come; "
                       "the eviction is not held")
    pods = (surge.pods if surge is not None else frozenset()) | {key}
    target = desired + len(pods)
    if workload.kind == "LeaderWorkerSet":
        return Hold(f"drainsafe guard: holding the eviction of {victim} until a stand-in "
                    f"group is entirely Ready ({where}: {workload.available} of {target} "
                    f"groups Ready, scaled {desired} -> {target} groups)", target, "stand-in")
    return Hold(f"drainsafe guard: holding the eviction of {victim} until a stand-in is Ready "
                f"and Available ({where}: {workload.available} of {target} available, "
                f"scaled {desired} -> {target})", target, "stand-in")
