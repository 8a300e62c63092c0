"""Evict-first (break before make), replacement first: one pod of a workload at a time.

For a workload the plan does not surge (a StatefulSet, whose pod keeps its name and
identity; a bare ReplicaSet; a Deployment mid-rollout; --strategy evict), its pods on the
node form one queue (drain.plan.Queue). Each pod is evicted only once its workload is
fully Ready (its desired Ready count), and only once its budgets allow (instead of a
predictable 429); then the drain waits until it is gone and out of every EndpointSlice
and its replacement is Ready, and names the replacement and its node. A replacement
Unschedulable for `unschedulable_after` stops all further evictions. Pods without a
replacement (finished ones, pods of no workload) are queues of one.
"""

from __future__ import annotations

from collections.abc import Sequence

from drainsafe.drain.context import DrainContext, DrainFailed
from drainsafe.drain.evict import EvictionStopped
from drainsafe.drain.nodewatch import Stopped, Unschedulable
from drainsafe.drain.plan import DrainPlan
from drainsafe.drain.pods import PodPlan
from drainsafe.kube import KubeError, WaitTimeout
from drainsafe.kube.objects import key_of


async def run_queue(ctx: DrainContext, plan: DrainPlan, keys: Sequence[str]) -> None:
    for key in keys:
        if ctx.stop.is_set():
            return
        try:
            await _drain_pod(ctx, plan.pod(key))
        except (DrainFailed, KubeError, WaitTimeout, Stopped, EvictionStopped,
                TimeoutError, Unschedulable) as exc:
            rep = ctx.report(key)
            rep.outcome = "failed"
            rep.detail = str(exc)
            ctx.fail(f"{key}: {exc}")
            return


async def await_terminating(ctx: DrainContext, pod: PodPlan) -> None:
    """A pod already terminating when planned: waited for, never sent an eviction."""
    rep = ctx.report(pod.key)
    try:
        await ctx.after_eviction(pod)
        rep.outcome = "waited"
    except WaitTimeout as exc:
        rep.outcome = "failed"
        ctx.fail(f"{pod.key}: {exc}")


async def _drain_pod(ctx: DrainContext, pod: PodPlan) -> None:
    rep = ctx.report(pod.key)
    selector = ctx.selectors.get(pod.workload or "")
    if pod.needs_replacement and selector is not None:
        # Replacement first: evict only with the workload fully Ready.
        ctx.say(f"{pod.key}: waiting for {pod.workload} to be fully Ready")
        await ctx.wait_workload_ready(selector)
    if ctx.stop.is_set():
        return
    await ctx.budget_allows(pod.namespace, [pod])  # rather than a predictable 429
    await ctx.evict(pod)
    await ctx.after_eviction(pod)
    if pod.needs_replacement and selector is not None:
        ok = await ctx.wait_workload_ready(selector)
        newest = max(ok, key=lambda p: str((p.get("metadata") or {}).get(
            "creationTimestamp") or ""))
        rep.replacement = key_of(newest)
        rep.replacement_node = (newest.get("spec") or {}).get("nodeName")
        rep.replacement_ready_at = ctx.clock()
        ctx.say(f"{rep.key}: replacement {rep.replacement} Ready on {rep.replacement_node}")
