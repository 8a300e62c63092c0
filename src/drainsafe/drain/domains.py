"""Room for a LeaderWorkerSet with exclusive placement: whole free topology domains. Pure.

After kubernetes-sigs/lws v0.10.0: the annotation `leaderworkerset.sigs.k8s.io/exclusive-
topology: <topologyKey>` gives each group's leader a required podAffinity to its own
group-key and a required podAntiAffinity to any other group-key over that key
(pkg/webhooks/pod_webhook.go SetExclusiveAffinities), so a domain (the nodes sharing one
value of the label) holds pods of one group of any LWS; the worker StatefulSet is made
once the leader is scheduled and its workers are pinned to the leader's domain by a
nodeSelector (pkg/controllers/pod_controller.go setNodeSelectorForWorkerPods). The group
key is the SHA-1 of `<namespace>/<leader pod name>`, so a group recreated under its index
keeps its key and its own old pods never keep it out.

So a group's room is a whole domain: one holding no other group's pod (a terminating one
still counts, as the scheduler counts it until it is gone), whose schedulable, Ready nodes
not being drained have room for all `size` pods (drainsafe.placement's fit, first fit,
each placed pod occupying its node). And the scheduler places the leader alone, knowing
nothing of its workers: a domain that has room for the leader but not for the whole group
is a trap where a new or recreated group can stay Pending (lws does not move it). For each
affected group a surge needs a stand-in domain (a new group, a new key) and, once the
group is taken down, a domain for its recreation; the stand-ins are made first and hold
their domains while the groups are recreated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from drainsafe import placement
from drainsafe.drain.blockers import Blocker
from drainsafe.drain.strategy import WorkloadPlan
from drainsafe.kube.objects import (
    LWS_GROUP_KEY_LABEL,
    LWS_WORKER_INDEX_LABEL,
    is_node_ready,
    is_terminal,
    meta,
    node_of,
)

Obj = Mapping[str, Any]
# How a domain can take one group: "whole" (room for all its pods), "trap" (room for the
# leader only), "none" (not even the leader), "taken" (another group's pods are there).
Fit = Literal["whole", "trap", "none", "taken"]


@dataclass(frozen=True)
class Domain:
    value: str
    nodes: tuple[str, ...]  # every node of the domain, by name
    usable: tuple[str, ...]  # those that offer room: Ready, schedulable, not being drained


@dataclass(frozen=True)
class GroupRoom:
    """Where one affected group's stand-in and recreation can go, or why not."""

    group: int
    stand_in: str | None  # the domain a stand-in group takes; None: none (or not needed)
    recreation: str | None  # the domain its recreation takes; None: none
    traps: tuple[tuple[str, str], ...] = ()  # (domain, "stand-in" | "recreation")
    why: Mapping[str, str] | None = None  # domain -> why it offers no room (when short)
    needs_stand_in: bool = False


def domains_of(nodes: Sequence[Obj], topology: str, drained: Iterable[str]) -> list[Domain]:
    skip = set(drained)
    by_value: dict[str, list[Obj]] = {}
    for n in nodes:
        value = (meta(n).get("labels") or {}).get(topology)
        if value is not None:
            by_value.setdefault(str(value), []).append(n)
    out = []
    for value, members in sorted(by_value.items()):
        names = tuple(sorted(str(meta(n).get("name")) for n in members))
        usable = tuple(sorted(
            str(meta(n).get("name")) for n in members
            if str(meta(n).get("name")) not in skip and is_node_ready(n)
            and not (n.get("spec") or {}).get("unschedulable")))
        out.append(Domain(value, names, usable))
    return out


def _unpinned(spec: Obj, topology: str) -> Obj:
    """A group pod's spec as a new group's would be: no node, no pin to a domain."""
    out = {k: v for k, v in spec.items() if k != "nodeName"}
    selector = {k: v for k, v in (spec.get("nodeSelector") or {}).items() if k != topology}
    out["nodeSelector"] = selector
    return out


def domain_fit(domain: Domain, members: Sequence[Obj], nodes: Mapping[str, Obj],
               bound: Mapping[str, Sequence[Obj]], topology: str, *,
               key: str | None) -> Fit:
    """How `domain` can take a group whose pods are `members` (leader first) and whose
    group key is `key` (None: a new group): its own pods neither count as another group's
    nor hold room (they are gone by the time it is recreated)."""
    here = [p for n in domain.nodes for p in bound.get(n, ())]
    if any((k := (meta(p).get("labels") or {}).get(LWS_GROUP_KEY_LABEL)) and k != key
           for p in here):
        return "taken"
    used: dict[str, list[Obj]] = {
        n: [p for p in bound.get(n, ())
            if key is None or (meta(p).get("labels") or {}).get(LWS_GROUP_KEY_LABEL) != key]
        for n in domain.usable}
    specs = [_unpinned(m.get("spec") or {}, topology) for m in members]
    for i, spec in enumerate(specs):
        pod = {"metadata": {}, "spec": spec}
        chosen = next((n for n in domain.usable
                       if placement.check(nodes[n], pod, used[n]).fits), None)
        if chosen is None:
            return "none" if i == 0 else "trap"
        used[chosen] = [*used[chosen], {**pod, "status": {"phase": "Pending"}}]
    return "whole"


_WHY: dict[Fit, str] = {"taken": "holds another group's pods (or a stand-in's)",
                        "trap": "room for the leader only",
                        "none": "no room on a schedulable node"}


def plan_domains(nodes: Sequence[Obj], pods: Sequence[Obj], topology: str,
                 groups: Sequence[tuple[int, str | None, Sequence[Obj]]],
                 drained: Iterable[str], *, stand_ins: int) -> list[GroupRoom]:
    """For each affected group (index, group key, its pods leader first), the domain its
    stand-in group takes (for the first `stand_ins` groups) and the one its recreation
    takes, claimed in that order, plus the domains that would trap either."""
    by_name = {str(meta(n).get("name")): n for n in nodes}
    bound: dict[str, list[Obj]] = {}
    for p in pods:
        where = node_of(p)
        if where is not None and not is_terminal(p):
            bound.setdefault(where, []).append(p)
    domains = domains_of(nodes, topology, drained)
    claimed: set[str] = set()

    def fits(key: str | None, members: Sequence[Obj]) -> dict[str, Fit]:
        return {d.value: ("taken" if d.value in claimed else
                          domain_fit(d, members, by_name, bound, topology, key=key))
                for d in domains}

    def claim(verdicts: Mapping[str, Fit]) -> str | None:
        chosen = next((v for v, f in verdicts.items() if f == "whole"), None)
        if chosen is not None:
            claimed.add(chosen)
        return chosen

    stands: dict[int, tuple[str | None, list[tuple[str, str]], dict[str, Fit]]] = {}
    for index, (group, _key, members) in enumerate(groups):
        if index >= stand_ins:
            break
        verdicts = fits(None, members)
        traps = [(v, "stand-in") for v, f in verdicts.items() if f == "trap"]
        stands[group] = (claim(verdicts), traps, verdicts)
    out = []
    for group, key, members in groups:
        stand_in, traps, before = stands.get(group, (None, [], {}))
        verdicts = fits(key, members)
        traps = traps + [(v, "recreation") for v, f in verdicts.items() if f == "trap"]
        recreation = claim(verdicts)
        why: dict[str, str] | None = None
        if group in stands and stand_in is None:
            why = {v: _WHY[f] for v, f in before.items() if f != "whole"}
        elif recreation is None:
            why = {v: _WHY[f] for v, f in verdicts.items() if f != "whole"}
        out.append(GroupRoom(group, stand_in, recreation, tuple(traps), why,
                             needs_stand_in=group in stands))
    return out


def room_blockers(workload: str, topology: str, rooms: Sequence[GroupRoom],
                  first_pod: Mapping[int, str], *, size: int, replicas: int | None,
                  domains: Sequence[Domain], drained: Iterable[str]
                  ) -> tuple[list[Blocker], list[str]]:
    """What refuses the drain (no domain for a stand-in or a recreation; a domain that
    would trap one), and the plan's notes on where each goes."""
    blockers: list[Blocker] = []
    notes: list[str] = []
    skip = set(drained)
    nodes_of = {d.value: d.nodes for d in domains}
    r = replicas or 1
    floor = f"evict-first would leave {max(r - 1, 0)}/{r} groups Ready while it reloads"
    for room in rooms:
        obj = f"Pod {first_pod.get(room.group, workload)}"
        why = "; ".join(f"{topology}={v}: {t}" for v, t in sorted((room.why or {}).items()))
        why = why or f"no node is labelled {topology}"
        if room.needs_stand_in and room.stand_in is None:
            blockers.append(Blocker(
                "no-domain", obj,
                f"no {topology} domain is free for a stand-in group of {size} pods (one "
                f"holding no other group's pods, with room for all {size} on its "
                f"schedulable nodes): group {room.group} cannot surge; {floor} ({why})",
                f"free or add a {topology} domain with room for {size} pods, or drain with "
                "--strategy evict and accept the floor"))
        elif room.recreation is None:
            beside = (f" beside its stand-in group ({topology}={room.stand_in}): group "
                      f"{room.group} cannot surge; {floor}") if room.stand_in else (
                ": evicting would leave it Pending, "
                f"{max(r - 1, 0)}/{r} groups Ready until a domain is free")
            blockers.append(Blocker(
                "no-domain", obj,
                f"no {topology} domain has room for group {room.group}'s recreation, all "
                f"{size} pods in one domain holding no other group's pods{beside} ({why})",
                f"free or add a {topology} domain with room for {size} pods"))
        for value, phase in room.traps:
            together = sorted(nodes_of.get(value, ()))
            drains_part = bool(skip & set(together))
            blockers.append(Blocker(
                "no-domain", obj,
                f"{topology}={value} has room for the leader of group {room.group}'s "
                f"{phase} but not for its whole group of {size}: lws pins the workers to "
                "their leader's domain, so the group could stay Pending there",
                (f"drain {topology}={value}'s nodes together: drainsafe drain "
                 f"{' '.join(together)}") if drains_part else
                (f"make room for {size} pods in {topology}={value}, or fill it")))
        if room.recreation is not None and (room.stand_in or not room.needs_stand_in):
            where = (f"its stand-in group in {topology}={room.stand_in}, "
                     if room.stand_in else "")
            notes.append(f"{workload}: exclusive {topology}: group {room.group}: {where}its "
                         f"recreation in {topology}={room.recreation}")
    return blockers, notes


def plan_exclusive(nodes: Sequence[Obj], pods: Sequence[Obj], w: WorkloadPlan, topology: str,
                   members: Mapping[int, Sequence[Obj]], here: Mapping[int, str],
                   drained: Sequence[str], *, stand_ins: int
                   ) -> tuple[list[Blocker], list[str]]:
    """The blockers and notes for an exclusive-topology LWS's affected groups (`members`:
    each group's active pods; `here`: a pod of each group on the drained nodes)."""
    groups = []
    for g in w.groups:
        ps = sorted(members.get(g, ()), key=lambda p: int(
            (meta(p).get("labels") or {}).get(LWS_WORKER_INDEX_LABEL) or 0))
        key = next((k for p in ps if (k := (meta(p).get("labels") or {}).get(
            LWS_GROUP_KEY_LABEL))), None)
        groups.append((g, key, ps))
    rooms = plan_domains(nodes, pods, topology, groups, drained, stand_ins=stand_ins)
    return room_blockers(w.workload, topology, rooms, here, size=w.group_size or 1,
                         replicas=w.replicas, domains=domains_of(nodes, topology, drained),
                         drained=drained)
