"""What both strategies share while a node drains: a small context, and the steps per pod.

The context holds the node's watch (drain.nodewatch), its evictor (drain.evict), its
progress record (drain.progress), the report line of each pod (drain.report), the
deadline on an injected monotonic clock, and the stop that the first failure sets. The
strategies (drain.surgefirst, drain.evictfirst) take it and use its steps: evict one pod
(the evictor's typed result into the pod's report, the eviction into the node's record),
wait until the pod is gone and out of every EndpointSlice, wait until a workload is back
at its Ready count, and wait until the budgets allow an eviction (instead of taking a
predictable 429).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drainsafe.drain.capacity import CapacityHook, readings
from drainsafe.drain.evict import EvictCounts, EvictionStopped, Evictor
from drainsafe.drain.nodewatch import NodeWatch, Unschedulable
from drainsafe.drain.pods import PodPlan
from drainsafe.drain.progress import NodeProgress
from drainsafe.drain.report import PodReport
from drainsafe.drain.settings import DrainSettings
from drainsafe.drain.workloads import WorkloadSelector
from drainsafe.kube import KubeClient
from drainsafe.kube.objects import is_ready

Obj = dict[str, Any]
Clock = Callable[[], float]


class DrainFailed(RuntimeError):
    """The drain stopped; the node stays cordoned and recorded."""


class Deadline:
    """The bound on one node's drain (--timeout), on an injected monotonic clock."""

    def __init__(self, seconds: float, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.at = clock() + seconds

    def remaining(self) -> float:
        return max(self.at - self.clock(), 0.0)


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep; False when `stop` was set meanwhile (the sleep ends at once then)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(seconds, 0.0)):
            await stop.wait()
    return not stop.is_set()


@dataclass
class DrainContext:
    client: KubeClient
    node: str
    settings: DrainSettings
    watch: NodeWatch
    evictor: Evictor
    progress: NodeProgress
    reports: Mapping[str, PodReport]  # "ns/name" -> the pod's report line
    scaled: dict[str, str]  # the node report's: workload -> what its surge did
    selectors: Mapping[str, WorkloadSelector]  # as the plan resolved them
    deadline: Deadline
    clock: Clock  # wall clock, for the report's timestamps
    say: Callable[[str], None]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    failure: str = ""
    draining: tuple[str, ...] = ()  # the other nodes of this run (drain.sharedsurge)

    @classmethod
    async def start(cls, client: KubeClient, node: str, settings: DrainSettings, *,
                    namespaces: Sequence[str], selectors: Mapping[str, WorkloadSelector],
                    progress: NodeProgress, reports: Mapping[str, PodReport],
                    scaled: dict[str, str],
                    deadline: Deadline, clock: Clock, monotonic: Clock, rng: random.Random,
                    say: Callable[[str], None],
                    started: Callable[[NodeWatch], None],
                    on_capacity: CapacityHook | None = None) -> DrainContext:
        """Start the watches (`started` gets the watch first, to stop it whatever
        happens) and the evictor on them. `on_capacity` gets each workload's reading
        (drain.capacity) on every change of its namespace's pods."""
        def read(namespace: str) -> None:
            if on_capacity is not None:
                for reading in readings(watch, selectors.values(), namespace):
                    on_capacity(reading)

        watch = NodeWatch(client, node, namespaces, clock=clock, monotonic=monotonic,
                          on_pods=read if on_capacity is not None else None)
        started(watch)
        await watch.start()
        stop = asyncio.Event()
        evictor = Evictor(client, backoff=settings.backoff, rng=rng,
                          sleep=lambda s: sleep_or_stop(stop, s), view=watch,
                          recorded=progress.evicted_uid, clock=monotonic, say=say)
        return cls(client=client, node=node, settings=settings, watch=watch, evictor=evictor,
                   progress=progress, reports=reports, scaled=scaled, selectors=selectors,
                   deadline=deadline, clock=clock, say=say, stop=stop)

    def remaining(self) -> float:
        return self.deadline.remaining()

    def fail(self, message: str) -> None:
        """The first failure stops every strategy's next step."""
        if not self.failure:
            self.failure = message
        self.stop.set()

    def report(self, key: str) -> PodReport:
        return self.reports[key]

    # -- steps -------------------------------------------------------------------------------

    async def evict(self, pod: PodPlan,
                    after_accept: Callable[[], Awaitable[None]] | None = None) -> None:
        """Evict `pod` through the evictor, its guards first; `after_accept` runs right
        after the server accepted, before the node's record is written."""
        rep = self.report(pod.key)
        counts = EvictCounts()
        try:
            result = await self.evictor.evict(pod.namespace, pod.name, pod.uid, counts,
                                              deadline=self.remaining)
        except EvictionStopped as exc:
            raise DrainFailed(str(exc)) from exc
        except TimeoutError as exc:
            raise DrainFailed(str(exc)) from exc
        finally:
            rep.budget_429s += counts.budget_429s
            rep.guard_holds += counts.guard_holds
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
            self.say(f"{pod.key}: {rep.detail}")
            return
        if result == "gone":
            rep.outcome = "already-gone"
            return
        if after_accept is not None:
            await after_accept()
        rep.outcome = "evicted"
        rep.evicted_at = self.clock()
        self.say(f"{pod.key}: evicted")
        await self.progress.evicted(pod.key, pod.uid)

    async def wait_gone(self, pod: PodPlan) -> None:
        rep = self.report(pod.key)
        bound = min(pod.grace_seconds + self.settings.gone_margin, self.remaining())
        await self.watch.wait_gone(pod.namespace, pod.key, pod.uid, timeout=bound)
        rep.terminated_at = self.clock()
        self.say(f"{pod.key}: terminated")

    async def wait_endpoints_clear(self, pod: PodPlan) -> None:
        await self.watch.wait_endpoints_clear(pod.namespace, pod.key, pod.uid,
                                              timeout=min(120.0, self.remaining()))
        self.report(pod.key).endpoints_clear_at = self.clock()

    async def after_eviction(self, pod: PodPlan) -> None:
        await self.wait_gone(pod)
        await self.wait_endpoints_clear(pod)

    async def wait_workload_ready(self, selector: WorkloadSelector) -> list[Obj]:
        try:
            return await self.watch.wait_serving(
                selector, selector.replicas, timeout=self.remaining(),
                unschedulable_after=self.settings.unschedulable_after, stop=self.stop)
        except Unschedulable as exc:
            raise DrainFailed(f"replacement {exc}; stopping further evictions (the node "
                              "stays cordoned)") from exc

    async def budget_allows(self, namespace: str, pods: Sequence[PodPlan], *,
                            at_least: int = 1) -> int:
        """How many of `pods` the budgets let go now, waiting until it is at least
        `at_least` (a LeaderWorkerSet group's eviction takes its whole group).
        Only Ready pods are held by a budget's status: an unready one may be evictable
        whatever it says (unhealthyPodEvictionPolicy), so for those the API decides."""
        serving = [p for p in pods if is_ready(self.watch.pod(namespace, p.key) or {})]
        budgets = sorted({b for p in serving for b in p.pdbs})
        return await self.watch.wait_budget(namespace, budgets, timeout=self.remaining(),
                                            stop=self.stop, at_least=at_least)
