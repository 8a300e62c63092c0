"""The guard's facts for an eviction of a LeaderWorkerSet group's pod, counted in groups.

After kubernetes-sigs/lws v0.10.0. A group pod (lws's name and group-index labels,
api/leaderworkerset/v1/leaderworkerset_types.go) resolves to its LWS, never to the leader
or worker StatefulSet whose replicas lws sets (pkg/controllers/leaderworkerset_controller.go,
pod_controller.go). Its unit is its group (drain.groups.group_unit), capacity the LWS's
whole Ready groups (a group is Ready only when all its pods are: updateConditions;
kube.objects.lws_ready_groups), a group of a pod this replica just let go counting as gone
(lws takes the whole group down under its default restart policy), the desired scale the
LWS's replicas (in groups), what the budgets selecting the pod allow now (the decision
reads it in whole groups), and the room that for a whole stand-in group. Pure functions
of plain objects (drainsafe.controller.view gathers them from its caches).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from drainsafe import placement
from drainsafe.controller.decision import Facts, PodFacts, SurgeFacts, WorkloadFacts
from drainsafe.controller.record import held_since, is_held, opted_in
from drainsafe.drain.groups import group_unit
from drainsafe.drain.ownership import SurgeRecord
from drainsafe.kube.objects import (
    is_active,
    is_ready,
    is_terminating,
    key_of,
    lws_group_of,
    lws_ready_groups,
    lws_rollout_in_progress,
    lws_size,
    meta,
    uid_of,
)
from drainsafe.labels import from_label_selector
from drainsafe.pdb import status_disruptions

Obj = dict[str, Any]
RecordReader = Callable[[Mapping[str, Any]], SurgeRecord | None]


def group_members(lws: Mapping[str, Any], pods: Iterable[Obj]) -> list[Obj]:
    """Every pod of the LWS's groups (by lws's labels)."""
    ns, name = meta(lws).get("namespace"), meta(lws).get("name")
    return [p for p in pods if meta(p).get("namespace") == ns
            and (g := lws_group_of(p)) is not None and g[0] == name]


def held_groups(members: Iterable[Obj]) -> set[int]:
    """A LeaderWorkerSet's group indices with a held pod: the groups wanting a stand-in."""
    return {g[1] for p in members if is_held(p) and (g := lws_group_of(p)) is not None}


def room_for_group(pod: Mapping[str, Any], size: int, nodes: Iterable[Obj],
                   pods: Iterable[Obj]) -> bool:
    """Does a whole stand-in group fit on nodes other than the pod's: `size` copies of
    the pod placed one after another, each taking its node's room (drainsafe.placement)?
    A group's pods may differ (leader and worker templates); the evicted pod's requests
    stand for each, as the lab's and most serving groups' pods ask the same GPUs."""
    bound = list(pods)
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}
    own = (pod.get("spec") or {}).get("nodeName")
    candidates = [n for n in nodes if meta(n).get("name") != own]
    by_node: dict[str, list[Obj]] = {}
    for p in bound:
        node = (p.get("spec") or {}).get("nodeName")
        if node:
            by_node.setdefault(str(node), []).append(p)
    stand_in = {"metadata": {k: v for k, v in meta(pod).items()
                             if k in ("namespace", "labels", "ownerReferences")}, "spec": spec}
    for _ in range(size):
        best, _ = placement.choose(candidates, stand_in, by_node)
        if best is None:
            return False
        chosen = best
        by_node.setdefault(chosen, []).append({**stand_in, "spec": {**spec,
                                                                   "nodeName": chosen}})
    return True


def budget_allows(pod: Mapping[str, Any], budgets: Iterable[Obj]) -> int | None:
    """The fewest disruptions the PDBs selecting the pod allow now (their status, read
    by drainsafe.pdb.status_disruptions), or None when no budget selects it."""
    labels = meta(pod).get("labels") or {}
    allowed = [status_disruptions(b) for b in budgets
               if meta(b).get("namespace") == meta(pod).get("namespace")
               and (sel := (b.get("spec") or {}).get("selector")) is not None
               and from_label_selector(sel).matches(labels)]
    return min(allowed) if allowed else None


def gather_group(pod: Obj, lws: Obj, *, namespace: Obj | None, pods: Mapping[str, Obj],
                 nodes: Mapping[str, Obj], record_of: RecordReader, let_go: Iterable[str],
                 now: float, dry_run: bool, can_surge: bool, budgets: Iterable[Obj] = ()
                 ) -> Facts:
    """The facts for an eviction of a LeaderWorkerSet group's pod, counted in groups
    (module docstring). Pure."""
    m = meta(pod)
    ns, name = str(m.get("namespace")), str(meta(lws).get("name"))
    group = lws_group_of(pod)
    assert group is not None  # resolved to the LWS by these labels
    unit = group_unit(ns, name, group[1])
    members = group_members(lws, pods.values())
    gone = set(let_go)
    gone_groups = {g[1] for p in members if key_of(p) in gone
                   and (g := lws_group_of(p)) is not None}
    size = lws_size(lws)
    ready = {g for g in lws_ready_groups(members, size) if g not in gone_groups}
    status = pod.get("status") or {}
    pfacts = PodFacts(
        namespace=ns, name=str(m.get("name")), uid=uid_of(pod),
        opted_in=opted_in(pod, namespace), phase=str(status.get("phase") or "Pending"),
        terminating=is_terminating(pod),
        # A pod of a group not whole Ready serves nothing as a group.
        ready=is_ready(pod) and group[1] in ready, owner_kind="LeaderWorkerSet", unit=unit)
    since = held_since(pod)
    held_for = None if since is None else max(0.0, now - since)
    workload = WorkloadFacts(
        name=name, replicas=int((lws.get("spec") or {}).get("replicas", 1)),
        available=len(ready), mid_rollout=lws_rollout_in_progress(lws) is not None,
        kind="LeaderWorkerSet", group_size=size, budget_allows=budget_allows(pod, budgets))
    record = record_of(lws)
    surge = None
    if record is not None:
        units = {group_unit(ns, name, g[1]) for p in members
                 if is_active(p) and record.pods.get(key_of(p)) == uid_of(p)
                 and (g := lws_group_of(p)) is not None}
        units |= {group_unit(ns, name, g) for g in held_groups(members)}
        surge = SurgeFacts(record.replicas, frozenset(units), owned=record.guard)
    room = True if surge is not None else room_for_group(pod, size, nodes.values(),
                                                         pods.values())
    return Facts(pfacts, workload, surge, room=room, held_for=held_for, dry_run=dry_run,
                 can_surge=can_surge)
