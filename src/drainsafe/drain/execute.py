"""Executing a drain: the I/O shell around the pure plan (drain.plan), in order:

1. preflight (drain.preflight): read the cluster and plan; any blocker refuses before
   anything changes;
2. cordon with ownership annotations, in one resourceVersion-guarded patch, and keep the
   node's progress record (drain.progress);
3. per workload, as its plan says (drain.strategy.WorkloadPlan), workloads in parallel:
   surge-first (make before break: drain.surgefirst; for a LeaderWorkerSet's groups,
   drain.groupsurge) or evict-first (break before make,
   replacement first: drain.evictfirst), both through one context (drain.context); every
   eviction goes through drain.evict (typed outcomes, UID preconditions, a per-UID retry
   queue, never a DELETE, never a budget bypass);
4. per pod, wait until it is gone and its address has left every EndpointSlice
   (drain.nodewatch);
5. done (drain.nodewatch.confirm_done): only DaemonSet and mirror pods left, the scale of
   every Deployment it scaled carried out by its controllers, every affected workload at
   its desired Ready count, no Pending pod of those workloads, endpoints settled. The
   report (drain.report) is filled as it goes.

Progress is recorded on the node after every eviction and the surge on the workload before
every scale change (drain.ownership); Ctrl-C or a crash leaves both, and running the same
drain again continues: no pod is evicted twice and the recorded scale is restored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from drainsafe.drain import evictfirst, groupsurge, surgefirst
from drainsafe.drain.capacity import CapacityHook
from drainsafe.drain.context import Deadline, DrainContext, DrainFailed
from drainsafe.drain.evict import EvictionStopped
from drainsafe.drain.nodewatch import NodeWatch, PendingPods, Stopped, Unschedulable
from drainsafe.drain.plan import DrainPlan
from drainsafe.drain.preflight import preflight
from drainsafe.drain.progress import NodeProgress
from drainsafe.drain.report import NodeReport, pod_reports
from drainsafe.drain.scale import NotOurSurge
from drainsafe.drain.settings import DrainSettings as DrainSettings  # imported from here
from drainsafe.drain.sharedsurge import Surges
from drainsafe.kube import KubeClient, KubeError, WaitTimeout
from drainsafe.kube.retry import KeptChanging

log = logging.getLogger(__name__)
Clock = Callable[[], float]

# How long past --timeout the backstop waits, so that a bounded wait's own message (what it
# waited for) is what a timed-out drain reports.
BACKSTOP_SLACK = 10.0

# What ends one workload's or one queue's part of the drain (and so the drain) with a
# message, as opposed to a bug.
STOPS = (DrainFailed, KubeError, WaitTimeout, Stopped, EvictionStopped, TimeoutError,
         KeptChanging)


class NodeDrainer:
    """Drains one node. Create, then `await run()`; the report is filled as it goes.

    `surges` (shared by the drainers of one fleet run, or of one controller leader):
    their Deployments' surges are shared, each node holding its part, and every eviction
    of one decided in turn (drain.sharedsurge); a StatefulSet's or LeaderWorkerSet's is
    one node's at a time. `on_capacity` gets each affected
    workload's Ready reading on every change the drain's watch sees (drain.capacity).
    `clock` stamps the report (wall time); `monotonic` bounds the waits.
    """

    def __init__(
        self,
        client: KubeClient,
        node: str,
        settings: DrainSettings,
        *,
        draining: Sequence[str] = (),
        clock: Clock = time.time,
        monotonic: Clock = time.monotonic,
        rng: random.Random | None = None,
        on_progress: Callable[[str], None] | None = None,
        surges: Surges | None = None,
        on_capacity: CapacityHook | None = None,
    ) -> None:
        self.client = client
        self.node = node
        self.settings = settings
        self.draining = tuple(draining)
        self.clock = clock
        self.monotonic = monotonic
        self.rng = rng or random.Random()
        self.report = NodeReport(node=node, started_at=clock())
        self._say = on_progress or (lambda _msg: None)
        self._surges = surges if surges is not None else Surges()
        self._on_capacity = on_capacity
        self.progress = NodeProgress(client, node, backoff=settings.backoff, rng=self.rng,
                                     retries=settings.request_retries, clock=clock)
        self._watch: NodeWatch | None = None

    def _planned(self, plan: DrainPlan) -> None:
        self.report.plan = plan
        self.report.pods = pod_reports(plan)

    async def run(self, *, dry_run: bool = False) -> NodeReport:
        found = await preflight(self.client, self.node, self.settings, draining=self.draining,
                                dry_run=dry_run, say=self._say, on_plan=self._planned)
        self.report.surge_nodes = list(found.surge_nodes)
        plan = found.plan
        if found.refusal:
            self.report.refused = True
            self.report.failure = found.refusal
            self.report.finished_at = self.clock()
            return self.report
        if dry_run:
            self.report.ok = True
            self.report.finished_at = self.clock()
            return self.report
        deadline = Deadline(self.settings.timeout, self.monotonic)
        await self._cordon()
        try:
            # Each wait below is bounded by the deadline and says what it waited for; this
            # bound is the guarantee that --timeout ends the drain whatever it awaits.
            async with asyncio.timeout(self.settings.timeout + BACKSTOP_SLACK):
                ctx = await DrainContext.start(
                    self.client, self.node, self.settings, namespaces=plan.namespaces,
                    selectors=plan.selectors, progress=self.progress,
                    reports={r.key: r for r in self.report.pods}, scaled=self.report.scaled,
                    deadline=deadline, clock=self.clock, monotonic=self.monotonic,
                    rng=self.rng, say=self._say, started=self._started,
                    on_capacity=self._on_capacity)
                ctx.draining = self.draining
                await self._execute(ctx, plan)
                if ctx.failure:
                    raise DrainFailed(ctx.failure)
                await self._confirm_done(ctx, plan)
            self.report.ok = True
            await self.progress.write("drained", "")
        except (DrainFailed, NotOurSurge, KubeError, WaitTimeout, KeptChanging,
                TimeoutError) as exc:
            self.report.failure = str(exc) if not isinstance(exc, TimeoutError) else (
                f"not drained within --timeout {self.settings.timeout:.0f}s")
            with contextlib.suppress(KubeError, asyncio.CancelledError, TimeoutError):
                async with asyncio.timeout(10):
                    await self.progress.write("failed", self.report.failure[:500])
        except asyncio.CancelledError:
            # Ctrl-C: the node stays cordoned and owned, a surge stays recorded on its
            # workload; say so on the node, briefly. Running the same drain again continues.
            async def record_interrupted() -> None:
                async with asyncio.timeout(5):
                    await self.progress.write("interrupted", "stopped by the operator")

            with contextlib.suppress(BaseException):
                await asyncio.shield(record_interrupted())
            raise
        finally:
            if self._watch is not None:
                await self._watch.stop()
            self.report.finished_at = self.clock()
        return self.report

    def _started(self, watch: NodeWatch) -> None:
        self._watch = watch

    async def _cordon(self) -> None:
        try:
            await self.progress.cordon(reason=self.settings.reason)
        except KeptChanging as exc:
            raise DrainFailed(f"could not cordon {self.node}: the node kept changing (409)"
                              ) from exc
        self.report.cordoned_at = self.clock()
        self._say(f"cordoned {self.node}")

    async def _execute(self, ctx: DrainContext, plan: DrainPlan) -> None:
        surged = {w.workload for w in plan.workload_plans if w.strategy == "surge"}
        tasks = [asyncio.create_task(_guarded(ctx, (
                     groupsurge.drain_groups if w.identity == "group"
                     else surgefirst.drain_workload)(ctx, plan, w, self._surges), w.workload))
                 for w in plan.workload_plans if w.strategy == "surge"]
        tasks += [asyncio.create_task(evictfirst.run_queue(ctx, plan, q.pods))
                  for q in plan.queues
                  if q.workload not in surged or not all(
                      plan.pod(k).needs_replacement for k in q.pods)]
        tasks += [asyncio.create_task(evictfirst.await_terminating(ctx, p))
                  for p in plan.pods if p.action == "wait"]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _confirm_done(self, ctx: DrainContext, plan: DrainPlan) -> None:
        try:
            self.report.done_checks = await ctx.watch.confirm_done(
                options=self.settings.options, selectors=list(plan.selectors.values()),
                drained={p.uid for p in plan.pods if p.action in ("evict", "wait")},
                remaining=ctx.remaining, unschedulable_after=self.settings.unschedulable_after,
                scaled=list(self.report.scaled), say=self._say)
        except Unschedulable as exc:
            raise DrainFailed(f"replacement {exc}; stopping further evictions (the node "
                              "stays cordoned)") from exc
        except PendingPods as exc:
            raise DrainFailed(str(exc)) from exc


async def _guarded(ctx: DrainContext, work: Coroutine[Any, Any, None], what: str) -> None:
    try:
        await work
    except STOPS as exc:
        ctx.fail(f"{what}: {exc}")
