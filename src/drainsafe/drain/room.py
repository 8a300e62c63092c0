"""Is there room for the replacements? Placement of every evicted pod's replacement.

The fit decision is drainsafe.placement.check, the same pure filter set the lab's
scheduler uses (NodeResourcesFit incl. nvidia.com/gpu and nvidia.com/mig-* extended
resources, NodeUnschedulable, TaintToleration, NodeAffinity/nodeSelector; see that module
for sources). This module adds what a drain preflight needs on top:

- replacements are placed one after another, first fit in node order, and each placed one
  occupies its node, so two replacements never count the same free GPU;
- the order: largest GPU request first (by key on ties), as before; when that leaves one
  without room, once more with the most constrained first (fewest nodes it fits on now,
  then largest GPU request, then key; Python's sort is stable, so equal keys keep their
  order), so a pod that fits anywhere does not take the one GPU a pod with node affinity,
  a nodeSelector or a toleration needs (a false "no room" held nodes CannotSurge). A
  result where the first order found room for all is kept as it was;
- nodes being drained offer no room;
- a node whose Ready condition is not True offers no room;
- each refusal says, per node, why, with free and needed amounts for resources.

What "room" promises: an estimate of feasibility, not the scheduler's placement. If either
order places every replacement, room is reported, and only then: each placement is checked
against what the earlier ones took, so room is never reported where none exists for the
filters modelled here. It can miss room that another assignment has: placement is
bin packing, and no order is exact in general. It misses none when every pod asks the
same requests and the sets of nodes the pods fit on form a laminar family (any two are
disjoint or one contains the other: e.g. selectors on a zone > rack > host tree, or a
toleration of one taint against none): most constrained first then fills each set only
with pods that need no more than it (tests/drain/test_room_order.py checks this by brute
force). The real kube-scheduler schedules one pod at a time in its queue's order
(PrioritySort.Less: higher .spec.priority first, then the earlier queue timestamp;
kubernetes/kubernetes pkg/scheduler/framework/plugins/queuesort/priority_sort.go, checked
against its documentation at v1.33.3) onto its best-scored node, not in this order, so
replacements created in an unlucky order can still meet a node taken by another: a fit
here says an assignment exists, not that the scheduler will find it.

Not modelled (a fit here can still be Pending there): inter-pod (anti-)affinity, topology
spread constraints, host ports, volume zones, DRA ResourceClaims.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from drainsafe import placement
from drainsafe.kube.objects import is_node_ready

Obj = Mapping[str, Any]
GPU_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


def is_gpu_resource(name: str) -> bool:
    return name.startswith(GPU_PREFIXES)


def gpu_requests(spec: Obj) -> dict[str, Decimal]:
    return {k: v for k, v in placement.pod_requests(spec).items()
            if is_gpu_resource(k) and v > 0}


def _fmt(value: Decimal) -> str:
    return f"{value.normalize():f}"


def _explain(node: Obj, spec: Obj, used: placement.Resources, fit: placement.Fit) -> str:
    allocatable = placement.node_allocatable(node)
    wanted = placement.pod_requests(spec)
    parts = []
    for reason in fit.why:
        if reason.code == "unschedulable":
            parts.append("cordoned (unschedulable)")
        elif reason.code == "insufficient" and reason.resource is not None:
            name = reason.resource
            free = max(allocatable.get(name, Decimal(0)) - used.get(name, Decimal(0)),
                       Decimal(0))
            parts.append(f"{reason.text} ({_fmt(free)} free, "
                         f"{_fmt(wanted.get(name, Decimal(0)))} needed)")
        else:
            parts.append(reason.text.replace("node(s) ", ""))
    return "; ".join(parts)


@dataclass(frozen=True)
class Placement:
    pod: str  # namespace/name of the pod whose replacement is placed
    node: str | None
    reasons: Mapping[str, str] = field(default_factory=dict)  # node -> why not, when unplaced


def place_replacements(
    replacements: Sequence[tuple[str, Obj]],
    nodes: Sequence[Obj],
    pods: Sequence[Obj],
    *,
    excluded: Iterable[str] = (),
) -> list[Placement]:
    """Placement of (key, pod spec) replacements on nodes not in `excluded`, each first
    fit in node order: largest GPU request first; if that leaves one without room, most
    constrained first (module docstring: what a fit promises). Of two orders that both
    leave some without room, the one that places more; on a tie the first.

    `pods` are all pods; bound ones occupy their node unless finished.
    """
    skip = set(excluded)
    bound: dict[str, list[Obj]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            bound.setdefault(str(node_name), []).append(pod)
    # What each usable node holds, summed once (placement.NodeLoad); None: no room at all.
    loads: dict[str, placement.NodeLoad | None] = {}
    for node in nodes:
        name = _name(node)
        if _unusable(node, skip) is None:
            load = placement.NodeLoad.of(bound.get(name, ()))
            load.allocatable = placement.node_allocatable(node)
            loads[name] = load
        else:
            loads[name] = None
    # The replacement is the same template, not yet bound to any node.
    specs = [_Wanted(key, {"metadata": {}, "spec": {k: v for k, v in spec.items()
                                                    if k != "nodeName"}})
             for key, spec in replacements]
    largest = sorted(specs, key=lambda w: (-w.gpus, w.key))
    first = _first_fit(largest, nodes, loads, skip)
    if all(p.node is not None for p in first) or all(
            w.replacement == specs[0].replacement for w in specs):
        return first  # had room, or another order of the same pods places them the same
    feasible = [sum(1 for node in nodes if (held := loads[_name(node)]) is not None
                    and placement.check(node, w.replacement, load=held,
                                        requests=w.requests).fits)
                for w in specs]
    constrained = [w for _, w in sorted(zip(feasible, specs, strict=True),
                                        key=lambda fw: (fw[0], -fw[1].gpus, fw[1].key))]
    second = _first_fit(constrained, nodes, loads, skip)
    if sum(p.node is None for p in second) < sum(p.node is None for p in first):
        return second
    return first


@dataclass(frozen=True)
class _Wanted:
    key: str
    replacement: Obj

    @property
    def requests(self) -> placement.Resources:
        return placement.pod_requests(self.replacement["spec"])

    @property
    def gpus(self) -> Decimal:
        return sum(gpu_requests(self.replacement["spec"]).values(), Decimal(0))


def _name(node: Obj) -> str:
    return str((node.get("metadata") or {}).get("name"))


def _unusable(node: Obj, skip: set[str]) -> str | None:
    """Why `node` offers no room at all, or None."""
    if _name(node) in skip:
        return "being drained"
    if not is_node_ready(node):
        return "not Ready"
    return None


def _first_fit(order: Sequence[_Wanted], nodes: Sequence[Obj],
               loads: Mapping[str, placement.NodeLoad | None],
               skip: set[str]) -> list[Placement]:
    """Each replacement in `order` on the first node it fits, occupying it for the next."""
    taken = {name: load.copy() for name, load in loads.items() if load is not None}
    result: list[Placement] = []
    for wanted in order:
        replacement, requests = wanted.replacement, wanted.requests
        reasons: dict[str, str] = {}
        chosen: str | None = None
        for node in nodes:
            name = _name(node)
            load = taken.get(name)
            if load is None:
                reasons[name] = str(_unusable(node, skip))
                continue
            fit = placement.check(node, replacement, load=load, requests=requests)
            if fit.fits:
                chosen = name
                break
            reasons[name] = _explain(node, replacement["spec"], load.used, fit)
        if chosen is not None:
            taken[chosen].add({**replacement, "status": {"phase": "Pending"}})
            result.append(Placement(pod=wanted.key, node=chosen))
        else:
            result.append(Placement(pod=wanted.key, node=None, reasons=reasons))
    return result


def new_pods_fit(template: Obj, count: int, nodes: Sequence[Obj], pods: Sequence[Obj],
                 *, excluded: Iterable[str] = ()) -> bool:
    """Whether `count` new pods of `template` (a pod template spec) fit now, first fit
    beside the pods bound already (place_replacements: one after another, each occupying
    its node). A shared surge's joiner asks this for its new pods plus those the holders'
    surge has not placed yet (drain.sharedsurge)."""
    wanted = [(f"new-{i}", template) for i in range(count)]
    return all(p.node is not None
               for p in place_replacements(wanted, nodes, pods, excluded=excluded))
