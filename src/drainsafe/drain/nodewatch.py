"""What a drain watches, and the typed waits on it.

One object owns the informers a node drain needs (drainsafe.kube.watch.Informer, list+watch
with relist and bookmarks): the node's pods, the pods, EndpointSlices and
PodDisruptionBudgets of the affected namespaces. The drainer asks it questions
(`gone`, `endpoints_clear`, `serving`, `budget_allows`) and waits on them with a bound; it
writes no poll loops of its own. `confirm_done` is the drain's definition of done: only
DaemonSet and mirror pods left (the pods kubectl's filters leave: drain.filters), the scale
of every Deployment the drain scaled carried out by its controllers
(kube.objects.scale_not_carried_out), every affected workload at its desired Ready count
with no Pending pod, and no EndpointSlice
listing a pod of the drain or one that is gone. Both clocks (wall, for Available since a
Ready transition; monotonic, for bounds) are injected.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from drainsafe.drain.filters import DrainOptions, classify
from drainsafe.drain.ownership import GUARDED_KINDS, guard_surged
from drainsafe.drain.workloads import WorkloadSelector
from drainsafe.kube import Informer, KubeClient, WaitTimeout, api_path
from drainsafe.kube.objects import (
    WorkloadRef,
    endpoint_uid,
    is_active,
    is_available,
    is_terminal,
    is_terminating,
    key_of,
    lws_ready_groups,
    node_of,
    scale_not_carried_out,
    slice_lists,
    uid_of,
    unschedulable_reason,
)
from drainsafe.pdb import status_disruptions

Obj = dict[str, Any]
Clock = Callable[[], float]
T = TypeVar("T")
NO_LIMIT = 1 << 30


class Stopped(RuntimeError):
    """The drain was stopped (another queue failed) while waiting."""


class Unschedulable(RuntimeError):
    """A new pod of the workload stayed Unschedulable for too long."""


class PendingPods(RuntimeError):
    """A workload of the drain still has Pending pods when the drain should be done."""


class NodeWatch:
    def __init__(self, client: KubeClient, node: str, namespaces: Sequence[str], *,
                 clock: Clock = time.time, monotonic: Clock = time.monotonic,
                 on_pods: Callable[[str], None] | None = None) -> None:
        self.node = node
        self.clock = clock
        self.monotonic = monotonic
        self.node_pods = Informer(client, api_path("v1", "pods"),
                                  field_selector=f"spec.nodeName={node}")
        # `on_pods(namespace)` after each change of a namespace's pods (its cache updated)
        self.pods = {ns: Informer(client, api_path("v1", "pods", namespace=ns),
                                  on_event=None if on_pods is None else
                                  (lambda _kind, _obj, ns=ns: on_pods(ns)))  # type: ignore[misc]
                     for ns in namespaces}
        self.slices = {ns: Informer(client, api_path("discovery.k8s.io/v1", "endpointslices",
                                                     namespace=ns)) for ns in namespaces}
        self.budgets = {ns: Informer(client, api_path("policy/v1", "poddisruptionbudgets",
                                                      namespace=ns)) for ns in namespaces}
        # The kinds the eviction guard surges, for a surge of the guard's (its record):
        # the built-in ones watched from the start; a custom resource's (LeaderWorkerSet,
        # whose CRD a cluster may not serve) only while a drain waits on one.
        self._client = client
        self.workloads = {(kind, ns): Informer(client, api_path(surge.api_version, surge.plural,
                                                                namespace=ns))
                          for kind, surge in GUARDED_KINDS.items() for ns in namespaces
                          if surge.api_version == "apps/v1"}

    def _all(self) -> list[Informer]:
        return [self.node_pods, *self.pods.values(), *self.slices.values(),
                *self.budgets.values(), *self.workloads.values()]

    async def start(self) -> None:
        await asyncio.gather(*(i.start() for i in self._all()))

    async def stop(self) -> None:
        for inf in self._all():
            await inf.stop()

    # -- questions ---------------------------------------------------------------------------

    def pod(self, namespace: str, key: str) -> Obj | None:
        return self.pods[namespace].cache.get(key)

    def terminating(self, namespace: str, key: str, uid: str) -> bool:
        """Only positive evidence: this pod (same UID) has a deletionTimestamp."""
        obj = self.pod(namespace, key)
        return obj is not None and uid_of(obj) == uid and is_terminating(obj)

    def gone(self, namespace: str, key: str, uid: str) -> bool:
        obj = self.pod(namespace, key)
        return obj is None or uid_of(obj) != uid

    def endpoints_clear(self, namespace: str, uid: str) -> bool:
        return not any(slice_lists(s, uid) for s in self.slices[namespace].cache.values())

    def workload_pods(self, w: WorkloadSelector) -> list[Obj]:
        return [p for p in self.pods[w.namespace].cache.values()
                if w.selector.matches((p.get("metadata") or {}).get("labels"))]

    def ready_groups(self, w: WorkloadSelector, *, excluding: Sequence[str] = ()
                     ) -> dict[int, list[Obj]]:
        """A LeaderWorkerSet's groups whose pods are all Ready and none on the `excluding`
        nodes, by group index (kube.objects.lws_ready_groups)."""
        return lws_ready_groups([p for p in self.workload_pods(w)
                                 if node_of(p) not in excluding], w.group_size or 1)

    def capacity(self, w: WorkloadSelector, *, excluding: Sequence[str] = ()) -> int:
        """What the workload serves with: Available pods, or for a LeaderWorkerSet whole
        Ready groups (the unit its replicas count)."""
        if w.group_size is not None:
            return len(self.ready_groups(w, excluding=excluding))
        return len(self.serving(w, excluding=excluding))

    def serving(self, w: WorkloadSelector, *, excluding: Sequence[str] = ()) -> list[Obj]:
        """Active pods of the workload that are Available (Ready for minReadySeconds),
        not on the `excluding` nodes; for a LeaderWorkerSet, the pods of its whole Ready
        groups."""
        if w.group_size is not None:
            return [p for ps in self.ready_groups(w, excluding=excluding).values()
                    for p in ps]
        now = self.clock()
        return [p for p in self.workload_pods(w)
                if is_active(p) and node_of(p) not in excluding
                and is_available(p, w.min_ready_seconds, now)]

    def endpoint_ready(self, namespace: str, uid: str) -> bool:
        """Some EndpointSlice lists the pod as ready (a nil `ready` counts as ready:
        discovery.k8s.io/v1 EndpointConditions)."""
        for s in self.slices[namespace].cache.values():
            for e in s.get("endpoints") or []:
                if endpoint_uid(e) == uid and (e.get("conditions") or {}).get(
                        "ready") is not False:
                    return True
        return False

    def listed(self, namespace: str, uid: str) -> bool:
        return any(slice_lists(s, uid) for s in self.slices[namespace].cache.values())

    async def wait_endpoints_ready(self, namespace: str, uids: Sequence[str], *,
                                   timeout: float, stop: asyncio.Event | None = None) -> None:
        await self.until([self.slices[namespace]],
                         lambda: all(self.endpoint_ready(namespace, u) for u in uids),
                         timeout=timeout, what="the new pods to be ready in the EndpointSlices",
                         recheck=1.0, stop=stop)

    def budget(self, namespace: str, key: str) -> Obj | None:
        return self.budgets[namespace].cache.get(key)

    def budget_allows(self, namespace: str, key: str) -> int:
        """status.disruptionsAllowed once the disruption controller has observed the current
        spec (observedGeneration), else 0: a stale status would only earn a 429."""
        pdb = self.budget(namespace, key)
        if pdb is None:
            return NO_LIMIT  # deleted meanwhile: nothing to wait for (the API decides)
        return status_disruptions(pdb)

    def guard_surged(self, ref: WorkloadRef) -> bool:
        """The workload carries a surge record of the eviction guard's."""
        informer = self.workloads.get((ref.kind, ref.namespace))
        if informer is None:
            return False  # not watched here (a custom kind: only while waiting on it)
        return guard_surged(informer.cache.get(f"{ref.namespace}/{ref.name}"))

    def slices_settled(self, namespace: str, drained: set[str]) -> bool:
        """No slice lists a pod of this drain, nor a pod that no longer exists."""
        present = {uid_of(p) for p in self.pods[namespace].cache.values()}
        for s in self.slices[namespace].cache.values():
            for e in s.get("endpoints") or []:
                uid = endpoint_uid(e)
                if uid is not None and (uid in drained or uid not in present):
                    return False
        return True

    # -- waits -------------------------------------------------------------------------------

    async def until(self, informers: Sequence[Informer], predicate: Callable[[], T | None], *,
                    timeout: float, what: str, recheck: float = 1.0,
                    stop: asyncio.Event | None = None) -> T:
        """The first truthy predicate() value, re-checked on every change of any of
        `informers` and at least every `recheck` seconds (a predicate may read several
        caches, or a clock)."""
        deadline = self.monotonic() + timeout
        first = informers[0]
        while True:
            if stop is not None and stop.is_set():
                raise Stopped(f"stopped while waiting for {what}")
            remaining = deadline - self.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
            try:
                value = await first.wait_for(lambda _c: predicate(), what=what,
                                             timeout=min(recheck, remaining))
            except WaitTimeout:
                continue
            if value is not None:
                return value

    async def wait_gone(self, namespace: str, key: str, uid: str, *, timeout: float) -> None:
        await self.until([self.pods[namespace]], lambda: self.gone(namespace, key, uid),
                         timeout=timeout, what=f"{key} to terminate", recheck=5.0)

    async def wait_endpoints_clear(self, namespace: str, key: str, uid: str, *,
                                   timeout: float) -> None:
        await self.until([self.slices[namespace]], lambda: self.endpoints_clear(namespace, uid),
                         timeout=timeout, what=f"{key} to leave every EndpointSlice",
                         recheck=5.0)

    async def wait_serving(self, w: WorkloadSelector, want: int, *, timeout: float,
                           excluding: Sequence[str] = (), unschedulable_after: float,
                           stop: asyncio.Event | None = None) -> list[Obj]:
        """Until `want` pods of the workload are Available off the `excluding` nodes. A pod
        of the workload Unschedulable for `unschedulable_after` seconds raises Unschedulable."""
        pending_since: dict[str, float] = {}

        def check() -> list[Obj] | None:
            for p in self.workload_pods(w):
                reason = unschedulable_reason(p) if is_active(p) else None
                k = key_of(p)
                if reason:
                    since = pending_since.setdefault(k, self.monotonic())
                    if self.monotonic() - since > unschedulable_after:
                        raise Unschedulable(f"{k} cannot be scheduled: {reason}")
                else:
                    pending_since.pop(k, None)
            ok = self.serving(w, excluding=excluding)
            return ok if self.capacity(w, excluding=excluding) >= want else None

        unit = "Available pods" if w.group_size is None else "whole Ready groups"
        return await self.until([self.pods[w.namespace]], check, timeout=timeout,
                                what=f"{w.key} to have {want} {unit}", recheck=0.5,
                                stop=stop)

    async def wait_groups_recreated(self, w: WorkloadSelector, old: Mapping[str, str],
                                    groups: Sequence[int], *, timeout: float,
                                    excluding: Sequence[str] = (), unschedulable_after: float,
                                    stop: asyncio.Event | None = None) -> list[Obj]:
        """Until each pod of `old` ("ns/name" -> the old UID) is there again under its name
        with another UID, and each of `groups` is whole Ready off the `excluding` nodes:
        a LeaderWorkerSet group recreated (kubernetes-sigs/lws v0.10.0: the leader
        StatefulSet recreates the leader under its name, the leader's new worker
        StatefulSet its workers). Returns the recreated groups' pods. One of the
        workload's pods Unschedulable for `unschedulable_after` raises Unschedulable."""
        pending_since: dict[str, float] = {}

        def check() -> list[Obj] | None:
            for p in self.workload_pods(w):
                reason = unschedulable_reason(p) if is_active(p) else None
                k = key_of(p)
                if reason:
                    since = pending_since.setdefault(k, self.monotonic())
                    if self.monotonic() - since > unschedulable_after:
                        raise Unschedulable(f"{k} cannot be scheduled: {reason}")
                else:
                    pending_since.pop(k, None)
            for key, uid in old.items():
                now = self.pod(w.namespace, key)
                if now is None or uid_of(now) == uid or not is_active(now):
                    return None
            ready = self.ready_groups(w, excluding=excluding)
            if not all(g in ready for g in groups):
                return None
            return [p for g in groups for p in ready[g]]

        return await self.until([self.pods[w.namespace]], check, timeout=timeout,
                                what=f"{w.key} groups {', '.join(map(str, groups))} to be "
                                "recreated whole and Ready elsewhere", recheck=0.5, stop=stop)

    async def wait_recreated(self, namespace: str, old: Mapping[str, str], *,
                             min_ready_seconds: float, timeout: float,
                             excluding: Sequence[str] = (), unschedulable_after: float,
                             stop: asyncio.Event | None = None) -> list[Obj]:
        """Until each pod of `old` ("ns/name" -> the old UID) is there again under its
        name, with another UID, active, Available and off the `excluding` nodes: a
        StatefulSet's recreation (pkg/controller/statefulset/stateful_set_control.go
        processReplica creates a missing ordinal under its name). One Unschedulable for
        `unschedulable_after` seconds raises Unschedulable."""
        pending_since: dict[str, float] = {}

        def check() -> list[Obj] | None:
            found = []
            now = self.clock()
            for key, uid in old.items():
                p = self.pod(namespace, key)
                if p is None or uid_of(p) == uid or not is_active(p):
                    return None
                reason = unschedulable_reason(p)
                if reason:
                    since = pending_since.setdefault(key, self.monotonic())
                    if self.monotonic() - since > unschedulable_after:
                        raise Unschedulable(f"{key} cannot be scheduled: {reason}")
                    return None
                pending_since.pop(key, None)
                if node_of(p) in excluding or not is_available(p, min_ready_seconds, now):
                    return None
                found.append(p)
            return found

        return await self.until([self.pods[namespace]], check, timeout=timeout,
                                what=f"{', '.join(sorted(old))} to be recreated and Available "
                                "elsewhere", recheck=0.5, stop=stop)

    async def wait_no_guard_surge(self, ref: WorkloadRef, *, timeout: float,
                                  stop: asyncio.Event | None = None) -> None:
        key = (ref.kind, ref.namespace)
        started = key not in self.workloads
        if started:
            surge = GUARDED_KINDS[ref.kind]
            self.workloads[key] = await Informer(self._client, api_path(
                surge.api_version, surge.plural, namespace=ref.namespace)).start()
        try:
            await self.until([self.workloads[key]], lambda: not self.guard_surged(ref),
                             timeout=timeout, what=f"the eviction guard to restore {ref}",
                             stop=stop)
        finally:
            if started:
                await self.workloads.pop(key).stop()

    async def wait_budget(self, namespace: str, keys: Sequence[str], *, timeout: float,
                          stop: asyncio.Event | None = None, at_least: int = 1) -> int:
        """Until every budget in `keys` allows `at_least` disruptions (a LeaderWorkerSet
        group: its pods); returns the smallest allowance."""
        if not keys:
            return NO_LIMIT

        def allowed() -> int | None:
            least = min(self.budget_allows(namespace, k) for k in keys)
            return least if least >= max(at_least, 1) else None

        return await self.until([self.budgets[namespace]], allowed, timeout=timeout,
                                what=f"PodDisruptionBudget {', '.join(keys)} to allow an "
                                "eviction", recheck=1.0, stop=stop)

    def cache_of(self, namespace: str) -> Mapping[str, Obj]:
        return self.pods[namespace].cache

    # -- done --------------------------------------------------------------------------------

    def scale_pending(self, ref: WorkloadRef) -> str | None:
        """Why the Deployment's controllers have not yet carried out its scale
        (kube.objects.scale_not_carried_out), or None; None too when it is gone."""
        informer = self.workloads.get((ref.kind, ref.namespace))
        obj = None if informer is None else informer.cache.get(f"{ref.namespace}/{ref.name}")
        return None if obj is None else scale_not_carried_out(obj)

    async def wait_scale_carried_out(self, ref: WorkloadRef, *, timeout: float,
                                     say: Callable[[str], None] = lambda _m: None) -> None:
        why = self.scale_pending(ref)
        if why is None:
            return
        say(f"{ref}: waiting for its controllers to carry out its scale ({why})")
        await self.until([self.workloads[(ref.kind, ref.namespace)]],
                         lambda: self.scale_pending(ref) is None,
                         timeout=timeout, what=f"the controllers to carry out the scale of "
                         f"{ref} ({why})")

    async def confirm_done(self, *, options: DrainOptions,
                           selectors: Sequence[WorkloadSelector], drained: set[str],
                           remaining: Callable[[], float], unschedulable_after: float,
                           scaled: Collection[str] = (),
                           say: Callable[[str], None] = lambda _m: None) -> dict[str, bool]:
        """Wait, bounded, until the node is drained by the definition in the module
        docstring; returns the checks that held. `drained` are the UIDs of the pods the
        drain moved or waited for; `scaled` the workloads ("Kind/ns/name") whose scale it
        changed; `remaining` is the time left of the drain's bound."""
        checks: dict[str, bool] = {}

        def only_daemons() -> bool:
            return all(classify(p, options).action == "skip" or is_terminal(p)
                       for p in self.node_pods.cache.values())

        await self.until([self.node_pods], only_daemons, timeout=min(60.0, remaining()),
                         what=f"only DaemonSet/mirror pods on {self.node}")
        checks["only DaemonSet/mirror pods left"] = True
        # The scale the drain wrote last (the restore) is carried out: until the deployment
        # controller has seen it, the ReplicaSet still replaces each evicted pod, and such
        # a surplus pod may not even exist yet when the checks below look (drain.scale).
        # Deployments only: a StatefulSet's status.replicas counts its terminating
        # stand-ins too, and a LeaderWorkerSet's status has no observedGeneration.
        surged = [ref for ref in map(WorkloadRef.parse, scaled) if ref.kind == "Deployment"
                  and (ref.kind, ref.namespace) in self.workloads]
        for ref in surged:
            await self.wait_scale_carried_out(ref, timeout=remaining(), say=say)
        if surged:
            checks["surged workloads' scale carried out"] = True
        for selector in selectors:
            await self.wait_serving(selector, selector.replicas, timeout=remaining(),
                                    unschedulable_after=unschedulable_after)

            def no_pending(selector: WorkloadSelector = selector) -> bool:
                # A replacement the ReplicaSet made for an evicted pod before the scale
                # came back is removed by it (drain.scale): wait for that, bounded.
                return not [key_of(p) for p in self.workload_pods(selector)
                            if is_active(p) and (p.get("status") or {}).get("phase") == "Pending"]

            try:
                await self.until([self.pods[selector.namespace]], no_pending,
                                 timeout=min(30.0, remaining()),
                                 what=f"{selector.key} to have no Pending pods")
            except WaitTimeout as exc:
                raise PendingPods(f"{selector.key} has Pending pods after the drain") from exc
        checks["workloads at desired Ready count"] = True
        checks["no Pending pods of affected workloads"] = True
        for ns in self.slices:
            await self.until([self.slices[ns], self.pods[ns]],
                             lambda ns=ns: self.slices_settled(ns, drained),  # type: ignore[misc]
                             timeout=min(60.0, remaining()),
                             what=f"EndpointSlices in {ns} to settle")
        checks["endpoints settled"] = True
        return checks
