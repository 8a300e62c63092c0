"""A Deployment's shared surge within one process (issue 30): several nodes of one fleet
run (drain.fleet) or one NodeMaintenance leader hold parts of one surge at once.

The record is drain.ownership.SurgeRecord version 2 (`parts`), written with the scale in
one resourceVersion-guarded patch (drain.scale.join_shared, lower_shared); the
arithmetic and the rules are drain.parts'. Here is the one decider per workload that the
gate needs (the simulator's finding: a counting gate never wedges and keeps capacity at
desired only if one process decides every eviction of the workload in turn):
`SharedSurge.lock` is held across each join decision and write, and across each gate
decision and its eviction and the part's lowering, never across a node's whole surge.

- Join on room (drain.parts.may_join): a node joins while other parts are held only if
  its new pods, with the holders' still unplaced ones, fit now (drain.room.new_pods_fit,
  the drain's own placement); else it waits for a part to leave (an event: no polling)
  and decides again. Only parts held by a drain running here are waited for.
- The gate (drain.parts.may_evict): the Available pods of the workload, less those this
  process evicted that the watch has not yet seen go, minus the pod stay at or above the
  recorded replicas.
- Across processes nothing changes: a record of the eviction guard's is waited for; a
  part held for a node that is neither this process's nor of this run (`allowed`: the
  nodes drained beside it, whose drains continue their own parts) is another drain's,
  and the drain stops as before (the plan refuses it first: "surge-owned").

StatefulSets and LeaderWorkerSets keep one surge at a time (drain.surgefirst,
drain.groupsurge, `Surges.lock`): a scale subresource or ordinals do not compose.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from drainsafe.drain import scale
from drainsafe.drain.context import DrainContext, DrainFailed
from drainsafe.drain.nodewatch import Stopped
from drainsafe.drain.ownership import SurgePart, SurgeRecord
from drainsafe.drain.parts import may_evict, may_join
from drainsafe.drain.pods import PodPlan
from drainsafe.drain.room import new_pods_fit
from drainsafe.drain.strategy import WorkloadPlan
from drainsafe.drain.workloads import WorkloadSelector, pod_template
from drainsafe.failpoint import failpoint
from drainsafe.kube import api_path
from drainsafe.kube.objects import WorkloadRef, is_active, node_of, rfc3339, uid_of


@dataclass
class SharedSurge:
    """One Deployment's surge in this process: its decider's lock, the nodes holding a
    part here, the record as last written, the pods evicted here, and the most parts
    held at once (measured, for the report and the tests)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    held: set[str] = field(default_factory=set)
    record: SurgeRecord | None = None
    base: int | None = None  # the recorded replicas of the last record seen here
    evicted: set[str] = field(default_factory=set)  # uids
    most_parts: int = 0

    def __post_init__(self) -> None:
        self._left = asyncio.Event()  # set (and replaced) when a part leaves

    def waiter(self) -> asyncio.Event:
        """Set once a part leaves (a new one for each part that leaves)."""
        return self._left

    def part_left(self) -> None:
        """Wake the nodes waiting to join."""
        self._left.set()
        self._left = asyncio.Event()

    def release(self, node: str) -> None:
        """`node`'s drain ended (done or stopped): it no longer holds a part here, so
        nobody waits on it; a part it left behind stays recorded, for its rerun."""
        if node in self.held:
            self.held.discard(node)
            self.part_left()

    def available(self, ctx: DrainContext, selector: WorkloadSelector) -> list[str]:
        """The uids of its Available pods, less those evicted here (the watch may not
        have their deletion yet)."""
        return [u for u in (uid_of(p) for p in ctx.watch.serving(selector))
                if u not in self.evicted]


@dataclass
class Surges:
    """The surges of one process: a lock per StatefulSet or LeaderWorkerSet (one node's
    surge at a time), a SharedSurge per Deployment."""

    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    shared: dict[str, SharedSurge] = field(default_factory=dict)

    def lock(self, workload: str) -> asyncio.Lock:
        return self.locks.setdefault(workload, asyncio.Lock())

    def deployment(self, workload: str) -> SharedSurge:
        return self.shared.setdefault(workload, SharedSurge())


async def join(ctx: DrainContext, w: WorkloadPlan, shared: SharedSurge,
               pods: Sequence[PodPlan], *, allowed: Collection[str]) -> SurgeRecord:
    """Hold `pods`' part of the workload's surge (a rerun's part replaced): a new record
    when there is none, joining the parts held here when its new pods fit now, else after
    a part leaves. A part an earlier run left for a node of this run (`allowed`) that no
    drain here holds is not waited for (it would never leave by itself), only counted. A
    record of the eviction guard's is waited for, as a lone surge does."""
    ref = WorkloadRef.parse(w.workload)
    part = SurgePart(by=ctx.client.identity.actor(), at=rfc3339(ctx.clock()),
                     pods={p.key: p.uid for p in pods})
    while True:
        async with shared.lock:
            obj = await ctx.client.get(scale.workload_path(ref))
            seen = SurgeRecord.of(obj)
            left = shared.waiter()
            if seen is None or not seen.guard:
                holders = {} if seen is None else seen.holders
                foreign = [n for n in holders if n != ctx.node and n not in shared.held
                           and n not in allowed]
                if foreign:
                    raise DrainFailed(f"{w.workload} is surged for a drain of "
                                      f"{', '.join(sorted(foreign))}")
                active = sorted(n for n in shared.held if n != ctx.node)
                mine = holders.get(ctx.node, SurgePart()).pods
                more = max(0, len(pods) - len(mine))  # a rerun's part is counted already
                if may_join(len(active), bool(active) and await _fits(ctx, w, obj, more)):
                    try:
                        record = await scale.join_shared(
                            ctx.client, w.workload, seen=seen, node=ctx.node, part=part,
                            autoscaler=w.autoscaler)
                    except scale.NotOurSurge:
                        continue  # changed meanwhile: decide again
                    shared.record, shared.base = record, record.replicas
                    shared.held.add(ctx.node)
                    shared.most_parts = max(shared.most_parts, len(record.holders))
                    return record
        if seen is not None and seen.guard:
            ctx.say(f"{w.workload}: surged by the eviction guard for a drain of "
                    f"{seen.node}; waiting for its restore")
            await ctx.watch.wait_no_guard_surge(ref, timeout=ctx.remaining(), stop=ctx.stop)
            continue
        ctx.say(f"{w.workload}: no room now for {len(pods)} more pod(s) beside the surge "
                f"held for {', '.join(active)}: waiting for a part to leave")
        await _part_left(ctx, left)


async def _part_left(ctx: DrainContext, left: asyncio.Event) -> None:
    """Until a part leaves (an event, not a poll), the drain stops, or its deadline."""
    waits = [asyncio.ensure_future(left.wait()), asyncio.ensure_future(ctx.stop.wait())]
    try:
        done, _ = await asyncio.wait(waits, timeout=ctx.remaining(),
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in waits:
            t.cancel()
    if ctx.stop.is_set():
        raise Stopped("stopped while waiting for a part of the surge to leave")
    if not done:
        raise DrainFailed("no room to join the surge before --timeout")


async def _fits(ctx: DrainContext, w: WorkloadPlan, obj: dict[str, object],
                more: int) -> bool:
    """The joiner's `more` new pods and the holders' not yet placed ones fit now."""
    selector = ctx.selectors.get(w.workload)
    if selector is None:
        return False
    nodes, _ = await ctx.client.list(api_path("v1", "nodes"))
    everything, _ = await ctx.client.list(api_path("v1", "pods"))
    ours = [p for p in everything if is_active(p) and selector.selector.matches(
        (p.get("metadata") or {}).get("labels"))]
    spec = obj.get("spec")
    scale_now = int(spec.get("replicas", 1)) if isinstance(spec, dict) else 1
    unplaced = max(0, scale_now - len(ours)) + sum(1 for p in ours if not node_of(p))
    template = pod_template(obj).get("spec") or {}
    return new_pods_fit(template, unplaced + more, nodes, everything,
                        excluded=(ctx.node,))


async def lower(ctx: DrainContext, w: WorkloadPlan, shared: SharedSurge,
                keys: Collection[str]) -> None:
    """`keys` out of this node's part (the lock held): the record and scale in one write;
    a part that leaves wakes the nodes waiting to join."""
    assert shared.record is not None
    record = await scale.lower_shared(ctx.client, w.workload, shared.record, ctx.node, keys)
    shared.record = record
    if record is None or ctx.node not in record.holders:
        shared.release(ctx.node)


async def leave(ctx: DrainContext, w: WorkloadPlan, shared: SharedSurge) -> SurgeRecord | None:
    """This node's part out, whatever it still names (the last part out restores the
    recorded scale and removes the record). Returns the record left."""
    async with shared.lock:
        record = shared.record
        if record is None or ctx.node not in record.holders:
            # A rerun with nothing left to evict: the part an earlier run left.
            obj = await ctx.client.get(scale.workload_path(WorkloadRef.parse(w.workload)))
            found = SurgeRecord.of(obj)
            if found is not None and not found.guard and ctx.node in found.holders:
                shared.record, shared.base = found, found.replicas
        record = shared.record
        if record is not None and ctx.node in record.holders:
            await lower(ctx, w, shared, record.holders[ctx.node].pods)
        shared.release(ctx.node)
        return shared.record


async def evict_gated(ctx: DrainContext, w: WorkloadPlan, shared: SharedSurge,
                      remaining: Sequence[PodPlan], base: int,
                      gone_waits: list[asyncio.Task[None]]) -> None:
    """Evict each old pod once the budgets allow and the gate does, one decision and
    eviction at a time per workload; the part comes down by the pod right after the
    server accepted (as drain.surgefirst lowers a lone surge), or as soon as the pod is
    found gone another way."""
    selector = ctx.selectors[w.workload]
    ns = selector.namespace

    def gate(p: PodPlan) -> bool:
        available = shared.available(ctx, selector)
        return may_evict(len(available), base, serving=p.uid in available)

    for p in remaining:
        await ctx.budget_allows(ns, [p])
        while True:
            async with shared.lock:
                if gate(p):
                    async def accepted(p: PodPlan = p) -> None:
                        shared.evicted.add(p.uid)
                        failpoint("drain.evicted")
                        await lower(ctx, w, shared, [p.key])

                    await ctx.evict(p, after_accept=accepted)
                    record = shared.record
                    if record is not None and p.key in record.holders.get(
                            ctx.node, SurgePart()).pods:
                        await lower(ctx, w, shared, [p.key])  # gone without our eviction
                    break
            def allows(p: PodPlan = p) -> bool | None:
                return gate(p) or None

            await ctx.watch.until([ctx.watch.pods[ns]], allows,
                                  timeout=ctx.remaining(), recheck=0.5, stop=ctx.stop,
                                  what=f"{w.workload} to keep {base} Available without "
                                  f"{p.key}")
        gone_waits.append(asyncio.create_task(ctx.after_eviction(p)))


async def give_back(ctx: DrainContext, w: WorkloadPlan, shared: SharedSurge) -> None:
    """Take this node's part back (before any eviction): a no-room stop."""
    with contextlib.suppress(scale.NotOurSurge):
        await leave(ctx, w, shared)
