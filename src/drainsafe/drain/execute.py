"""Executing a drain: the I/O shell around the pure plan.

Order of work for one node (the seed's procedure, made one command):
1. read the cluster, plan (drain.plan); any blocker refuses before cordoning;
2. cordon with ownership annotations, in one resourceVersion-guarded patch;
3. run the plan's queues: queues in parallel, the pods of one queue one at a time; before
   each eviction the workload must be back at its desired Ready count (replacement
   first); the eviction goes through the Eviction API only, with a UID precondition;
4. per pod wait until it is gone, until its address has left every EndpointSlice, and
   until its replacement is Ready;
5. done means: only DaemonSet and mirror pods left, every affected workload at its
   desired Ready count, no Pending pod of those workloads, endpoints settled.

Eviction errors, Karpenter-like (terminator/eviction.go) but with the gaps closed:
budget 429 (cause DisruptionBudget) and rate-limit 429 are told apart and both backed off
with jitter, Retry-After as a floor; 404 and 409 (UID precondition) mean the old pod is
gone; the multi-PDB 500 and RBAC 403 stop the drain with the reason; a transport error
or 5xx leaves the outcome unknown, so the pod is re-read before any retry (an eviction
is never sent for a pod already terminating: no pod is evicted twice).

Progress is recorded on the node after every eviction (drain.ownership); Ctrl-C or a
crash leaves the node cordoned, owned and recorded, and running again continues.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from drainsafe.drain import ownership
from drainsafe.drain.plan import (
    ClusterState,
    DrainOptions,
    DrainPlan,
    PodPlan,
    is_ready,
    key_of,
    plan_drain,
)
from drainsafe.kube import (
    Backoff,
    BudgetBlocked,
    Conflict,
    Forbidden,
    Informer,
    KubeClient,
    KubeError,
    MultiplePdbs,
    NotFound,
    RateLimited,
    WaitTimeout,
    api_path,
)
from drainsafe.labels import Selector, from_label_selector

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Clock = Callable[[], float]


class DrainFailed(RuntimeError):
    """The drain stopped; the node stays cordoned and recorded."""


@dataclass(frozen=True)
class DrainSettings:
    options: DrainOptions = field(default_factory=DrainOptions)
    timeout: float = 3600.0  # bound on one node's whole drain
    unschedulable_after: float = 20.0  # a replacement Unschedulable this long stops the drain
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
    controllers: dict[str, Obj] = {}
    for plural, kind in (("replicasets", "ReplicaSet"), ("deployments", "Deployment"),
                         ("statefulsets", "StatefulSet")):
        for obj in await _list_or_empty(client, api_path("apps/v1", plural)):
            controllers[f"{kind}/{key_of(obj)}"] = obj
    return ClusterState(nodes=nodes, pods=pods, pdbs=pdbs, controllers=controllers)


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
    """Drains one node. Create, then `await run()`; the report is filled as it goes."""

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
        self._pods: dict[str, Informer] = {}
        self._slices: dict[str, Informer] = {}
        self._node_pods: Informer | None = None
        self._selectors: dict[str, Selector] = {}
        self._replicas: dict[str, int] = {}
        self._deadline = 0.0
        self._state = ClusterState(nodes=(), pods=())

    # -- top level ---------------------------------------------------------------------------

    async def preflight(self) -> DrainPlan:
        plan, self._state = await plan_nodes(self.client, [self.node], self.settings,
                                             draining=self.draining)
        self.report.plan = plan
        self.report.pods = [
            PodReport(namespace=p.namespace, name=p.name, uid=p.uid, workload=p.workload,
                      action=p.action, reason=p.reason,
                      outcome="skipped" if p.action == "skip" else "pending")
            for p in plan.pods
        ]
        return plan

    async def run(self, *, dry_run: bool = False) -> NodeReport:
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
            await self._start_watches(plan)
            await self._execute(plan)
            if self._failure:
                raise DrainFailed(self._failure)
            await self._confirm_done(plan)
            self.report.ok = True
            await self._record("drained", "")
        except (DrainFailed, KubeError, WaitTimeout) as exc:
            self.report.failure = str(exc)
            with contextlib.suppress(KubeError, asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._record("failed", str(exc)[:500]), 10)
        except asyncio.CancelledError:
            # Ctrl-C: the node stays cordoned and owned; say so on it, briefly.
            with contextlib.suppress(BaseException):
                await asyncio.shield(asyncio.wait_for(
                    self._record("interrupted", "stopped by the operator"), 5))
            raise
        finally:
            await self._stop_watches()
            self.report.finished_at = self.clock()
        return self.report

    def _surge_can_help(self, plan: DrainPlan) -> bool:
        return self.settings.surge and bool(plan.blockers) and all(
            b.kind == "no-room" for b in plan.blockers)

    # -- cordon and progress -----------------------------------------------------------------

    async def _cordon(self, state: str = "draining") -> None:
        path = api_path("v1", "nodes", name=self.node)
        for attempt in range(self.settings.request_retries):
            node = await self._retrying(lambda: self.client.get(path))
            self._progress = ownership.Progress.of(node)
            self._progress.state = state
            patch = ownership.cordon_patch(
                node, actor=self.client.identity.actor(), reason=self.settings.reason,
                progress=self._progress,
            )
            try:
                await self.client.patch(path, patch)
            except Conflict:
                await asyncio.sleep(self.settings.backoff.delay(attempt, self.rng))
                continue  # someone else wrote the node: re-read and decide again
            self.report.cordoned_at = self.clock()
            self._say(f"cordoned {self.node}")
            return
        raise DrainFailed(f"could not cordon {self.node}: the node kept changing (409)")

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
        namespaces = sorted({p.namespace for p in plan.pods if p.action in ("evict", "wait")})
        for wkey, workload in plan.workloads.items():
            obj = self._state.controllers.get(wkey)
            if obj is None or workload.replicas is None:
                continue
            raw = (obj.get("spec") or {}).get("selector")
            if raw:
                self._selectors[wkey] = from_label_selector(raw)
                self._replicas[wkey] = workload.replicas
        self._node_pods = Informer(self.client, api_path("v1", "pods"),
                                   field_selector=f"spec.nodeName={self.node}")
        for ns in namespaces:
            self._pods[ns] = Informer(self.client, api_path("v1", "pods", namespace=ns))
            self._slices[ns] = Informer(
                self.client, api_path("discovery.k8s.io/v1", "endpointslices", namespace=ns))
        await asyncio.gather(self._node_pods.start(), *(i.start() for i in self._pods.values()),
                             *(i.start() for i in self._slices.values()))

    async def _stop_watches(self) -> None:
        informers = [*self._pods.values(), *self._slices.values()]
        if self._node_pods is not None:
            informers.append(self._node_pods)
        for inf in informers:
            await inf.stop()

    def _remaining(self) -> float:
        return max(self._deadline - time.monotonic(), 0.0)

    # -- queues ------------------------------------------------------------------------------

    async def _execute(self, plan: DrainPlan) -> None:
        waits = [p for p in plan.pods if p.action == "wait"]
        tasks = [asyncio.create_task(self._run_queue(plan, q.pods)) for q in plan.queues]
        tasks += [asyncio.create_task(self._await_terminating(p)) for p in waits]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _fail(self, message: str) -> None:
        if not self._failure:
            self._failure = message
        self._stop.set()

    def _report(self, key: str) -> PodReport:
        for r in self.report.pods:
            if r.key == key:
                return r
        raise KeyError(key)

    async def _run_queue(self, plan: DrainPlan, keys: Sequence[str]) -> None:
        for key in keys:
            if self._stop.is_set():
                return
            pod = plan.pod(key)
            rep = self._report(key)
            try:
                await self._drain_pod(pod, rep)
            except (DrainFailed, KubeError, WaitTimeout) as exc:
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
        if pod.needs_replacement and pod.workload in self._selectors:
            # Replacement first: evict only with the workload fully Ready.
            self._say(f"{pod.key}: waiting for {pod.workload} to be fully Ready")
            await self._wait_workload_ready(pod.workload, rep, before=True)
        if self._stop.is_set():
            return
        await self._evict(pod, rep)
        await self._wait_gone(pod, rep)
        await self._wait_endpoints_clear(pod, rep)
        if pod.needs_replacement and pod.workload in self._selectors:
            await self._wait_workload_ready(pod.workload, rep, before=False)

    # -- eviction ----------------------------------------------------------------------------

    async def _current(self, pod: PodPlan) -> Obj | None:
        """A fresh read (not the cache) of the pod, None when it is gone or replaced."""
        path = api_path("v1", "pods", namespace=pod.namespace, name=pod.name)
        try:
            obj: Obj = await self._retrying(lambda: self.client.get(path))
        except NotFound:
            return None
        if (obj.get("metadata") or {}).get("uid") != pod.uid:
            return None
        return obj

    async def _evict(self, pod: PodPlan, rep: PodReport) -> None:
        attempt = 0
        if self._progress.evicted.get(pod.key) == pod.uid:
            # A previous run evicted it; never again. Its state decides what is left.
            rep.outcome = "evicted"
            return
        if self._terminating_now(pod):
            # The plan saw it running, but by its turn something else is deleting it (a
            # killed earlier run whose eviction the server processed late, another tool).
            # An eviction now would be accepted without a budget check (the registry's
            # canIgnorePDB: pkg/registry/core/pod/storage/eviction.go), a second eviction.
            rep.outcome = "waited"
            rep.detail = "already terminating when its turn came: waited for, not evicted"
            self._say(f"{pod.key}: {rep.detail}")
            return
        while True:
            if self._remaining() <= 0:
                raise DrainFailed(f"timed out before {pod.key} could be evicted ({rep.detail})")
            try:
                await self.client.evict(pod.namespace, pod.name, uid=pod.uid)
            except (NotFound, Conflict) as exc:
                # 404: gone. 409: the UID precondition failed, so a different pod now has
                # this name; the one we meant is gone either way.
                rep.outcome = "already-gone"
                rep.detail = type(exc).__name__
                return
            except BudgetBlocked as exc:
                rep.budget_429s += 1
                rep.detail = f"budget: {exc.budget_message}"
                delay = self.settings.backoff.delay(attempt, self.rng, exc.retry_after)
            except RateLimited as exc:
                rep.rate_429s += 1
                rep.detail = f"rate limited: {exc.message[:100]}"
                delay = self.settings.backoff.delay(attempt, self.rng, exc.retry_after)
            except MultiplePdbs as exc:
                raise DrainFailed(
                    f"the eviction API refuses {pod.key}: it is under several "
                    f"PodDisruptionBudgets ({exc.message}); make their selectors disjoint"
                ) from exc
            except Forbidden as exc:
                if not exc.namespace_terminating:
                    raise DrainFailed(f"eviction of {pod.key} forbidden: {exc.message}") from exc
                rep.transient_errors += 1
                delay = self.settings.backoff.delay(attempt, self.rng, exc.retry_after)
            except KubeError as exc:
                if not exc.retryable:
                    raise DrainFailed(f"eviction of {pod.key} failed: {exc}") from exc
                # Outcome unknown (5xx, timeout, reset): look before trying again.
                rep.transient_errors += 1
                rep.detail = f"transient: {exc}"
                current = await self._current(pod)
                if current is None or (current.get("metadata") or {}).get("deletionTimestamp"):
                    await self._mark_evicted(pod, rep)
                    return
                delay = self.settings.backoff.delay(attempt, self.rng, exc.retry_after)
            else:
                await self._mark_evicted(pod, rep)
                return
            attempt += 1
            self._say(f"{pod.key}: {rep.detail}; retry in {delay:.1f}s")
            await self._sleep_or_stop(min(delay, self._remaining()))
            if self._stop.is_set():
                raise DrainFailed(f"stopped before evicting {pod.key}")
            # Before retrying, make sure the pod still needs evicting (no double eviction).
            current = await self._current(pod)
            if current is None:
                rep.outcome = "already-gone"
                return
            if (current.get("metadata") or {}).get("deletionTimestamp"):
                await self._mark_evicted(pod, rep)
                return

    def _terminating_now(self, pod: PodPlan) -> bool:
        """The namespace's pod watch says this pod (same UID) has a deletionTimestamp.
        Only positive evidence counts: a pod missing from the cache is left to the
        eviction's own 404."""
        obj = self._pods[pod.namespace].cache.get(pod.key)
        meta = (obj or {}).get("metadata") or {}
        return meta.get("uid") == pod.uid and bool(meta.get("deletionTimestamp"))

    async def _sleep_or_stop(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), max(seconds, 0.0))

    async def _mark_evicted(self, pod: PodPlan, rep: PodReport) -> None:
        rep.outcome = "evicted"
        rep.evicted_at = self.clock()
        self._say(f"{pod.key}: evicted")
        self._progress.evicted[pod.key] = pod.uid
        await self._record("draining", f"evicted {pod.key}")

    # -- waits -------------------------------------------------------------------------------

    async def _wait_gone(self, pod: PodPlan, rep: PodReport) -> None:
        informer = self._pods[pod.namespace]
        bound = min(pod.grace_seconds + self.settings.gone_margin, self._remaining())

        def gone(cache: Mapping[str, Obj]) -> bool:
            obj = cache.get(pod.key)
            return obj is None or (obj.get("metadata") or {}).get("uid") != pod.uid

        await informer.wait_for(gone, timeout=bound, what=f"{pod.key} to terminate")
        rep.terminated_at = self.clock()
        self._say(f"{pod.key}: terminated")

    async def _wait_endpoints_clear(self, pod: PodPlan, rep: PodReport) -> None:
        informer = self._slices[pod.namespace]

        def clear(cache: Mapping[str, Obj]) -> bool:
            return not any(_slice_lists(s, pod.uid) for s in cache.values())

        await informer.wait_for(clear, timeout=min(120.0, self._remaining()),
                                what=f"{pod.key} to leave every EndpointSlice")
        rep.endpoints_clear_at = self.clock()

    def _workload_pods(self, wkey: str, namespace: str) -> list[Obj]:
        selector = self._selectors[wkey]
        return [
            p for p in self._pods[namespace].cache.values()
            if selector.matches((p.get("metadata") or {}).get("labels"))
        ]

    async def _wait_workload_ready(self, wkey: str, rep: PodReport, *, before: bool) -> None:
        namespace = wkey.split("/")[1]
        want = self._replicas[wkey]
        informer = self._pods[namespace]
        pending_since: dict[str, float] = {}

        def ready(_: Mapping[str, Obj]) -> list[Obj] | None:
            live = [p for p in self._workload_pods(wkey, namespace)
                    if not (p.get("metadata") or {}).get("deletionTimestamp")]
            ok = [p for p in live if is_ready(p)]
            for p in live:
                reason = _unschedulable(p)
                k = key_of(p)
                if reason:
                    pending_since.setdefault(k, time.monotonic())
                    if time.monotonic() - pending_since[k] > self.settings.unschedulable_after:
                        raise DrainFailed(
                            f"replacement {k} cannot be scheduled: {reason}; stopping further "
                            "evictions (the node stays cordoned)"
                        )
                else:
                    pending_since.pop(k, None)
            return ok if len(ok) >= want else None

        # Re-check at least every few seconds so the Unschedulable clock advances.
        while True:
            try:
                ok = await informer.wait_for(
                    ready, timeout=min(2.0, self._remaining()),
                    what=f"{wkey} to have {want} Ready pods")
                break
            except WaitTimeout:
                ok = None
                if self._remaining() <= 0:
                    raise
                if self._stop.is_set():
                    raise DrainFailed("stopped") from None
        if not before and ok:
            newest = max(ok, key=lambda p: str((p.get("metadata") or {}).get(
                "creationTimestamp") or ""))
            rep.replacement = key_of(newest)
            rep.replacement_node = (newest.get("spec") or {}).get("nodeName")
            rep.replacement_ready_at = self.clock()
            self._say(f"{rep.key}: replacement {rep.replacement} Ready on "
                      f"{rep.replacement_node}")

    # -- done --------------------------------------------------------------------------------

    async def _confirm_done(self, plan: DrainPlan) -> None:
        checks: dict[str, bool] = {}
        assert self._node_pods is not None

        def only_daemons(cache: Mapping[str, Obj]) -> bool:
            from drainsafe.drain.plan import classify

            return all(classify(p, self.settings.options).action == "skip" or
                       _finished(p) for p in cache.values())

        await self._node_pods.wait_for(only_daemons, timeout=min(60.0, self._remaining()),
                                       what=f"only DaemonSet/mirror pods on {self.node}")
        checks["only DaemonSet/mirror pods left"] = True
        for wkey in self._selectors:
            ns = wkey.split("/")[1]
            dummy = PodReport(namespace=ns, name="", uid="", workload=wkey, action="", reason="")
            await self._wait_workload_ready(wkey, dummy, before=True)
            pending = [key_of(p) for p in self._workload_pods(wkey, ns)
                       if (p.get("status") or {}).get("phase") == "Pending"]
            if pending:
                raise DrainFailed(f"{wkey} has Pending pods after the drain: {pending}")
        checks["workloads at desired Ready count"] = True
        checks["no Pending pods of affected workloads"] = True
        drained = {p.uid for p in plan.pods if p.action in ("evict", "wait")}
        for ns, slices in self._slices.items():
            pods = self._pods[ns]

            # Settled: no slice lists a pod of this drain, nor a pod that no longer exists.
            # (Other pods terminating for their own reasons may legitimately be listed.)
            def settled(cache: Mapping[str, Obj], pods: Informer = pods) -> bool:
                present = {(p.get("metadata") or {}).get("uid") for p in pods.cache.values()}
                for s in cache.values():
                    for e in s.get("endpoints") or []:
                        uid = _endpoint_uid(e)
                        if uid is not None and (uid in drained or uid not in present):
                            return False
                return True

            # Two caches feed the predicate; re-check every second so a change seen by the
            # pods informer (but not the slices one) is not missed.
            limit = time.monotonic() + min(60.0, self._remaining())
            while True:
                try:
                    await slices.wait_for(settled, timeout=1.0,
                                          what=f"EndpointSlices in {ns} to settle")
                    break
                except WaitTimeout:
                    if time.monotonic() >= limit:
                        raise
        checks["endpoints settled"] = True
        self.report.done_checks = checks


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _endpoint_uid(endpoint: Mapping[str, Any]) -> Any:
    return (endpoint.get("targetRef") or {}).get("uid")


def _slice_lists(endpoint_slice: Mapping[str, Any], uid: str) -> bool:
    return any(_endpoint_uid(e) == uid for e in endpoint_slice.get("endpoints") or [])


def _unschedulable(pod: Mapping[str, Any]) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get(
                "reason") == "Unschedulable":
            return str(c.get("message") or "Unschedulable")
    return None


# -- fleet -----------------------------------------------------------------------------------


async def drain_fleet(
    client: KubeClient,
    nodes: Sequence[str],
    settings: DrainSettings,
    *,
    max_parallel: int = 1,
    dry_run: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> list[NodeReport]:
    """Drain nodes in sequence, or up to `max_parallel` at once; stop at the first failure.

    With several nodes, the fleet is planned as one (every replacement needs room outside
    the fleet, and no free GPU is counted twice) and refused as one; then every node is
    cordoned first, as kubectl drain does, so no replacement lands on a node drained later.
    Nodes not started because of a failure get their queued cordon back off.
    """
    if len(nodes) > 1:
        combined, _ = await plan_nodes(client, nodes, settings)
        surge_fixable = settings.surge and all(b.kind == "no-room" for b in combined.blockers)
        if (not combined.ok and not surge_fixable) or dry_run:
            now = time.time()
            failure = "; ".join(f"{b.object}: {b.message}" for b in combined.blockers)
            return [NodeReport(node=n, started_at=now, plan=combined, ok=combined.ok,
                               refused=not combined.ok, failure=failure, finished_at=now)
                    for n in nodes]
        for name in nodes:
            await NodeDrainer(client, name, settings)._cordon(state="queued")
    reports: list[NodeReport] = []
    gate = asyncio.Semaphore(max(1, max_parallel))
    failed = asyncio.Event()
    started: set[str] = set()

    async def one(name: str) -> None:
        async with gate:
            if failed.is_set():
                return
            started.add(name)
            # The rest of the fleet offers no room for this node's replacements.
            others = [n for n in nodes if n != name]
            drainer = NodeDrainer(client, name, settings, draining=others,
                                  on_progress=on_progress)
            reports.append(drainer.report)
            report = await drainer.run(dry_run=dry_run)
            if not report.ok:
                failed.set()

    await asyncio.gather(*(one(n) for n in nodes))
    if len(nodes) > 1:
        await _release_queued([n for n in nodes if n not in started], client)
    order = {n: i for i, n in enumerate(nodes)}
    reports.sort(key=lambda r: order[r.node])
    return reports


async def _release_queued(names: Sequence[str], client: KubeClient) -> None:
    from drainsafe.drain.cordon import NotOwned, uncordon

    for name in names:
        node = await client.get(api_path("v1", "nodes", name=name))
        if ownership.Progress.of(node).state != "queued":
            continue
        with contextlib.suppress(NotOwned):
            await uncordon(client, name)


def iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S.%f")[:-3]
