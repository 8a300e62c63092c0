"""Draining several nodes: planned as one, cordoned first, drained in order or in parallel.

With several nodes, the fleet is planned as one (every replacement or surge pod needs room
outside the fleet, and no free GPU is counted twice) and refused as one; then every node is
cordoned first with the state "queued", as kubectl drain cordons every node before it
evicts (kubectl pkg/cmd/drain/drain.go RunDrain), so no replacement lands on a node drained
later. Nodes not started because of a failure get their queued cordon back. The result is
one `FleetReport`: what was asked, what ran, what never started, and whether it all worked.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from drainsafe.drain import ownership
from drainsafe.drain.cordon import cordon
from drainsafe.drain.execute import NodeDrainer
from drainsafe.drain.plan import DrainPlan
from drainsafe.drain.preflight import plan_nodes
from drainsafe.drain.report import NodeReport
from drainsafe.drain.settings import DrainSettings
from drainsafe.drain.sharedsurge import Surges
from drainsafe.kube import KubeClient, api_path


@dataclass
class FleetReport:
    nodes: tuple[str, ...]  # as asked
    plan: DrainPlan | None  # the fleet's combined plan, when it was refused as one
    reports: list[NodeReport] = field(default_factory=list)  # the nodes that ran, in order

    @property
    def not_started(self) -> list[str]:
        ran = {r.node for r in self.reports}
        return [n for n in self.nodes if n not in ran]

    @property
    def ok(self) -> bool:
        return bool(self.reports) and not self.not_started and all(r.ok for r in self.reports)

    @property
    def plans(self) -> list[DrainPlan]:
        """Each distinct plan once (a refused fleet shares one among its nodes)."""
        seen: list[DrainPlan] = []
        for r in self.reports:
            if r.plan is not None and not any(r.plan is p for p in seen):
                seen.append(r.plan)
        return seen


async def drain_fleet(
    client: KubeClient,
    nodes: Sequence[str],
    settings: DrainSettings,
    *,
    max_parallel: int = 1,
    dry_run: bool = False,
    on_progress: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> FleetReport:
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
            now = clock()
            failure = "; ".join(f"{b.object}: {b.message}" for b in combined.blockers)
            return FleetReport(nodes=tuple(nodes), plan=combined, reports=[
                NodeReport(node=n, started_at=now, plan=combined, ok=combined.ok,
                           refused=not combined.ok, failure=failure, finished_at=now)
                for n in nodes])
        for name in nodes:
            await cordon(client, name, reason=settings.reason, state="queued", clock=clock)
    reports: list[NodeReport] = []
    gate = asyncio.Semaphore(max(1, max_parallel))
    failed = asyncio.Event()
    started: set[str] = set()
    surges = Surges()  # a Deployment's surge shared, one decider per workload

    async def one(name: str) -> None:
        async with gate:
            if failed.is_set():
                return
            started.add(name)
            # The rest of the fleet offers no room for this node's replacements.
            others = [n for n in nodes if n != name]
            drainer = NodeDrainer(client, name, settings, draining=others, clock=clock,
                                  on_progress=on_progress, surges=surges)
            reports.append(drainer.report)
            report = await drainer.run(dry_run=dry_run)
            if not report.ok:
                failed.set()

    await asyncio.gather(*(one(n) for n in nodes))
    if len(nodes) > 1:
        await _release_queued([n for n in nodes if n not in started], client)
    order = {n: i for i, n in enumerate(nodes)}
    reports.sort(key=lambda r: order[r.node])
    return FleetReport(nodes=tuple(nodes), plan=None, reports=reports)


async def _release_queued(names: Sequence[str], client: KubeClient) -> None:
    from drainsafe.drain.cordon import NotOwned, uncordon

    for name in names:
        node = await client.get(api_path("v1", "nodes", name=name))
        if ownership.Progress.of(node).state != "queued":
            continue
        with contextlib.suppress(NotOwned):
            await uncordon(client, name)
