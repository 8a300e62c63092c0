"""Surge-first (make before break) for a LeaderWorkerSet: whole groups stand in.

After kubernetes-sigs/lws v0.10.0 (files named below). A LeaderWorkerSet serves in
groups of `size` pods, one leader and size-1 workers, and a group is Ready only when all
of them are (pkg/controllers/leaderworkerset_controller.go updateConditions), so a drain
counts capacity in Ready groups. With the default restartPolicy RecreateGroupOnPodRestart,
one pod of a group with a deletionTimestamp makes lws delete the group's leader with
foreground propagation, and the leader's worker StatefulSet and every worker go with it
(pkg/controllers/pod_controller.go handleRestartPolicy); that DELETE is lws's, not an
eviction, so no budget holds the rest of the group. The leader StatefulSet then recreates
the leader under its name and lws its workers (pod_controller.go, the worker StatefulSet
named as the leader pod). Scaling the LWS down lowers the leader StatefulSet, which
removes the highest group indices (leaderworkerset_controller.go).

For an LWS with pods of g groups on the node (its WorkloadPlan, identity "group"):
1. record on the LWS before any change (drain.scale, the one engine; the record names the
   affected groups' pods, all of them when lws recreates whole groups, and their UIDs:
   drain.groups, the rules the eviction guard's group surge shares);
2. scale up by g groups through the LWS's scale subresource;
3. wait until the LWS has its recorded replicas of whole Ready groups none of whose pods
   is on the node (the g new groups entirely Ready), and, behind a Service, their pods in
   the roles the Service selects (worker-index) ready endpoints;
4. evict one pod of each affected group through the Eviction API (its leader when it is
   here: sorted by name), paced so that the budgets let the whole group go (`size` pods:
   drainsafe.pdb reads a budget over groups in whole groups); lws takes the rest of the
   group down and recreates it. With restartPolicy None (or the deprecated Default) lws
   recreates nothing itself: each pod here is evicted and its own StatefulSet recreates it
   under its name (the group is not Ready meanwhile; the stand-ins serve), but a leader
   here is evicted alone for its group, whose workers its deletion takes with it (their
   worker StatefulSet is owned by the leader pod: pod_controller.go
   setControllerReferenceWithStatefulSet), paced as a whole group;
5. wait until every recorded pod is there again with another UID and each affected group
   is whole Ready off the node (and a ready endpoint, behind a Service);
6. restore exactly the recorded replicas: lws removes the highest group indices, the
   stand-ins. Ready groups go from replicas + g to replicas, never below.

A rerun continues from the records: pods the node's record lists as evicted are never
evicted again, nor any other pod of their groups (lws recreated those groups already), and
the restore waits for the recreation of every group the record names.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from drainsafe.drain import groups, ownership, scale
from drainsafe.drain.context import DrainContext, DrainFailed
from drainsafe.drain.nodewatch import Unschedulable
from drainsafe.drain.plan import DrainPlan
from drainsafe.drain.pods import PodPlan
from drainsafe.drain.sharedsurge import Surges
from drainsafe.drain.strategy import WorkloadPlan
from drainsafe.drain.surgefirst import record_surge
from drainsafe.drain.workloads import WorkloadSelector
from drainsafe.kube import KubeError
from drainsafe.kube.objects import (
    LWS_WORKER_INDEX_LABEL,
    WorkloadRef,
    is_active,
    key_of,
    lws_group_of,
    lws_is_leader_name,
    meta,
    uid_of,
)

Obj = dict[str, object]


async def drain_groups(ctx: DrainContext, plan: DrainPlan, w: WorkloadPlan,
                       surges: Surges) -> None:
    async with surges.lock(w.workload):
        await _surge_groups(ctx, plan, w)


def _selector(ctx: DrainContext, w: WorkloadPlan) -> WorkloadSelector:
    selector = ctx.selectors.get(w.workload)
    if selector is None or selector.group_size is None:
        raise DrainFailed(f"{w.workload}: no group selector; cannot tell its groups")
    return selector


async def _surge_groups(ctx: DrainContext, plan: DrainPlan, w: WorkloadPlan) -> None:
    selector = _selector(ctx, w)
    ref = WorkloadRef.parse(w.workload)
    pods = [plan.pod(k) for k in w.pods if plan.pod(k).needs_replacement]
    record, remaining = await record_surge(
        ctx, w, pods, groups.record_pods(ref.name, {p.key: p.uid for p in pods},
                                         ctx.watch.workload_pods(selector),
                                         recreates_group=w.recreates_group))
    base = record.replicas
    affected = sorted(set(groups.affected_groups(ref.name, record.pods))
                      | {p.group for p in remaining if p.group is not None})
    # Groups an earlier run evicted a pod of (or that are going): lws recreates them whole.
    started = {p.group for p in pods if p not in remaining}
    gone_waits: list[asyncio.Task[None]] = []
    try:
        if remaining:
            target = groups.surge_target(base, affected)
            await scale.set_scale(ctx.client, w.workload, record, target)
            ctx.scaled[w.workload] = f"replicas {base} -> {target} groups"
            ctx.say(f"{w.workload}: surged {base} -> {target} groups; waiting for "
                    f"{len(affected)} new group(s) of {selector.group_size} Ready elsewhere")
            untouched = all(
                (p := ctx.watch.pod(ref.namespace, key)) is not None and uid_of(p) == uid
                and is_active(p) for key, uid in record.pods.items())
            await _wait_stand_ins(ctx, w, selector, remaining, record, take_back=untouched)
            await _evict(ctx, w, selector, remaining, started, gone_waits)
        await asyncio.gather(*gone_waits)
        await _wait_recreated(ctx, w, selector, record, affected)
        await scale.finish(ctx.client, w.workload, record)
        ctx.say(f"{w.workload}: scale restored to {base} groups")
    finally:
        for t in gone_waits:
            t.cancel()


def _roles(ctx: DrainContext, namespace: str, pods: Sequence[Obj]) -> set[str]:
    """The worker indices of `pods` that are listed in an EndpointSlice: the roles a
    Service selects (a Service over the leaders: "0")."""
    return {str((meta(p).get("labels") or {}).get(LWS_WORKER_INDEX_LABEL))
            for p in pods if ctx.watch.listed(namespace, uid_of(p))}


def _in_roles(pods: Sequence[Obj], roles: set[str]) -> list[str]:
    return [uid_of(p) for p in pods
            if str((meta(p).get("labels") or {}).get(LWS_WORKER_INDEX_LABEL)) in roles]


async def _wait_stand_ins(ctx: DrainContext, w: WorkloadPlan, selector: WorkloadSelector,
                          remaining: Sequence[PodPlan], record: ownership.SurgeRecord, *,
                          take_back: bool) -> None:
    old = set(record.pods.values())
    old_pods = [p for p in ctx.watch.workload_pods(selector) if uid_of(p) in old]
    try:
        serving = await ctx.watch.wait_serving(
            selector, record.replicas, excluding=(ctx.node,), timeout=ctx.remaining(),
            unschedulable_after=ctx.settings.unschedulable_after, stop=ctx.stop)
    except Unschedulable as exc:
        if not take_back:
            raise DrainFailed(f"{exc}; the surge stays (its stand-in groups serve in the "
                              "place of the groups evicted before): rerun once there is "
                              "room") from exc
        # Nothing of this workload was evicted yet: take the surge back, then stop.
        with contextlib.suppress(KubeError):
            await scale.finish(ctx.client, w.workload, record)
        raise DrainFailed(f"{exc}; the surge was taken back, no pod was evicted (the "
                          "node stays cordoned)") from exc
    fresh = [p for p in serving if uid_of(p) not in old]
    roles = _roles(ctx, selector.namespace, old_pods)
    stand_ins = sorted({g[1] for p in fresh
                        if (g := lws_group_of(p)) is not None and g[1] >= record.replicas})
    if roles:
        # Behind a Service: the stand-in groups serve once their pods in the Service's
        # roles are ready endpoints, not when the kubelet calls them Ready.
        await ctx.watch.wait_endpoints_ready(selector.namespace, _in_roles(fresh, roles),
                                             timeout=min(60.0, ctx.remaining()),
                                             stop=ctx.stop)
    now = ctx.clock()
    for p in remaining:
        rep = ctx.report(p.key)
        rep.replacement = ", ".join(f"group {g}" for g in stand_ins) or None
        rep.replacement_ready_at = now
    ctx.say(f"{w.workload}: {ctx.watch.capacity(selector, excluding=(ctx.node,))} whole "
            f"groups Ready off {ctx.node}")


async def _evict(ctx: DrainContext, w: WorkloadPlan, selector: WorkloadSelector,
                 remaining: Sequence[PodPlan], started: set[int | None],
                 gone_waits: list[asyncio.Task[None]]) -> None:
    """One pod per group (lws takes the rest of the group down), or, with restartPolicy
    None, every pod but for a group whose leader is here (the leader's deletion takes its
    workers); as many whole groups at once as the budgets let go whole."""
    ref = WorkloadRef.parse(w.workload)
    namespace = ref.namespace
    size = selector.group_size or 1
    batches: list[list[PodPlan]] = []
    singles: list[PodPlan] = []
    for group in sorted({p.group for p in remaining if p.group is not None}):
        # Sorted by name: the leader `<lws>-<g>` first.
        members = sorted((p for p in remaining if p.group == group), key=lambda p: p.key)
        if not (w.recreates_group or lws_is_leader_name(ref.name, members[0].name)):
            singles += members
        elif group in started:  # an earlier run evicted a pod of it: going already
            for p in members:
                _taken_with_group(ctx, p, gone_waits)
        else:
            batches.append(members)
    while batches:
        allowed = await ctx.budget_allows(namespace, [b[0] for b in batches],
                                          at_least=size)
        n = max(allowed // size, 1)
        batch, batches = batches[:n], batches[n:]
        await asyncio.gather(*(ctx.evict(b[0]) for b in batch))
        for b in batch:
            gone_waits.append(asyncio.create_task(ctx.after_eviction(b[0])))
            for p in b[1:]:
                _taken_with_group(ctx, p, gone_waits)
    left = singles
    while left:
        allowed = await ctx.budget_allows(namespace, left)
        pods, left = left[:max(allowed, 1)], left[max(allowed, 1):]
        await asyncio.gather(*(ctx.evict(p) for p in pods))
        for p in pods:
            gone_waits.append(asyncio.create_task(ctx.after_eviction(p)))


def _taken_with_group(ctx: DrainContext, pod: PodPlan,
                      gone_waits: list[asyncio.Task[None]]) -> None:
    """Another pod of a group being recreated: lws deletes it, drainsafe waits for it."""
    rep = ctx.report(pod.key)
    rep.outcome = "waited"
    rep.detail = ("taken down with its group (lws's group restart, or its leader's "
                  "deletion): waited for, not evicted")
    gone_waits.append(asyncio.create_task(ctx.after_eviction(pod)))


async def _wait_recreated(ctx: DrainContext, w: WorkloadPlan, selector: WorkloadSelector,
                          record: ownership.SurgeRecord, groups: Sequence[int]) -> None:
    """Until the affected groups are recreated whole and Ready off the node: only then
    may the restore take the stand-in groups away."""
    if not record.pods:
        return
    ctx.say(f"{w.workload}: waiting for group(s) {', '.join(map(str, groups))} to be "
            "recreated and Ready elsewhere")
    try:
        recreated = await ctx.watch.wait_groups_recreated(
            selector, record.pods, groups, excluding=(ctx.node,), timeout=ctx.remaining(),
            unschedulable_after=ctx.settings.unschedulable_after, stop=ctx.stop)
    except Unschedulable as exc:
        raise DrainFailed(f"{exc}; the surge stays (its stand-in groups serve in the "
                          "evicted groups' place): rerun once there is room") from exc
    stand_ins = [p for p in ctx.watch.serving(selector)
                 if (g := lws_group_of(p)) is not None and g[1] not in groups]
    roles = _roles(ctx, selector.namespace, stand_ins)
    if roles:
        # The restore removes stand-ins that are endpoints: the recreations first.
        await ctx.watch.wait_endpoints_ready(selector.namespace, _in_roles(recreated, roles),
                                             timeout=min(60.0, ctx.remaining()),
                                             stop=ctx.stop)
    now = ctx.clock()
    for p in recreated:
        rep = ctx.reports.get(key_of(p))
        if rep is not None:
            rep.replacement = key_of(p)
            rep.replacement_node = str((p.get("spec") or {}).get("nodeName") or "") or None
            rep.replacement_ready_at = now
    ctx.say(f"{w.workload}: group(s) {', '.join(map(str, groups))} recreated elsewhere")
