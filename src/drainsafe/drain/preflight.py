"""Before anything changes: read the cluster, plan, and end with a plan or a refusal.

`preflight` plans the node (drain.plan, a pure function of what it read) and plans again
when waiting can help: when the only blockers are "no room" while the eviction guard
(drainsafe controller) surges workloads for another drainer, it waits (bounded) for the
guard's restore, whose stand-ins hold that room, and for the restore's scale-down to be
done (a pod holds its node's room until it is gone, as kube-scheduler counts a terminating
pod's requests: placement.occupying); with --surge, when the only blockers are
"no room", it grows the pool first (drain.surge: placeholder pods for an autoscaler, the
cluster-autoscaler overprovisioning pattern), unless a wait for the guard timed out: no
surge on top of a restore not seen to finish. Any blocker left refuses, before the cordon.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drainsafe.drain import ownership
from drainsafe.drain.ownership import GUARDED_KINDS, SURGE_KINDS
from drainsafe.drain.plan import DrainPlan, plan_drain
from drainsafe.drain.settings import DrainSettings
from drainsafe.drain.surge import SurgeFailed, surge
from drainsafe.drain.workloads import GROUP_KIND, ClusterState, guard_surges, resolve_workload
from drainsafe.kube import Informer, KubeClient, NotFound, WaitTimeout, api_path
from drainsafe.kube.objects import WorkloadRef
from drainsafe.labels import parse
from drainsafe.placement import occupying

Obj = dict[str, Any]


CONTROLLER_LISTS = (("replicasets", "ReplicaSet"), ("deployments", "Deployment"),
                    ("statefulsets", "StatefulSet"))


async def _list_or_empty(client: KubeClient, path: str) -> list[Obj]:
    try:
        items, _ = await client.list(path)
    except NotFound:
        return []  # a resource this server does not serve (e.g. no StatefulSets in a lab)
    return items


async def read_cluster(client: KubeClient) -> ClusterState:
    # The lists at once: read one after another they were most of the time before the
    # cordon (8 round trips). Each is its own consistent list, as they were before.
    lws = SURGE_KINDS[GROUP_KIND]
    sources = [*((api_path("apps/v1", plural), kind) for plural, kind in CONTROLLER_LISTS),
               # LeaderWorkerSets (a CRD: 404 where it is not installed), surged whole.
               (api_path(lws.api_version, lws.plural), GROUP_KIND)]
    (nodes, _), (pods, _), pdbs, hpas, workloads = await asyncio.gather(
        client.list(api_path("v1", "nodes")),
        client.list(api_path("v1", "pods")),
        _list_or_empty(client, api_path("policy/v1", "poddisruptionbudgets")),
        _list_or_empty(client, api_path("autoscaling/v2", "horizontalpodautoscalers")),
        asyncio.gather(*(_list_or_empty(client, path) for path, _kind in sources)))
    controllers: dict[str, Obj] = {}
    for (_path, kind), objs in zip(sources, workloads, strict=True):
        for obj in objs:
            meta = obj.get("metadata") or {}
            ref = WorkloadRef(kind, str(meta.get("namespace") or ""), str(meta.get("name")))
            controllers[str(ref)] = obj
    return ClusterState(nodes=nodes, pods=pods, pdbs=pdbs, controllers=controllers,
                        autoscalers=hpas)


async def plan_nodes(
    client: KubeClient, nodes: Sequence[str], settings: DrainSettings,
    *, draining: Sequence[str] = (),
) -> tuple[DrainPlan, ClusterState]:
    state = await read_cluster(client)
    selector = parse(settings.pod_selector) if settings.pod_selector else None

    def wanted(pod: Mapping[str, Any]) -> bool:
        return selector is None or selector.matches((pod.get("metadata") or {}).get("labels"))

    plan = plan_drain(state, nodes, settings.options, pod_filter=wanted, draining=draining)
    return plan, state


async def wait_guard_restored(client: KubeClient, workloads: Sequence[str], *,
                              timeout: float) -> bool:
    """Until none of `workloads` carries the eviction guard's surge record; False after
    `timeout` (the plan that follows says what is still in the way)."""
    refs = [WorkloadRef.parse(w) for w in workloads]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for kind in sorted({r.kind for r in refs}):
        keys = {f"{r.namespace}/{r.name}" for r in refs if r.kind == kind}  # informer keys

        def restored(cache: Mapping[str, Obj], keys: set[str] = keys) -> bool:
            return not any(ownership.guard_surged(cache.get(k)) for k in keys)

        surge = GUARDED_KINDS[kind]
        async with Informer(client, api_path(surge.api_version, surge.plural)) as informer:
            try:
                await informer.wait_for(restored, timeout=max(deadline - loop.time(), 0.0),
                                        what="the eviction guard's restore")
            except WaitTimeout:
                return False
    return True


def restoring(state: ClusterState, workloads: Sequence[str]) -> dict[str, int]:
    """Of `workloads` ("Kind/ns/name"), those with more pods than they want (their desired
    pods, by name): the restore's scale-down not yet done (a pod not yet deleted, or one
    terminating, which holds its node's room until it is gone). Pure."""
    want: dict[str, int] = {}
    have: dict[str, int] = {}
    for pod in state.pods:
        w = resolve_workload(pod, state.controllers)
        if w is None or str(w.ref) not in workloads or w.replicas is None or not occupying(
                pod):
            continue
        want[str(w.ref)] = w.replicas * w.pods_per_replica
        have[str(w.ref)] = have.get(str(w.ref), 0) + 1
    return {w: n for w, n in want.items() if have[w] > n}


async def wait_restored_pods(client: KubeClient, state: ClusterState, want: Mapping[str, int],
                             *, timeout: float) -> bool:
    """Until each workload of `want` has no more pods than it wants; False after `timeout`
    (the plan that follows says what is still in the way)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for ns in sorted({WorkloadRef.parse(w).namespace for w in want}):

        def done(cache: Mapping[str, Obj], ns: str = ns) -> bool:
            have: dict[str, int] = {}
            for pod in cache.values():
                w = resolve_workload(pod, state.controllers)
                if w is not None and str(w.ref) in want and occupying(pod):
                    have[str(w.ref)] = have.get(str(w.ref), 0) + 1
            return all(have.get(w, 0) <= n for w, n in want.items()
                       if WorkloadRef.parse(w).namespace == ns)

        async with Informer(client, api_path("v1", "pods", namespace=ns)) as informer:
            try:
                await informer.wait_for(done, timeout=max(deadline - loop.time(), 0.0),
                                        what="the restore's scale-down")
            except WaitTimeout:
                return False
    return True


def refusal_of(plan: DrainPlan, unfinished: str = "", *, surge_asked: bool = False) -> str:
    """Why `plan` is refused ("" when it is not). A wait for the eviction guard that timed
    out (`unfinished`) comes first: the room the blockers lack is what it was to give
    back, so "add a node" alone would mislead. When --surge was asked for (`surge_asked`)
    and would have grown the pool but for that wait (`surges`), it says so."""
    blocked = "; ".join(f"{b.object}: {b.message}" for b in plan.blockers)
    if not (blocked and unfinished):
        return blocked
    held = ("; no --surge on top of a restore not seen to finish"
            if surges(plan, "", surge_asked=surge_asked) else "")
    return f"{unfinished}{held}; {blocked}"


def surges(plan: DrainPlan, unfinished: str, *, surge_asked: bool) -> bool:
    """Whether --surge (`surge_asked`) grows the pool for `plan`: only when its only
    blockers are "no room", and never after a wait for the eviction guard that timed out
    (`unfinished`): the guard's stand-ins hold that room and its restore gives it back, so
    placeholders would grow the pool on top of a restore still to come (or never coming),
    and a surge that failed would hide why. Refused instead (refusal_of), before the
    cordon. Pure."""
    return surge_asked and only_no_room(plan) and not unfinished


def only_no_room(plan: DrainPlan) -> bool:
    return bool(plan.blockers) and all(b.kind == "no-room" for b in plan.blockers)


def only_waiting_on(plan: DrainPlan, draining: Sequence[str]) -> bool:
    """Refused only for what the drains of `draining` beside it hold and give back when
    they finish: room (their cordoned nodes, their stand-ins) or a workload one of them is
    surging (a workload is surged by one drain at a time)."""
    return bool(plan.blockers) and all(
        b.kind == "no-room" or (b.kind == "surge-owned" and b.node in draining)
        for b in plan.blockers)


@dataclass(frozen=True)
class Preflight:
    plan: DrainPlan  # the last plan made
    refusal: str = ""  # why the drain is refused; "" when it may go ahead
    surge_nodes: tuple[str, ...] = ()  # where --surge's placeholders found room


async def preflight(client: KubeClient, node: str, settings: DrainSettings, *,
                    draining: Sequence[str] = (), dry_run: bool = False,
                    say: Callable[[str], None] = lambda _m: None,
                    on_plan: Callable[[DrainPlan], None] = lambda _p: None) -> Preflight:
    """Plan `node` (and plan again where waiting can help); `on_plan` sees every plan."""

    async def planned() -> tuple[DrainPlan, ClusterState]:
        plan, state = await plan_nodes(client, [node], settings, draining=draining)
        on_plan(plan)
        return plan, state

    plan, state = await planned()
    unfinished = ""  # a wait for the eviction guard that timed out
    if not dry_run and only_no_room(plan) and guard_surges(state):
        # Another drainer's eviction (kubectl drain, an autoscaler) is held by the
        # eviction guard, whose stand-ins hold the room: plan again once it restored.
        surged = guard_surges(state)
        say(f"no room while the eviction guard surges {', '.join(surged)}: "
            "waiting for its restore")
        # One --timeout for the restore and its scale-down together: these waits come
        # before the drain's own deadline, which starts at the cordon.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.timeout
        if not await wait_guard_restored(client, surged, timeout=settings.timeout):
            unfinished = (f"the eviction guard has not restored {', '.join(surged)} "
                          f"within --timeout {settings.timeout:.0f}s")
        plan, state = await planned()
        scaling_down = restoring(state, surged)
        if not unfinished and only_no_room(plan) and scaling_down:
            say(f"waiting for the restore's scale-down of {', '.join(scaling_down)}")
            if not await wait_restored_pods(client, state, scaling_down,
                                            timeout=max(deadline - loop.time(), 0.0)):
                unfinished = (
                    "the eviction guard's restore has not scaled "
                    + ", ".join(f"{w} down to {n} pods" for w, n in scaling_down.items())
                    + f" within --timeout {settings.timeout:.0f}s")
            plan, state = await planned()
    surge_nodes: list[str] = []
    if not dry_run and surges(plan, unfinished, surge_asked=settings.surge):
        say(f"no room for {len(plan.blockers)} replacement(s): surging")
        try:
            surge_nodes = await surge(
                client, plan, state.pods, node, [node, *draining],
                timeout=settings.surge_timeout, priority_class=settings.surge_priority_class)
        except SurgeFailed as exc:
            return Preflight(plan, refusal=f"--surge: {exc}")
        plan, state = await planned()
    return Preflight(plan, refusal=refusal_of(plan, unfinished, surge_asked=settings.surge),
                     surge_nodes=tuple(surge_nodes))
