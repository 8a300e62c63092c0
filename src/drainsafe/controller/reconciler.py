"""The leader's surge and restore (only the leader changes scales).

For each Deployment with a pod the decision holds for a stand-in (a Hold with a surge,
never one waiting for room or a rollout) the reconciler records and starts a surge through
the drain's surge engine (drainsafe.controller.engine) to the recorded scale plus one per
held pod, and restores the recorded scale once no held pod is left (evicted, gone, or
released). It works from the record on the Deployment and the annotations on the pods, so
a new leader finishes or restores what the previous one started. A hold the drainer
stopped retrying is released here after the hold limit too, with the reviewer's rule, so
no surge outlives its reason.

When the scale comes back down after an eviction, the ReplicaSet removes the replacement
it just created for the evicted pod (not Ready yet, so it ranks first; drainsafe.drain.scale
cites the ranking), never a serving pod.

A StatefulSet's evicted pod is recreated under its own name, so the reconciler keeps the
surge until every ordinal below the recorded scale is back, active and Ready (on another
node: its own is cordoned), and only then restores; the StatefulSet controller then
removes the highest ordinal, the stand-in (kubernetes v1.33.0
pkg/controller/statefulset/stateful_set_control.go processReplica, processCondemned).
Restoring earlier would take the stand-in while the evicted ordinal is still starting.

A LeaderWorkerSet is surged by whole groups (kubernetes-sigs/lws v0.10.0), with the rules
`drainsafe drain` uses (drainsafe.drain.groups) and the same engine: the record names the
held groups' pods (all of a group's pods when lws recreates the group), the scale is the
recorded groups plus one per group with a held pod, through the LWS's scale subresource,
and the restore waits until no pod is held and every group below the recorded scale is
whole Ready again: lws then removes the highest group indices, the stand-ins
(pkg/controllers/leaderworkerset_controller.go lowers the leader StatefulSet; each
leader takes its worker StatefulSet, pod_controller.go).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from drainsafe.controller.decision import Hold, Release, SurgeKind
from drainsafe.controller.engine import SurgeEngine
from drainsafe.controller.events import EventRecorder
from drainsafe.controller.groupfacts import held_groups
from drainsafe.controller.holds import Holds
from drainsafe.controller.leader import LeaderElector
from drainsafe.controller.metrics import GuardMetrics
from drainsafe.controller.record import is_held
from drainsafe.controller.reviewer import Reviewer
from drainsafe.controller.view import (
    ClusterView,
    held_pods,
    recreations_pending,
    workload_pods,
)
from drainsafe.drain import groups
from drainsafe.drain.scale import NotOurSurge
from drainsafe.kube.objects import (
    WorkloadRef,
    autoscaler_for,
    key_of,
    lws_ready_groups,
    lws_recreates_group,
    lws_size,
    meta,
    node_of,
    uid_of,
)

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class Reconciler:
    def __init__(self, view: ClusterView, reviewer: Reviewer, holds: Holds,
                 events: EventRecorder, engine: SurgeEngine | None, metrics: GuardMetrics
                 ) -> None:
        self.view, self.reviewer, self.holds, self.events = view, reviewer, holds, events
        self.engine, self.metrics = engine, metrics

    async def run(self, elector: LeaderElector, period: float) -> None:
        """Reconcile every `period` seconds while this replica leads."""
        while True:
            if elector.is_leader:
                try:
                    await self.reconcile()
                except Exception:  # the loop outlives any one bad pass; the next retries
                    log.exception("reconcile failed; retrying")
            await asyncio.sleep(period)

    async def reconcile(self) -> None:
        """One pass over the Deployments and StatefulSets: surge for held pods, restore
        when none is left (and, for a StatefulSet, every evicted ordinal is back Ready)."""
        if self.engine is None:
            return
        for dep in list(self.view.deployments.cache.values()):
            await self._workload("Deployment", dep, self.engine)
        for sts in list(self.view.statefulsets.cache.values()):
            await self._workload("StatefulSet", sts, self.engine)
        for lws in list(self.view.lws_cache().values()):
            await self._workload("LeaderWorkerSet", lws, self.engine)

    def _members(self, kind: SurgeKind, dep: Obj) -> list[Obj]:
        return workload_pods(kind, dep, self.view.pods().values(),
                             self.view.replicasets.cache)

    async def _workload(self, kind: SurgeKind, dep: Obj, engine: SurgeEngine) -> None:
        # Holds the drainer stopped asking about are released here, with the same rule;
        # and only a hold the decision answers with a surge asks for one: a pod held for
        # room or for a rollout must not be surged for (a stand-in with no room is an
        # unschedulable pod, and its record would hide why the hold is released).
        wanting: set[str] = set()
        for p in self._members(kind, dep):
            if not is_held(p):
                continue
            verdict, _ = self.reviewer.verdict(p, dry_run=False)
            if isinstance(verdict, Release):
                await self.holds.release(p, verdict, dep, kind)
            elif isinstance(verdict, Hold) and verdict.surge_to is not None:
                wanting.add(key_of(p))
        members = self._members(kind, dep)  # a release just confirmed is no longer held
        held = held_pods(members)
        # What stands in: a pod each, or for a LeaderWorkerSet a whole group each.
        held_for = held_groups(members) if kind == "LeaderWorkerSet" else set()
        record = engine.record_of(dep)
        record_was_there = record is not None
        workload = WorkloadRef(kind, str(meta(dep).get("namespace")),
                               str(meta(dep).get("name")))
        if record is not None and not record.guard:
            return  # a `drainsafe drain` surge: it restores its own
        if record is None:
            if not wanting:
                return
            first = next(p for p in members if key_of(p) in wanting)
            hpa = autoscaler_for(workload, self.view.autoscalers.cache.values())
            pods = {key_of(p): uid_of(p) for p in members if key_of(p) in wanting}
            if kind == "LeaderWorkerSet":
                pods = groups.record_pods(workload.name, pods, members,
                                          recreates_group=lws_recreates_group(dep))
            record = await engine.begin(
                workload, node=node_of(first) or "",
                autoscaler=key_of(hpa) if hpa is not None else None, pods=pods)
            if not record.guard:
                return  # a `drainsafe drain` recorded first: its surge, not ours
        target = (groups.surge_target(record.replicas, held_for) if kind == "LeaderWorkerSet"
                  else record.replicas + len(held))
        if held and not record_was_there:
            self.metrics.surges.inc()
            what = ", ".join([f"group {g}" for g in sorted(held_for)] or sorted(held))
            self.events.emit(dep, kind, "SurgeForEviction",
                             f"surging {record.replicas} -> {target} for a stand-in of {what}")
        if held:
            if int((dep.get("spec") or {}).get("replicas", 1)) != target:
                try:
                    await engine.set_scale(workload, record, target)
                except NotOurSurge as exc:  # our cache was behind: decide again from fresh
                    log.info("not scaling: %s", exc)
            return
        if kind == "StatefulSet" and recreations_pending(dep, members, record.replicas):
            return  # the restore removes the stand-in: not before the evicted are back
        if kind == "LeaderWorkerSet" and groups.groups_pending(
                lws_ready_groups(members, lws_size(dep)), record.replicas):
            return  # likewise: the stand-in groups go only once every group is back
        try:
            await engine.finish(workload, record)
        except NotOurSurge as exc:  # restored already, or another drainer's record by now
            log.info("not restoring: %s", exc)
            return
        self.metrics.restores.inc()
        self.events.emit(dep, kind, "SurgeRestored",
                         f"restored to {record.replicas} replicas: no eviction is held")
