"""The shared view every replica answers from: informers, and the facts for one eviction.

Each replica keeps its own list+watch caches (drainsafe.kube.watch.Informer) of pods,
Deployments, ReplicaSets, StatefulSets, nodes, namespaces, HPAs, PodDisruptionBudgets and
(when served) LeaderWorkerSets, so any replica can
answer any review without a round trip to the API server. `gather` turns a snapshot into
the plain data the decision takes (drainsafe.controller.decision); it is pure, and so is
`ClusterView.facts`, which only reads.

The caches hold only what the API server sent. What this replica wrote to a pod (a hold's
start, a release) is known from the object the server returned for that write
(`confirm`), and laid over the cache in a snapshot until the watch delivers the same
annotation (`fresher`): the watch sends a pod's changes in order, so a cached pod without
the write is older than the returned one.

Available pods are counted from the pod cache, not from the workload's status, which lags
behind by a controller sync: a pod counts when it is Available (kube.objects.is_available,
podutil.IsPodAvailable) and active (FilterActivePods, kubernetes/kubernetes
pkg/controller/controller_utils.go). Pods this replica has just let go are counted as gone
for LET_GO_SECONDS (until the cache shows them terminating), so two evictions of one
workload in the same instant are not both let through on one count (the
PodDisruptionBudget, checked by the API server after the webhook, is the final guard across
replicas). Mid-rollout is kube.objects.rollout_in_progress (a Deployment),
statefulset_rollout_in_progress or lws_rollout_in_progress, the rules drain uses too.

A pod of a LeaderWorkerSet group (kubernetes-sigs/lws v0.10.0, by lws's labels) resolves
to its LWS, never to the leader or worker StatefulSet lws sizes, and its facts are counted
in groups (drainsafe.controller.groupfacts). The LWS informer runs only when the API
server serves leaderworkersets (the CRD is optional); without it such pods are released
as pods of a StatefulSet another controller owns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from drainsafe import placement
from drainsafe.controller.clock import Clock
from drainsafe.controller.decision import (
    Facts,
    PodFacts,
    SurgeFacts,
    SurgeKind,
    WorkloadFacts,
)
from drainsafe.controller.groupfacts import RecordReader, gather_group
from drainsafe.controller.record import annotations_of, held_since, is_held, opted_in
from drainsafe.drain.ownership import SURGE_KINDS
from drainsafe.kube import Informer, KubeClient, NotFound, api_path
from drainsafe.kube.objects import (
    controller_ref,
    is_active,
    is_available,
    is_ready,
    is_terminating,
    key_of,
    lws_group_of,
    meta,
    rollout_in_progress,
    statefulset_rollout_in_progress,
)
from drainsafe.maintenance.facts import MaintenanceFacts, maintenance_facts

Obj = dict[str, Any]
LET_GO_SECONDS = 10.0


def workload_of(pod: Mapping[str, Any], replicasets: Mapping[str, Obj]
                ) -> tuple[str | None, str | None]:
    """(owner kind, workload name): the pod's LeaderWorkerSet (by lws's labels), its
    StatefulSet, or its Deployment through its ReplicaSet; the name is None for any other
    controller."""
    group = lws_group_of(dict(pod))
    if group is not None:
        return "LeaderWorkerSet", group[0]
    ref = controller_ref(pod)
    if ref is None:
        return None, None
    if ref.get("kind") == "StatefulSet":
        return "StatefulSet", str(ref.get("name"))
    if ref.get("kind") != "ReplicaSet":
        return str(ref.get("kind")), None
    rs = replicasets.get(f"{meta(pod).get('namespace')}/{ref.get('name')}")
    rs_ref = controller_ref(rs) if rs is not None else None
    if rs_ref is None or rs_ref.get("kind") != "Deployment":
        return "ReplicaSet", None
    return "Deployment", str(rs_ref.get("name"))


def workload_pods(kind: SurgeKind, workload: Mapping[str, Any], pods: Iterable[Obj],
                  replicasets: Mapping[str, Obj]) -> list[Obj]:
    """The pods of a Deployment (through its ReplicaSets), a StatefulSet, or a
    LeaderWorkerSet (every pod of its groups)."""
    ns, name = meta(workload).get("namespace"), meta(workload).get("name")
    out = []
    for pod in pods:
        if meta(pod).get("namespace") != ns:
            continue
        owner_kind, owner = workload_of(pod, replicasets)
        if owner_kind == kind and owner == name:
            out.append(pod)
    return out


def recreations_pending(statefulset: Mapping[str, Any], members: Iterable[Obj],
                        replicas: int) -> list[str]:
    """The ordinals below the recorded scale not yet back Ready and active, by pod name.
    The restore of a StatefulSet's surge waits for none: it removes the highest ordinal
    (the stand-in), so an evicted ordinal must first be recreated under its name and Ready
    (kubernetes v1.33.0 pkg/controller/statefulset/stateful_set_control.go processReplica
    recreates it; processCondemned removes from the highest ordinal down)."""
    name = str(meta(statefulset).get("name"))
    ready = {str(meta(p).get("name")) for p in members if is_active(p) and is_ready(p)}
    return [f"{name}-{i}" for i in range(replicas) if f"{name}-{i}" not in ready]


def owned_replicasets(deployment: Mapping[str, Any], replicasets: Iterable[Obj]
                      ) -> list[Obj]:
    """The Deployment's ReplicaSets: those whose controller reference is its UID."""
    uid = meta(deployment).get("uid")
    return [rs for rs in replicasets
            if (ref := controller_ref(rs)) is not None and ref.get("uid") == uid]


def room_for_stand_in(pod: Mapping[str, Any], nodes: Iterable[Obj], pods: Iterable[Obj]
                      ) -> bool:
    """Does a copy of `pod` fit on a node other than its own (drainsafe.placement)?"""
    own = (pod.get("spec") or {}).get("nodeName")
    candidates = [n for n in nodes if meta(n).get("name") != own]
    bound: dict[str, list[Obj]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node:
            bound.setdefault(str(node), []).append(p)
    stand_in = {"metadata": {k: v for k, v in meta(pod).items()
                             if k in ("namespace", "labels", "ownerReferences")},
                "spec": {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}}
    best, _ = placement.choose(candidates, stand_in, bound)
    return best is not None


def held_pods(members: Iterable[Obj]) -> set[str]:
    """Keys of the active pods that asked for a stand-in and were not released."""
    return {key_of(p) for p in members if is_held(p)}


def gather(pod: Obj, *, namespace: Obj | None, deployments: Mapping[str, Obj],
           statefulsets: Mapping[str, Obj], replicasets: Mapping[str, Obj],
           pods: Mapping[str, Obj], nodes: Mapping[str, Obj], record_of: RecordReader,
           let_go: Iterable[str] = (), now: float, dry_run: bool = False,
           can_surge: bool = True, leaderworkersets: Mapping[str, Obj] | None = None,
           budgets: Iterable[Obj] = ()) -> Facts:
    """The decision's facts for an eviction of `pod` at wall time `now`. Pure.
    `leaderworkersets` is None when the API server does not serve them."""
    m = meta(pod)
    kind, workload_name = workload_of(pod, replicasets)
    if kind == "LeaderWorkerSet":
        lws = (leaderworkersets or {}).get(f"{m.get('namespace')}/{workload_name}")
        if lws is not None:
            return gather_group(pod, lws, namespace=namespace, pods=pods, nodes=nodes,
                                record_of=record_of, let_go=let_go, now=now,
                                dry_run=dry_run, can_surge=can_surge, budgets=budgets)
        ref = controller_ref(pod)  # an LWS the guard cannot see: its StatefulSet's rule
        kind = str(ref.get("kind")) if ref is not None else None
        workload_name = str(ref.get("name")) if ref is not None else None
    surge_kind: SurgeKind = "StatefulSet" if kind == "StatefulSet" else "Deployment"
    objects = statefulsets if surge_kind == "StatefulSet" else deployments
    obj = objects.get(f"{m.get('namespace')}/{workload_name}") if workload_name else None
    manager = controller_ref(obj) if obj is not None and surge_kind == "StatefulSet" else None
    status = pod.get("status") or {}
    pfacts = PodFacts(
        namespace=str(m.get("namespace")), name=str(m.get("name")),
        uid=str(m.get("uid") or ""), opted_in=opted_in(pod, namespace),
        phase=str(status.get("phase") or "Pending"),
        terminating=is_terminating(pod), ready=is_ready(pod), owner_kind=kind,
        managed_by=None if manager is None else f"{manager.get('kind')}/{manager.get('name')}")
    since = held_since(pod)
    held_for = None if since is None else max(0.0, now - since)
    if obj is None or manager is not None:
        return Facts(pfacts, None, None, room=False, held_for=held_for, dry_run=dry_run,
                     can_surge=can_surge)
    members = workload_pods(surge_kind, obj, pods.values(), replicasets)
    gone = set(let_go)
    min_ready = int((obj.get("spec") or {}).get("minReadySeconds") or 0)
    available = sum(1 for p in members if is_active(p) and key_of(p) not in gone
                    and is_available(p, min_ready, now))
    if surge_kind == "StatefulSet":
        rollout = statefulset_rollout_in_progress(obj)
    else:
        rollout = rollout_in_progress(obj, owned_replicasets(obj, replicasets.values()))
    workload = WorkloadFacts(
        name=str(workload_name),
        replicas=int((obj.get("spec") or {}).get("replicas", 1)),
        available=available, mid_rollout=rollout is not None, kind=surge_kind)
    record = record_of(obj)
    surge = None
    if record is not None:
        active = {key_of(p) for p in members if is_active(p)}
        surge = SurgeFacts(record.replicas,
                           frozenset((set(record.pods) & active) | held_pods(members)),
                           owned=record.guard)
    room = room_for_stand_in(pod, nodes.values(), pods.values()) if surge is None else True
    return Facts(pfacts, workload, surge, room=room, held_for=held_for, dry_run=dry_run,
                 can_surge=can_surge)


@dataclass(frozen=True)
class Confirmed:
    """A pod as the server returned it after this replica wrote `written` on it."""

    pod: Obj
    written: Mapping[str, str]


def fresher(cached: Obj | None, confirmed: Confirmed) -> Obj | None:
    """The newer of the cached pod and the confirmed write, or None when the confirmed
    one no longer applies (the pod is gone or replaced, or the cache has caught up)."""
    if cached is None or meta(cached).get("uid") != meta(confirmed.pod).get("uid"):
        return None
    notes = annotations_of(cached)
    if all(notes.get(k) == v for k, v in confirmed.written.items()):
        return None
    return confirmed.pod


class ClusterView:
    """One replica's caches, its confirmed writes to pods, and the pods it just let go."""

    def __init__(self, client: KubeClient, clock: Clock) -> None:
        self.client, self.clock = client, clock
        self.pod_informer = Informer(client, "/api/v1/pods")
        self.deployments = Informer(client, "/apis/apps/v1/deployments")
        self.replicasets = Informer(client, "/apis/apps/v1/replicasets")
        self.statefulsets = Informer(client, "/apis/apps/v1/statefulsets")
        self.nodes = Informer(client, "/api/v1/nodes")
        self.namespaces = Informer(client, "/api/v1/namespaces")
        self.autoscalers = Informer(client, "/apis/autoscaling/v2/horizontalpodautoscalers")
        self.budgets = Informer(client, "/apis/policy/v1/poddisruptionbudgets")
        self._informers = [self.pod_informer, self.deployments, self.replicasets,
                           self.statefulsets, self.nodes, self.namespaces, self.autoscalers,
                           self.budgets]
        # Started only when the API server serves leaderworkersets (the CRD is optional).
        self.leaderworkersets: Informer | None = None
        self._confirmed: dict[str, Confirmed] = {}
        self._let_go: dict[str, float] = {}  # pod key -> monotonic time it was let go

    async def start(self) -> None:
        lws = SURGE_KINDS["LeaderWorkerSet"]
        path = api_path(lws.api_version, lws.plural)
        try:
            await self.client.list(path, {"limit": "1"})
        except NotFound:
            pass  # no LeaderWorkerSet CRD: its pods resolve to their StatefulSets
        else:
            self.leaderworkersets = Informer(self.client, path)
            self._informers.append(self.leaderworkersets)
        await asyncio.gather(*(i.start() for i in self._informers))

    async def stop(self) -> None:
        await asyncio.gather(*(i.stop() for i in self._informers))

    def lws_cache(self) -> Mapping[str, Obj]:
        return self.leaderworkersets.cache if self.leaderworkersets is not None else {}

    # ---- reading --------------------------------------------------------------------

    def pods(self) -> Mapping[str, Obj]:
        """The pod cache with this replica's confirmed writes laid over it."""
        cache = self.pod_informer.cache
        if not self._confirmed:
            return cache
        snapshot = dict(cache)
        for key, confirmed in self._confirmed.items():
            newer = fresher(cache.get(key), confirmed)
            if newer is not None:
                snapshot[key] = newer
        return snapshot

    async def pod(self, namespace: str, name: str) -> Obj | None:
        key = f"{namespace}/{name}"
        cached = self.pod_informer.get(key)
        if cached is not None:
            confirmed = self._confirmed.get(key)
            newer = fresher(cached, confirmed) if confirmed is not None else None
            return newer if newer is not None else cached
        try:  # a pod newer than the cache
            pod: Obj = await self.client.get(api_path("v1", "pods", namespace=namespace,
                                                      name=name))
            return pod
        except NotFound:
            return None

    def maintenance_facts(self, maintenances: Iterable[Obj]) -> MaintenanceFacts:
        """What maintenance left on the cluster (maintenance.facts), from these caches and
        the NodeMaintenances given. Reads only."""
        return maintenance_facts(
            nodes=self.nodes.cache.values(), pods=self.pod_informer.cache.values(),
            workloads={"Deployment": self.deployments.cache.values(),
                       "StatefulSet": self.statefulsets.cache.values(),
                       "LeaderWorkerSet": self.lws_cache().values()},
            maintenances=maintenances)

    def gone(self) -> frozenset[str]:
        """Pods this replica let go less than LET_GO_SECONDS ago."""
        now = self.clock.monotonic()
        return frozenset(k for k, at in self._let_go.items() if now - at < LET_GO_SECONDS)

    def facts(self, pod: Obj, *, dry_run: bool, record_of: RecordReader, can_surge: bool
              ) -> Facts:
        """The decision's facts for an eviction of `pod`, from this view. Reads only."""
        ns = str(meta(pod).get("namespace"))
        return gather(pod, namespace=self.namespaces.get(ns),
                      deployments=self.deployments.cache,
                      statefulsets=self.statefulsets.cache, replicasets=self.replicasets.cache,
                      pods=self.pods(), nodes=self.nodes.cache, record_of=record_of,
                      let_go=self.gone(), now=self.clock.wall(), dry_run=dry_run,
                      can_surge=can_surge,
                      leaderworkersets=None if self.leaderworkersets is None
                      else self.leaderworkersets.cache, budgets=self.budgets.cache.values())

    # ---- what this replica did --------------------------------------------------------

    def confirm(self, pod: Obj, written: Mapping[str, str]) -> None:
        """Remember the pod the server returned for a write, until the cache shows it."""
        cache = self.pod_informer.cache
        self._confirmed = {k: c for k, c in self._confirmed.items()
                           if fresher(cache.get(k), c) is not None}
        self._confirmed[key_of(pod)] = Confirmed(pod, dict(written))

    def let_go(self, pod: Obj) -> None:
        """Count `pod` as gone for LET_GO_SECONDS: this replica allowed its eviction."""
        now = self.clock.monotonic()
        self._let_go = {k: at for k, at in self._let_go.items()
                        if now - at < LET_GO_SECONDS}
        self._let_go[key_of(pod)] = now
