"""Is there room for the replacements? Placement of every evicted pod's replacement.

The fit decision is drainsafe.placement.check, the same pure filter set the lab's
scheduler uses (NodeResourcesFit incl. nvidia.com/gpu and nvidia.com/mig-* extended
resources, NodeUnschedulable, TaintToleration, NodeAffinity/nodeSelector; see that module
for sources). This module adds what a drain preflight needs on top:

- replacements are placed one after another, first fit, largest GPU request first, and
  each placed one occupies its node, so two replacements never count the same free GPU;
- nodes being drained offer no room;
- a node whose Ready condition is not True offers no room;
- each refusal says, per node, why, with free and needed amounts for resources.

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


def _explain(node: Obj, spec: Obj, bound: Sequence[Obj], fit: placement.Fit) -> str:
    used, _ = placement.usage(bound)
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
    """First-fit placement of (key, pod spec) replacements on nodes not in `excluded`.

    `pods` are all pods; bound ones occupy their node unless finished.
    """
    skip = set(excluded)
    bound: dict[str, list[Obj]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            bound.setdefault(str(node_name), []).append(pod)
    order = sorted(replacements, key=lambda kv: (-sum(gpu_requests(kv[1]).values()), kv[0]))
    result: list[Placement] = []
    for key, spec in order:
        # The replacement is the same template, not yet bound to any node.
        replacement = {"metadata": {}, "spec": {k: v for k, v in spec.items()
                                                if k != "nodeName"}}
        reasons: dict[str, str] = {}
        chosen: str | None = None
        for node in nodes:
            name = str((node.get("metadata") or {}).get("name"))
            if name in skip:
                reasons[name] = "being drained"
                continue
            if not is_node_ready(node):
                reasons[name] = "not Ready"
                continue
            here = bound.get(name, [])
            fit = placement.check(node, replacement, here)
            if fit.fits:
                chosen = name
                break
            reasons[name] = _explain(node, replacement["spec"], here, fit)
        if chosen is not None:
            bound.setdefault(chosen, []).append({**replacement, "status": {"phase": "Pending"}})
            result.append(Placement(pod=key, node=chosen))
        else:
            result.append(Placement(pod=key, node=None, reasons=reasons))
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
