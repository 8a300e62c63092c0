"""Surge-first (make before break) for one Deployment or StatefulSet, as its WorkloadPlan says.

Record the surge on the Deployment before any change (drain.scale, drain.ownership's
SurgeRecord), scale up by its pods on the node in one step (an HPA's minReplicas raised
instead: kubernetes pkg/controller/podautoscaler/horizontal.go normalizeDesiredReplicas
takes a scale outside its bounds back), wait until that many new pods are Available on
other nodes and, behind a Service, ready in its EndpointSlices; then evict the old pods as
fast as their PodDisruptionBudgets allow, lowering the scale by one right after each
accepted eviction (the ReplicaSet then has nothing to remove, or only the replacement it
has just started, which is not Ready and so ranks first: pkg/controller/controller_utils.go
ActivePodsWithRanks), and restore exactly the recorded scale. A new pod Unschedulable for
`unschedulable_after` takes the surge back before any eviction and stops.

A StatefulSet (WorkloadPlan.identity "stable") keeps the surge through the evictions:
its pods have stable names, so an evicted pod is recreated under its name by the
StatefulSet controller (pkg/controller/statefulset/stateful_set_control.go
processReplica), on another node since this one is cordoned, and the k new ordinals
stand in meanwhile. Evictions are paced by the budgets as above; once every old pod is
gone and its recreation is Available elsewhere (and a ready endpoint, behind a Service),
the recorded scale is restored and the controller removes the highest ordinals, the
stand-ins (processCondemned; with OrderedReady only while every other pod is healthy).
A rerun waits for the recreations of the pods the record names before it restores, so a
restore never takes a stand-in while the pod it stands in for is still starting.

When the eviction guard (drainsafe controller) has surged the workload for another
drainer, the drain waits for the guard's restore and then records its own: never a surge
on top of a surge. Two nodes of one fleet run (or one NodeMaintenance leader) share one
Deployment's surge, each holding its part, joined on room and with every eviction gated so
that the workload stays at desired (drain.sharedsurge); a StatefulSet is surged for one
node at a time (`Surges.lock`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence

from drainsafe.drain import ownership, parts, scale, sharedsurge
from drainsafe.drain.context import DrainContext, DrainFailed
from drainsafe.drain.evict import guard
from drainsafe.drain.nodewatch import Unschedulable
from drainsafe.drain.plan import DrainPlan
from drainsafe.drain.pods import PodPlan
from drainsafe.drain.sharedsurge import Surges
from drainsafe.drain.strategy import WorkloadPlan
from drainsafe.failpoint import failpoint
from drainsafe.kube import KubeError
from drainsafe.kube.objects import WorkloadRef, key_of, uid_of


async def drain_workload(ctx: DrainContext, plan: DrainPlan, w: WorkloadPlan,
                         surges: Surges) -> None:
    if w.identity == "interchangeable":
        await _shared(ctx, plan, w, surges.deployment(w.workload))
        return
    async with surges.lock(w.workload):
        await _surge(ctx, plan, w)


def _still_here(ctx: DrainContext, ref: WorkloadRef, pods: Sequence[PodPlan]) -> list[PodPlan]:
    """The pods still to evict: those an earlier run evicted, or found terminating, are
    reported and left out."""
    remaining = []
    for p in pods:
        rep = ctx.report(p.key)
        found = guard(p.uid, recorded=ctx.progress.evicted_uid(p.key),
                      seen=ctx.watch.pod(ref.namespace, p.key))
        if found == "evicted-before":
            rep.outcome = "evicted"  # a previous run evicted it; never again
        elif found == "terminating":
            rep.outcome = "waited"
            rep.detail = "already terminating: waited for, not evicted"
        else:  # one gone meanwhile is the evictor's to report when its turn comes
            remaining.append(p)
    return remaining


async def _shared(ctx: DrainContext, plan: DrainPlan, w: WorkloadPlan,
                  shared: sharedsurge.SharedSurge) -> None:
    """A Deployment: this node's part of a surge shared with the other nodes of this
    process (drain.sharedsurge), joined on room, its evictions gated."""
    pods = [plan.pod(k) for k in w.pods if plan.pod(k).needs_replacement]
    remaining = _still_here(ctx, WorkloadRef.parse(w.workload), pods)
    gone_waits: list[asyncio.Task[None]] = []
    try:
        if remaining:
            record = await sharedsurge.join(ctx, w, shared, remaining, allowed=ctx.draining)
            failpoint("drain.surged")
            base = record.replicas
            how = (f"HPA {record.autoscaler.name} minReplicas and " if record.autoscaler
                   else "")
            others = [n for n in record.nodes if n != ctx.node]
            ctx.scaled[w.workload] = (f"{how}replicas {base} -> {parts.target(record)}"
                                      + (f" (shared with {', '.join(others)})" if others
                                         else ""))
            ctx.say(f"{w.workload}: surged {base} -> {parts.target(record)} (this node's "
                    f"part {len(remaining)}); waiting for {len(remaining)} new pod(s) "
                    "Available elsewhere")

            async def take_back() -> None:
                await sharedsurge.give_back(ctx, w, shared)

            await _wait_surge(ctx, w, remaining, base, give_back=take_back)
            await sharedsurge.evict_gated(ctx, w, shared, remaining, base, gone_waits)
        left = await sharedsurge.leave(ctx, w, shared)
        if left is None and shared.base is not None:
            ctx.say(f"{w.workload}: scale restored to {shared.base}")
        elif left is not None:
            ctx.say(f"{w.workload}: this node's part left; the surge stays for "
                    f"{', '.join(left.nodes)}")
        if gone_waits:
            await asyncio.gather(*gone_waits)
    finally:
        shared.release(ctx.node)  # stopped: nobody waits on a part that will not leave
        for t in gone_waits:
            t.cancel()


async def record_surge(ctx: DrainContext, w: WorkloadPlan, pods: Sequence[PodPlan],
                       recorded: Mapping[str, str] | None = None
                       ) -> tuple[ownership.SurgeRecord, list[PodPlan]]:
    """Record the surge on the workload (the pods `recorded` names, "ns/name" -> uid; by
    default `pods`), or read the record an earlier run left; wait out a surge of the
    eviction guard's first. Returns the record (this node's) and the pods still to evict:
    those an earlier run evicted, or found terminating, are reported and left out."""
    ref = WorkloadRef.parse(w.workload)
    while True:
        remaining = _still_here(ctx, ref, pods)
        record = await scale.begin(ctx.client, w.workload, node=ctx.node,
                                   autoscaler=w.autoscaler,
                                   pods=dict(recorded) if recorded is not None
                                   else {p.key: p.uid for p in pods}, clock=ctx.clock)
        if not record.guard:
            break
        if not ownership.SURGE_KINDS[ref.kind].guarded:
            raise DrainFailed(f"{w.workload} carries a surge record of the eviction guard's, "
                              "which does not surge this kind: remove it by hand")
        # The eviction guard surged it for another drainer (kubectl drain, an
        # autoscaler): never a second surge on top; wait for the guard's restore. The
        # guard holds other evictions of the workload while ours is recorded.
        ctx.say(f"{w.workload}: surged by the eviction guard for a drain of "
                f"{record.node}; waiting for its restore")
        await ctx.watch.wait_no_guard_surge(ref, timeout=ctx.remaining(), stop=ctx.stop)
    if record.node != ctx.node:
        raise DrainFailed(f"{w.workload} is surged for a drain of {record.node}")
    return record, remaining


async def _surge(ctx: DrainContext, plan: DrainPlan, w: WorkloadPlan) -> None:
    pods = [plan.pod(k) for k in w.pods if plan.pod(k).needs_replacement]
    ref = WorkloadRef.parse(w.workload)
    record, remaining = await record_surge(ctx, w, pods)
    base = record.replicas
    gone_waits: list[asyncio.Task[None]] = []
    try:
        if remaining:
            # A Deployment's scale came down by one per accepted eviction; a StatefulSet's
            # stand-ins all stay until the restore (an earlier run's evicted pods may still
            # be starting under their names), so its surge is every pod the record names.
            surge = len(remaining) if w.identity == "interchangeable" \
                else max(len(record.pods), len(remaining))
            target = base + surge
            await scale.set_scale(ctx.client, w.workload, record, target)
            failpoint("drain.surged")
            how = (f"HPA {record.autoscaler.name} minReplicas and " if record.autoscaler
                   else "")
            ctx.scaled[w.workload] = f"{how}replicas {base} -> {target}"
            ctx.say(f"{w.workload}: surged {base} -> {target}; waiting for "
                    f"{len(remaining)} new pod(s) Available elsewhere")
            # A StatefulSet pod an earlier run evicted may still be starting under its
            # name: its stand-in must stay, whatever else fails.
            async def take_back() -> None:
                # Nothing of this workload was evicted yet: take the surge back.
                taken = await scale.begin(ctx.client, w.workload, node=ctx.node,
                                          autoscaler=w.autoscaler, pods={}, clock=ctx.clock)
                with contextlib.suppress(KubeError):
                    await scale.finish(ctx.client, w.workload, taken)

            await _wait_surge(ctx, w, remaining, base,
                              give_back=take_back if w.identity == "interchangeable"
                              or len(remaining) >= len(record.pods) else None)
            if w.identity == "stable":
                await _evict_for_recreation(ctx, ref.namespace, remaining, gone_waits)
            else:
                await _evict_paced(ctx, w.workload, ref.namespace, remaining, record, base,
                                   gone_waits)
        if w.identity == "stable":
            await asyncio.gather(*gone_waits)
            await _wait_recreated(ctx, w, record)
        await scale.finish(ctx.client, w.workload, record)
        ctx.say(f"{w.workload}: scale restored to {base}")
        if gone_waits:
            await asyncio.gather(*gone_waits)
    finally:
        for t in gone_waits:
            t.cancel()


async def _wait_surge(ctx: DrainContext, w: WorkloadPlan, remaining: Sequence[PodPlan],
                      base: int, *, give_back: Callable[[], Awaitable[None]] | None) -> None:
    """Until `base` pods are Available off the node (the new ones ready endpoints, behind
    a Service). A new pod Unschedulable: `give_back` takes the surge back and the drain
    stops; None when the surge must stay (stand-ins for pods evicted before)."""
    selector = ctx.selectors.get(w.workload)
    if selector is None:
        raise DrainFailed(f"{w.workload}: no selector; cannot tell its pods")
    old = {p.uid for p in remaining}
    try:
        serving = await ctx.watch.wait_serving(
            selector, base, excluding=(ctx.node,), timeout=ctx.remaining(),
            unschedulable_after=ctx.settings.unschedulable_after, stop=ctx.stop)
    except Unschedulable as exc:
        if give_back is None:
            raise DrainFailed(f"{exc}; the surge stays (its stand-ins serve in the place "
                              "of the pods evicted before): rerun once there is room"
                              ) from exc
        await give_back()
        raise DrainFailed(f"{exc}; the surge was taken back, no pod was evicted (the "
                          "node stays cordoned)") from exc
    fresh = sorted((p for p in serving if uid_of(p) not in old),
                   key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")),
                   reverse=True)
    if any(ctx.watch.listed(selector.namespace, u) for u in old):
        # Behind a Service: the new pods serve once they are ready endpoints, not when
        # the kubelet calls them Ready. Evicting before that puts their share of the
        # traffic on the old pods for one more hop of the control plane.
        await ctx.watch.wait_endpoints_ready(
            selector.namespace, [uid_of(p) for p in fresh[:len(remaining)]],
            timeout=min(60.0, ctx.remaining()), stop=ctx.stop)
    now = ctx.clock()
    for i, p in enumerate(remaining):
        rep = ctx.report(p.key)
        if i < len(fresh):
            rep.replacement = key_of(fresh[i])
            rep.replacement_node = (fresh[i].get("spec") or {}).get("nodeName")
        rep.replacement_ready_at = now
    ctx.say(f"{w.workload}: {len(serving)} pods Available off {ctx.node}")


async def _evict_paced(ctx: DrainContext, workload: str, namespace: str,
                       remaining: Sequence[PodPlan], record: ownership.SurgeRecord, base: int,
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
        failpoint("drain.evicted")
        async with lock:
            surged -= 1
            await scale.set_scale(ctx.client, workload, record, base + surged)

    while left:
        allowed = await ctx.budget_allows(namespace, left)
        batch, left = left[:max(allowed, 1)], left[max(allowed, 1):]
        await asyncio.gather(*(ctx.evict(p, after_accept=lower) for p in batch))
        async with lock:
            if surged > len(left):  # pods that left without our eviction
                surged = len(left)
                await scale.set_scale(ctx.client, workload, record, base + surged)
        for p in batch:
            gone_waits.append(asyncio.create_task(ctx.after_eviction(p)))


async def _evict_for_recreation(ctx: DrainContext, namespace: str,
                                remaining: Sequence[PodPlan],
                                gone_waits: list[asyncio.Task[None]]) -> None:
    """Evict as many at once as the budgets allow; the scale stays up (the stand-ins
    serve until each evicted pod is recreated under its name)."""
    left = list(remaining)
    while left:
        allowed = await ctx.budget_allows(namespace, left)
        batch, left = left[:max(allowed, 1)], left[max(allowed, 1):]
        await asyncio.gather(*(ctx.evict(p) for p in batch))
        for p in batch:
            gone_waits.append(asyncio.create_task(ctx.after_eviction(p)))


async def _wait_recreated(ctx: DrainContext, w: WorkloadPlan,
                          record: ownership.SurgeRecord) -> None:
    """Until every pod the record names is recreated under its name, Available off the
    node and, behind a Service, a ready endpoint: only then may the restore take the
    stand-ins away."""
    selector = ctx.selectors.get(w.workload)
    if selector is None:
        raise DrainFailed(f"{w.workload}: no selector; cannot tell its pods")
    if not record.pods:
        return
    ctx.say(f"{w.workload}: waiting for {', '.join(sorted(record.pods))} to be recreated "
            f"elsewhere")
    try:
        recreated = await ctx.watch.wait_recreated(
            selector.namespace, record.pods, min_ready_seconds=selector.min_ready_seconds,
            excluding=(ctx.node,), timeout=ctx.remaining(),
            unschedulable_after=ctx.settings.unschedulable_after, stop=ctx.stop)
    except Unschedulable as exc:
        raise DrainFailed(f"{exc}; the surge stays (its stand-ins serve in the evicted "
                          "pods' place): rerun once there is room") from exc
    if any(ctx.watch.listed(selector.namespace, uid_of(p))
           for p in ctx.watch.serving(selector)):
        # Behind a Service: the restore removes stand-ins that are endpoints, so the
        # recreations must be endpoints first.
        await ctx.watch.wait_endpoints_ready(
            selector.namespace, [uid_of(p) for p in recreated],
            timeout=min(60.0, ctx.remaining()), stop=ctx.stop)
    now = ctx.clock()
    for p in recreated:
        rep = ctx.reports.get(key_of(p))
        if rep is not None:
            rep.replacement = key_of(p)
            rep.replacement_node = (p.get("spec") or {}).get("nodeName")
            rep.replacement_ready_at = now
    ctx.say(f"{w.workload}: {', '.join(sorted(record.pods))} recreated elsewhere")
