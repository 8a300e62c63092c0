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
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from drainsafe.controller.decision import Hold, Release, SurgeKind
from drainsafe.controller.engine import SurgeEngine
from drainsafe.controller.events import EventRecorder
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
from drainsafe.kube.objects import WorkloadRef, autoscaler_for, key_of, meta, node_of, uid_of

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
        record = engine.record_of(dep)
        workload = WorkloadRef(kind, str(meta(dep).get("namespace")),
                               str(meta(dep).get("name")))
        if record is not None and not record.guard:
            return  # a `drainsafe drain` surge: it restores its own
        if record is None:
            if not wanting:
                return
            first = next(p for p in members if key_of(p) in wanting)
            hpa = autoscaler_for(workload, self.view.autoscalers.cache.values())
            record = await engine.begin(
                workload, node=node_of(first) or "",
                autoscaler=key_of(hpa) if hpa is not None else None,
                pods={key_of(p): uid_of(p) for p in members if key_of(p) in wanting})
            if not record.guard:
                return  # a `drainsafe drain` recorded first: its surge, not ours
            self.metrics.surges.inc()
            self.events.emit(dep, kind, "SurgeForEviction",
                             f"surging {record.replicas} -> {record.replicas + len(held)} "
                             f"for a stand-in of {', '.join(sorted(held))}")
        if held:
            target = record.replicas + len(held)
            if int((dep.get("spec") or {}).get("replicas", 1)) != target:
                await engine.set_scale(workload, record, target)
            return
        if kind == "StatefulSet" and recreations_pending(dep, members, record.replicas):
            return  # the restore removes the stand-in: not before the evicted are back
        await engine.finish(workload, record)
        self.metrics.restores.inc()
        self.events.emit(dep, kind, "SurgeRestored",
                         f"restored to {record.replicas} replicas: no eviction is held")
