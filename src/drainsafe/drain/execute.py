"""Executing a drain: the I/O shell around the pure plan (drain.plan), in order:

1. read the cluster and plan; any blocker refuses before anything changes;
2. cordon with ownership annotations, in one resourceVersion-guarded patch (drain.cordon);
3. per workload, as its plan says (drain.plan.WorkloadPlan), workloads in parallel:
   - surge (make before break, drain.scale): record the scale on the Deployment, scale up
     by its pods on the node in one step (an HPA's minReplicas raised instead), wait until
     that many new pods are Available on other nodes, evict the old pods through the
     Eviction API as fast as their PodDisruptionBudgets allow (waiting for the budget's
     status to allow instead of taking a predictable 429), lower the scale by one per
     accepted eviction, and restore exactly the recorded scale;
   - evict (break before make): one pod at a time, each only once the workload is back at
     its Ready count;
   every eviction goes through drain.evict (typed outcomes, UID preconditions, never a
   DELETE, never a budget bypass);
4. per pod, wait until it is gone and its address has left every EndpointSlice
   (drain.nodewatch);
5. done means: only DaemonSet and mirror pods left, every affected workload at its
   desired Ready count, no Pending pod of those workloads, endpoints settled.

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from drainsafe.drain import ownership, scale
from drainsafe.drain.cordon import cordon
from drainsafe.drain.evict import EvictCounts, EvictionStopped, Evictor
from drainsafe.drain.filters import DrainOptions, classify
from drainsafe.drain.nodewatch import NodeWatch, Stopped, Unschedulable, WorkloadSelector
from drainsafe.drain.plan import DrainPlan, plan_drain
from drainsafe.drain.pods import PodPlan
from drainsafe.drain.strategy import WorkloadPlan
from drainsafe.drain.workloads import ClusterState, guard_surges
from drainsafe.kube import (
    Backoff,
    Informer,
    KubeClient,
    KubeError,
    NotFound,
    WaitTimeout,
    api_path,
)
from drainsafe.kube.objects import is_active, is_ready, is_terminal, key_of, uid_of
from drainsafe.kube.retry import KeptChanging
from drainsafe.labels import from_label_selector

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Clock = Callable[[], float]


class DrainFailed(RuntimeError):
    """The drain stopped; the node stays cordoned and recorded."""


# How long past --timeout the backstop waits, so that a bounded wait's own message (what it
# waited for) is what a timed-out drain reports.
BACKSTOP_SLACK = 10.0


@dataclass(frozen=True)
class DrainSettings:
    options: DrainOptions = field(default_factory=DrainOptions)
    timeout: float = 3600.0  # bound on one node's whole drain
    unschedulable_after: float = 20.0  # a new pod Unschedulable this long stops the drain
    gone_margin: float = 60.0  # beyond the pod's grace, before we call it stuck
    reason: str = "drainsafe drain"
    backoff: Backoff = field(default_factory=lambda: Backoff(base=1.0, cap=15.0))
    request_retries: int = 8  # transient API errors in a row before giving up
    pod_selector: str | None = None
    surge: bool = False  # no room: placeholder pods for an autoscaler, wait for room
    surge_timeout: float = 900.0
    surge_priority_class: str | None = None


@dataclass
class PodReport:
    namespace: str
    name: str
    uid: str
    workload: str | None
    action: str
    reason: str
    outcome: str = "pending"  # evicted | already-gone | skipped | failed | waited | pending
    strategy: str = ""  # surge | evict, for pods that need a replacement
    evicted_at: float | None = None
    terminated_at: float | None = None
    endpoints_clear_at: float | None = None
    replacement: str | None = None
    replacement_node: str | None = None
    replacement_ready_at: float | None = None
    budget_429s: int = 0
    rate_429s: int = 0
    transient_errors: int = 0
    detail: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class NodeReport:
    node: str
    started_at: float
    plan: DrainPlan | None = None
    cordoned_at: float | None = None
    finished_at: float | None = None
    ok: bool = False
    refused: bool = False
    failure: str = ""
    pods: list[PodReport] = field(default_factory=list)
    done_checks: dict[str, bool] = field(default_factory=dict)
    surge_nodes: list[str] = field(default_factory=list)  # where placeholders found room
    scaled: dict[str, str] = field(default_factory=dict)  # workload -> what the surge did

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["plan"] = self.plan.to_dict() if self.plan else None
        return out


# -- reading the cluster ---------------------------------------------------------------------


async def _list_or_empty(client: KubeClient, path: str) -> list[Obj]:
    try:
        items, _ = await client.list(path)
    except NotFound:
        return []  # a resource this server does not serve (e.g. no StatefulSets in a lab)
    return items


async def read_cluster(client: KubeClient) -> ClusterState:
    nodes, _ = await client.list(api_path("v1", "nodes"))
    pods, _ = await client.list(api_path("v1", "pods"))
    pdbs = await _list_or_empty(client, api_path("policy/v1", "poddisruptionbudgets"))
    hpas = await _list_or_empty(client, api_path("autoscaling/v2", "horizontalpodautoscalers"))
    controllers: dict[str, Obj] = {}
    for plural, kind in (("replicasets", "ReplicaSet"), ("deployments", "Deployment"),
                         ("statefulsets", "StatefulSet")):
        for obj in await _list_or_empty(client, api_path("apps/v1", plural)):
            controllers[f"{kind}/{key_of(obj)}"] = obj
    return ClusterState(nodes=nodes, pods=pods, pdbs=pdbs, controllers=controllers,
                        autoscalers=hpas)


async def wait_guard_restored(client: KubeClient, workloads: Sequence[str], *,
                              timeout: float) -> None:
    """Until none of `workloads` carries the eviction guard's surge record (or `timeout`:
    then the plan that follows says what is still in the way)."""
    keys = {w.split("/", 1)[1] for w in workloads}

    def restored(cache: Mapping[str, Obj]) -> bool:
        return not any(ownership.guard_surged(cache.get(k)) for k in keys)

    async with Informer(client, api_path("apps/v1", "deployments")) as deployments:
        with contextlib.suppress(WaitTimeout):
            await deployments.wait_for(restored, timeout=timeout,
                                       what="the eviction guard's restore")


async def plan_nodes(
    client: KubeClient, nodes: Sequence[str], settings: DrainSettings,
    *, draining: Sequence[str] = (),
) -> tuple[DrainPlan, ClusterState]:
    from drainsafe.labels import parse

    state = await read_cluster(client)
    selector = parse(settings.pod_selector) if settings.pod_selector else None

    def wanted(pod: Mapping[str, Any]) -> bool:
        return selector is None or selector.matches((pod.get("metadata") or {}).get("labels"))

    plan = plan_drain(state, nodes, settings.options, pod_filter=wanted, draining=draining)
    return plan, state


# -- the drainer -----------------------------------------------------------------------------


class NodeDrainer:
    """Drains one node. Create, then `await run()`; the report is filled as it goes.

    `locks` (shared by the drainers of one fleet run) serialises surges of one workload:
    two nodes never surge the same Deployment at once.
    """

    def __init__(
        self,
        client: KubeClient,
        node: str,
        settings: DrainSettings,
        *,
        draining: Sequence[str] = (),
        clock: Clock = time.time,
        rng: random.Random | None = None,
        on_progress: Callable[[str], None] | None = None,
        locks: dict[str, asyncio.Lock] | None = None,
    ) -> None:
        self.client = client
        self.node = node
        self.settings = settings
        self.draining = tuple(draining)
        self.clock = clock
        self.rng = rng or random.Random()
        self.report = NodeReport(node=node, started_at=clock())
        self._say = on_progress or (lambda _msg: None)
        self._stop = asyncio.Event()
        self._failure = ""
        self._progress = ownership.Progress()
        self._progress_lock = asyncio.Lock()
        self._locks = locks if locks is not None else {}
        self._watch: NodeWatch | None = None
        self._selectors: dict[str, WorkloadSelector] = {}
        self._replicas: dict[str, int] = {}
        self._deadline = 0.0
        self._state = ClusterState(nodes=(), pods=())
        self._evictor: Evictor | None = None

    @property
    def watch(self) -> NodeWatch:
        assert self._watch is not None, "watches not started"
        return self._watch

    # -- top level ---------------------------------------------------------------------------

    async def preflight(self) -> DrainPlan:
        plan, self._state = await plan_nodes(self.client, [self.node], self.settings,
                                             draining=self.draining)
        self.report.plan = plan
        strategies = {w.workload: w.strategy for w in plan.workload_plans}
        self.report.pods = [
            PodReport(namespace=p.namespace, name=p.name, uid=p.uid, workload=p.workload,
                      action=p.action, reason=p.reason,
                      outcome="skipped" if p.action == "skip" else "pending",
                      strategy=strategies.get(p.workload or "", "") if p.needs_replacement
                      else "")
            for p in plan.pods
        ]
        return plan

    async def run(self, *, dry_run: bool = False) -> NodeReport:
        plan = await self.preflight()
        if not plan.ok and not dry_run and self._guard_restore_can_help(plan):
            # Another drainer's eviction (kubectl drain, an autoscaler) is held by the
            # eviction guard, whose stand-ins hold the room: plan again once it restored.
            surged = guard_surges(self._state)
            self._say(f"no room while the eviction guard surges {', '.join(surged)}: "
                      "waiting for its restore")
            await wait_guard_restored(self.client, surged, timeout=self.settings.timeout)
            plan = await self.preflight()
        if not plan.ok and not dry_run and self._surge_can_help(plan):
            from drainsafe.drain.surge import SurgeFailed, surge

            self._say(f"no room for {len(plan.blockers)} replacement(s): surging")
            try:
                self.report.surge_nodes = await surge(
                    self.client, plan, self._state.pods, self.node,
                    [self.node, *self.draining], timeout=self.settings.surge_timeout,
                    priority_class=self.settings.surge_priority_class)
            except SurgeFailed as exc:
                self.report.refused = True
                self.report.failure = f"--surge: {exc}"
                self.report.finished_at = self.clock()
                return self.report
            plan = await self.preflight()
        if not plan.ok:
            self.report.refused = True
            self.report.failure = "; ".join(f"{b.object}: {b.message}" for b in plan.blockers)
            self.report.finished_at = self.clock()
            return self.report
        if dry_run:
            self.report.ok = True
            self.report.finished_at = self.clock()
            return self.report
        self._deadline = time.monotonic() + self.settings.timeout
        await self._cordon()
        try:
            # Each wait below is bounded by the deadline and says what it waited for; this
            # bound is the guarantee that --timeout ends the drain whatever it awaits.
            async with asyncio.timeout(self.settings.timeout + BACKSTOP_SLACK):
                await self._start_watches(plan)
                await self._execute(plan)
                if self._failure:
                    raise DrainFailed(self._failure)
                await self._confirm_done(plan)
            self.report.ok = True
            await self._record("drained", "")
        except (DrainFailed, KubeError, WaitTimeout, KeptChanging, TimeoutError) as exc:
            self.report.failure = str(exc) if not isinstance(exc, TimeoutError) else (
                f"not drained within --timeout {self.settings.timeout:.0f}s")
            with contextlib.suppress(KubeError, asyncio.CancelledError, TimeoutError):
                async with asyncio.timeout(10):
                    await self._record("failed", self.report.failure[:500])
        except asyncio.CancelledError:
            # Ctrl-C: the node stays cordoned and owned, a surge stays recorded on its
            # workload; say so on the node, briefly. Running the same drain again continues.
            async def record_interrupted() -> None:
                async with asyncio.timeout(5):
                    await self._record("interrupted", "stopped by the operator")

            with contextlib.suppress(BaseException):
                await asyncio.shield(record_interrupted())
            raise
        finally:
            if self._watch is not None:
                await self._watch.stop()
            self.report.finished_at = self.clock()
        return self.report

    def _guard_restore_can_help(self, plan: DrainPlan) -> bool:
        return bool(plan.blockers) and all(b.kind == "no-room" for b in plan.blockers) \
            and bool(guard_surges(self._state))

    def _surge_can_help(self, plan: DrainPlan) -> bool:
        return self.settings.surge and bool(plan.blockers) and all(
            b.kind == "no-room" for b in plan.blockers)

    # -- cordon and progress -----------------------------------------------------------------

    async def _cordon(self, state: str = "draining") -> None:
        try:
            self._progress = await cordon(self.client, self.node, reason=self.settings.reason,
                                          state=state, attempts=self.settings.request_retries)
        except KeptChanging as exc:
            raise DrainFailed(f"could not cordon {self.node}: the node kept changing (409)"
                              ) from exc
        self.report.cordoned_at = self.clock()
        self._say(f"cordoned {self.node}")

    async def _record(self, state: str, detail: str) -> None:
        async with self._progress_lock:
            self._progress.state = state
            self._progress.detail = detail
            self._progress.updated = ownership.now_rfc3339()
            body = ownership.progress_patch(self._progress)
            path = api_path("v1", "nodes", name=self.node)
            await self._retrying(lambda: self.client.patch(path, body))

    async def _retrying(self, call: Callable[[], Any]) -> Any:
        """Idempotent calls: retry transient failures (5xx, timeouts, rate limits)."""
        attempt = 0
        while True:
            try:
                return await call()
            except KubeError as exc:
                if not exc.retryable or attempt >= self.settings.request_retries:
                    raise
                await asyncio.sleep(self.settings.backoff.delay(attempt, self.rng,
                                                                exc.retry_after))
                attempt += 1

    # -- watches -----------------------------------------------------------------------------

    async def _start_watches(self, plan: DrainPlan) -> None:
        namespaces = {p.namespace for p in plan.pods if p.action in ("evict", "wait")}
        for wkey, workload in plan.workloads.items():
            obj = self._state.controllers.get(wkey)
            wplan = plan.workload_plan(wkey)
            replicas = wplan.replicas if wplan is not None else workload.replicas
            if obj is None or replicas is None:
                continue
            spec = obj.get("spec") or {}
            if spec.get("selector"):
                self._selectors[wkey] = WorkloadSelector(
                    key=wkey, namespace=workload.namespace,
                    selector=from_label_selector(spec["selector"]),
                    min_ready_seconds=float(spec.get("minReadySeconds") or 0))
                self._replicas[wkey] = replicas
        for w in plan.workload_plans:
            namespaces.add(w.workload.split("/")[1])
            if w.workload not in self._selectors:
                obj = self._state.controllers.get(w.workload) or {}
                raw = (obj.get("spec") or {}).get("selector")
                if raw and w.replicas is not None:
                    self._selectors[w.workload] = WorkloadSelector(
                        key=w.workload, namespace=w.workload.split("/")[1],
                        selector=from_label_selector(raw),
                        min_ready_seconds=float((obj.get("spec") or {})
                                                .get("minReadySeconds") or 0))
                    self._replicas[w.workload] = w.replicas
        self._watch = NodeWatch(self.client, self.node, sorted(namespaces))
        await self._watch.start()
        self._evictor = Evictor(self.client, backoff=self.settings.backoff, rng=self.rng,
                                sleep=self._sleep_or_stop, view=self._watch,
                                recorded=self._progress.evicted, say=self._say)

    def _remaining(self) -> float:
        return max(self._deadline - time.monotonic(), 0.0)

    # -- workloads ---------------------------------------------------------------------------

    async def _execute(self, plan: DrainPlan) -> None:
        waits = [p for p in plan.pods if p.action == "wait"]
        surged = {w.workload for w in plan.workload_plans if w.strategy == "surge"}
        tasks = [asyncio.create_task(self._guarded(self._surge_workload(plan, w), w.workload))
                 for w in plan.workload_plans if w.strategy == "surge"]
        tasks += [asyncio.create_task(self._run_queue(plan, q.pods)) for q in plan.queues
                  if q.workload not in surged or not all(
                      plan.pod(k).needs_replacement for k in q.pods)]
        tasks += [asyncio.create_task(self._await_terminating(p)) for p in waits]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _guarded(self, work: Any, what: str) -> None:
        try:
            await work
        except (DrainFailed, KubeError, WaitTimeout, Stopped, EvictionStopped, TimeoutError,
                KeptChanging) as exc:
            self._fail(f"{what}: {exc}")

    def _fail(self, message: str) -> None:
        if not self._failure:
            self._failure = message
        self._stop.set()

    def _report(self, key: str) -> PodReport:
        for r in self.report.pods:
            if r.key == key:
                return r
        raise KeyError(key)

    # -- surge (make before break) -----------------------------------------------------------

    async def _surge_workload(self, plan: DrainPlan, w: WorkloadPlan) -> None:
        lock = self._locks.setdefault(w.workload, asyncio.Lock())
        async with lock:
            await self._surge_locked(plan, w)

    async def _surge_locked(self, plan: DrainPlan, w: WorkloadPlan) -> None:
        pods = [plan.pod(k) for k in w.pods if plan.pod(k).needs_replacement]
        namespace, name = w.workload.split("/")[1:]
        while True:
            remaining = []
            for p in pods:
                rep = self._report(p.key)
                if self._progress.evicted.get(p.key) == p.uid:
                    rep.outcome = "evicted"  # a previous run evicted it; never again
                elif self.watch.terminating(namespace, p.key, p.uid):
                    rep.outcome = "waited"
                    rep.detail = "already terminating: waited for, not evicted"
                else:
                    remaining.append(p)
            record = await scale.begin(self.client, w.workload, node=self.node,
                                       autoscaler=w.autoscaler,
                                       pods={p.key: p.uid for p in pods})
            if not record.guard:
                break
            # The eviction guard surged it for another drainer (kubectl drain, an
            # autoscaler): never a second surge on top; wait for the guard's restore. The
            # guard holds other evictions of the workload while ours is recorded.
            self._say(f"{w.workload}: surged by the eviction guard for a drain of "
                      f"{record.node}; waiting for its restore")
            await self.watch.wait_no_guard_surge(namespace, name, timeout=self._remaining(),
                                                 stop=self._stop)
        if record.node != self.node:
            raise DrainFailed(f"{w.workload} is surged for a drain of {record.node}")
        base = record.replicas
        gone_waits: list[asyncio.Task[None]] = []
        try:
            if remaining:
                target = base + len(remaining)
                await scale.set_scale(self.client, w.workload, record, target)
                how = (f"HPA {record.autoscaler.name} minReplicas and " if record.autoscaler
                       else "")
                self.report.scaled[w.workload] = f"{how}replicas {base} -> {target}"
                self._say(f"{w.workload}: surged {base} -> {target}; waiting for "
                          f"{len(remaining)} new pod(s) Available elsewhere")
                await self._wait_surge(w, remaining, base)
                await self._evict_paced(w.workload, namespace, remaining, record, base,
                                        gone_waits)
            await scale.finish(self.client, w.workload, record)
            self._say(f"{w.workload}: scale restored to {base}")
            if gone_waits:
                await asyncio.gather(*gone_waits)
        finally:
            for t in gone_waits:
                t.cancel()

    async def _wait_surge(self, w: WorkloadPlan, remaining: Sequence[PodPlan],
                          base: int) -> None:
        selector = self._selectors.get(w.workload)
        if selector is None:
            raise DrainFailed(f"{w.workload}: no selector; cannot tell its pods")
        old = {p.uid for p in remaining}
        try:
            serving = await self.watch.wait_serving(
                selector, base, excluding=(self.node,), timeout=self._remaining(),
                unschedulable_after=self.settings.unschedulable_after, stop=self._stop)
        except Unschedulable as exc:
            # Nothing of this workload was evicted yet: take the surge back, then stop.
            record = await scale.begin(self.client, w.workload, node=self.node,
                                       autoscaler=w.autoscaler, pods={})
            with contextlib.suppress(KubeError):
                await scale.finish(self.client, w.workload, record)
            raise DrainFailed(f"{exc}; the surge was taken back, no pod was evicted (the "
                              "node stays cordoned)") from exc
        fresh = sorted((p for p in serving if uid_of(p) not in old),
                       key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")),
                       reverse=True)
        if any(self.watch.listed(selector.namespace, u) for u in old):
            # Behind a Service: the new pods serve once they are ready endpoints, not when
            # the kubelet calls them Ready. Evicting before that puts their share of the
            # traffic on the old pods for one more hop of the control plane.
            await self.watch.wait_endpoints_ready(
                selector.namespace, [uid_of(p) for p in fresh[:len(remaining)]],
                timeout=min(60.0, self._remaining()), stop=self._stop)
        now = self.clock()
        for i, p in enumerate(remaining):
            rep = self._report(p.key)
            if i < len(fresh):
                rep.replacement = key_of(fresh[i])
                rep.replacement_node = (fresh[i].get("spec") or {}).get("nodeName")
            rep.replacement_ready_at = now
        self._say(f"{w.workload}: {len(serving)} pods Available off {self.node}")

    async def _evict_paced(self, workload: str, namespace: str, remaining: Sequence[PodPlan],
                           record: ownership.SurgeRecord, base: int,
                           gone_waits: list[asyncio.Task[None]]) -> None:
        """Evict as many at once as the budgets allow; lower the scale after each batch."""
        left = list(remaining)
        surged = len(left)
        lock = asyncio.Lock()

        async def lower() -> None:
            # Right after the server accepted an eviction, before anything else (the node's
            # record included): the ReplicaSet then has no replica to make up for, or only
            # the one it has just started, which is not Ready and so removed first.
            nonlocal surged
            async with lock:
                surged -= 1
                await scale.set_scale(self.client, workload, record, base + surged)

        while left:
            allowed = await self._budget_allows(namespace, left)
            batch, left = left[:max(allowed, 1)], left[max(allowed, 1):]
            await asyncio.gather(*(self._evict(p, self._report(p.key), after_accept=lower)
                                   for p in batch))
            async with lock:
                if surged > len(left):  # pods that left without our eviction
                    surged = len(left)
                    await scale.set_scale(self.client, workload, record, base + surged)
            for p in batch:
                gone_waits.append(asyncio.create_task(self._after_eviction(p)))

    async def _budget_allows(self, namespace: str, pods: Sequence[PodPlan]) -> int:
        """How many of `pods` the budgets let go now, waiting until it is at least one.
        Only Ready pods are held by a budget's status: an unready one may be evictable
        whatever it says (unhealthyPodEvictionPolicy), so for those the API decides."""
        serving = [p for p in pods
                   if is_ready(self.watch.pod(namespace, p.key) or {})]
        budgets = sorted({b for p in serving for b in p.pdbs})
        return await self.watch.wait_budget(namespace, budgets, timeout=self._remaining(),
                                            stop=self._stop)

    async def _after_eviction(self, pod: PodPlan) -> None:
        rep = self._report(pod.key)
        await self._wait_gone(pod, rep)
        await self._wait_endpoints_clear(pod, rep)

    # -- evict (break before make) -----------------------------------------------------------

    async def _run_queue(self, plan: DrainPlan, keys: Sequence[str]) -> None:
        for key in keys:
            if self._stop.is_set():
                return
            pod = plan.pod(key)
            rep = self._report(key)
            try:
                await self._drain_pod(pod, rep)
            except (DrainFailed, KubeError, WaitTimeout, Stopped, EvictionStopped,
                    TimeoutError, Unschedulable) as exc:
                rep.outcome = "failed"
                rep.detail = str(exc)
                self._fail(f"{key}: {exc}")
                return

    async def _await_terminating(self, pod: PodPlan) -> None:
        rep = self._report(pod.key)
        try:
            await self._wait_gone(pod, rep)
            await self._wait_endpoints_clear(pod, rep)
            rep.outcome = "waited"
        except WaitTimeout as exc:
            rep.outcome = "failed"
            self._fail(f"{pod.key}: {exc}")

    async def _drain_pod(self, pod: PodPlan, rep: PodReport) -> None:
        selector = self._selectors.get(pod.workload or "")
        if pod.needs_replacement and selector is not None:
            # Replacement first: evict only with the workload fully Ready.
            self._say(f"{pod.key}: waiting for {pod.workload} to be fully Ready")
            await self._wait_workload_ready(selector)
        if self._stop.is_set():
            return
        await self._budget_allows(pod.namespace, [pod])  # rather than a predictable 429
        await self._evict(pod, rep)
        await self._wait_gone(pod, rep)
        await self._wait_endpoints_clear(pod, rep)
        if pod.needs_replacement and selector is not None:
            ok = await self._wait_workload_ready(selector)
            newest = max(ok, key=lambda p: str((p.get("metadata") or {}).get(
                "creationTimestamp") or ""))
            rep.replacement = key_of(newest)
            rep.replacement_node = (newest.get("spec") or {}).get("nodeName")
            rep.replacement_ready_at = self.clock()
            self._say(f"{rep.key}: replacement {rep.replacement} Ready on "
                      f"{rep.replacement_node}")

    async def _wait_workload_ready(self, selector: WorkloadSelector) -> list[Obj]:
        try:
            return await self.watch.wait_serving(
                selector, self._replicas[selector.key], timeout=self._remaining(),
                unschedulable_after=self.settings.unschedulable_after, stop=self._stop)
        except Unschedulable as exc:
            raise DrainFailed(f"replacement {exc}; stopping further evictions (the node "
                              "stays cordoned)") from exc

    # -- eviction ----------------------------------------------------------------------------

    async def _evict(self, pod: PodPlan, rep: PodReport,
                     after_accept: Callable[[], Awaitable[None]] | None = None) -> None:
        counts = EvictCounts()
        assert self._evictor is not None, "watches not started"
        try:
            result = await self._evictor.evict(pod.namespace, pod.name, pod.uid, counts,
                                               deadline=self._remaining)
        except EvictionStopped as exc:
            raise DrainFailed(str(exc)) from exc
        except TimeoutError as exc:
            raise DrainFailed(str(exc)) from exc
        finally:
            rep.budget_429s += counts.budget_429s
            rep.rate_429s += counts.rate_429s
            rep.transient_errors += counts.transient_errors
            rep.detail = counts.detail
        if result == "evicted-before":
            rep.outcome = "evicted"  # a previous run evicted it; never again
            return
        if result == "gone-before":
            rep.outcome = "already-gone"
            rep.detail = "gone before its turn: not evicted"
            return
        if result == "terminating":
            rep.outcome = "waited"
            rep.detail = "already terminating when its turn came: waited for, not evicted"
            self._say(f"{pod.key}: {rep.detail}")
            return
        if result == "gone":
            rep.outcome = "already-gone"
            return
        if after_accept is not None:
            await after_accept()
        await self._mark_evicted(pod, rep)

    async def _sleep_or_stop(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(seconds, 0.0)):
                await self._stop.wait()
        return not self._stop.is_set()

    async def _mark_evicted(self, pod: PodPlan, rep: PodReport) -> None:
        rep.outcome = "evicted"
        rep.evicted_at = self.clock()
        self._say(f"{pod.key}: evicted")
        self._progress.evicted[pod.key] = pod.uid
        await self._record("draining", f"evicted {pod.key}")

    # -- waits -------------------------------------------------------------------------------

    async def _wait_gone(self, pod: PodPlan, rep: PodReport) -> None:
        bound = min(pod.grace_seconds + self.settings.gone_margin, self._remaining())
        await self.watch.wait_gone(pod.namespace, pod.key, pod.uid, timeout=bound)
        rep.terminated_at = self.clock()
        self._say(f"{pod.key}: terminated")

    async def _wait_endpoints_clear(self, pod: PodPlan, rep: PodReport) -> None:
        await self.watch.wait_endpoints_clear(pod.namespace, pod.key, pod.uid,
                                              timeout=min(120.0, self._remaining()))
        rep.endpoints_clear_at = self.clock()

    # -- done --------------------------------------------------------------------------------

    async def _confirm_done(self, plan: DrainPlan) -> None:
        checks: dict[str, bool] = {}
        watch = self.watch

        def only_daemons() -> bool:
            return all(classify(p, self.settings.options).action == "skip" or is_terminal(p)
                       for p in watch.node_pods.cache.values())

        await watch.until([watch.node_pods], only_daemons, timeout=min(60.0, self._remaining()),
                          what=f"only DaemonSet/mirror pods on {self.node}")
        checks["only DaemonSet/mirror pods left"] = True
        for selector in self._selectors.values():
            await self._wait_workload_ready(selector)

            def no_pending(selector: WorkloadSelector = selector) -> bool:
                # A replacement the ReplicaSet made for an evicted pod before the scale
                # came back is removed by it (drain.scale): wait for that, bounded.
                return not [key_of(p) for p in watch.workload_pods(selector)
                            if is_active(p) and (p.get("status") or {}).get("phase") == "Pending"]

            try:
                await watch.until([watch.pods[selector.namespace]], no_pending,
                                  timeout=min(30.0, self._remaining()),
                                  what=f"{selector.key} to have no Pending pods")
            except WaitTimeout as exc:
                raise DrainFailed(f"{selector.key} has Pending pods after the drain") from exc
        checks["workloads at desired Ready count"] = True
        checks["no Pending pods of affected workloads"] = True
        drained = {p.uid for p in plan.pods if p.action in ("evict", "wait")}
        for ns in watch.slices:
            await watch.until([watch.slices[ns], watch.pods[ns]],
                              lambda ns=ns: watch.slices_settled(ns, drained),  # type: ignore[misc]
                              timeout=min(60.0, self._remaining()),
                              what=f"EndpointSlices in {ns} to settle")
        checks["endpoints settled"] = True
        self.report.done_checks = checks


def iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S.%f")[:-3]
