"""Is there room for the replacements? A pure, conservative placement check.

A subset of the default scheduler's filters, enough to answer "would the replacement of
this GPU pod be Pending?" before anything is cordoned
(kubernetes/kubernetes pkg/scheduler/framework/plugins: NodeResourcesFit, NodeUnschedulable,
TaintToleration, NodeAffinity incl. nodeSelector):

- resource requests (every requested resource, extended ones such as nvidia.com/gpu and
  nvidia.com/mig-1g.10gb included) against allocatable minus what pods bound to the node
  already request; a pod's request is max(sum of containers, largest init container) plus
  overhead (the scheduler's computePodResourceRequest); the "pods" count too;
- spec.unschedulable (cordoned) unless the pod tolerates node.kubernetes.io/unschedulable;
- NoSchedule/NoExecute taints the pod does not tolerate;
- nodeSelector and requiredDuringSchedulingIgnoredDuringExecution node affinity.

Not modelled (so a fit here can still be Pending there): inter-pod (anti-)affinity,
topology spread, host ports, volumes' zones, DRA claims. Placement is first fit, largest
GPU request first, so several replacements never count the same free GPU twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from drainsafe.quantity import QuantityError, parse_quantity

Obj = Mapping[str, Any]
Resources = dict[str, Decimal]
GPU_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def is_gpu_resource(name: str) -> bool:
    return name.startswith(GPU_PREFIXES)


def _quantities(raw: Mapping[str, Any] | None) -> Resources:
    out: Resources = {}
    for name, value in (raw or {}).items():
        try:
            out[name] = parse_quantity(value)
        except QuantityError:
            continue
    return out


def _add(into: Resources, more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, Decimal(0)) + value


def pod_requests(spec: Obj) -> Resources:
    """Effective requests; a limit stands in for a missing request (API defaulting)."""
    total: Resources = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        _add(total, {**_quantities(res.get("limits")), **_quantities(res.get("requests"))})
    for c in spec.get("initContainers") or []:
        res = c.get("resources") or {}
        init = {**_quantities(res.get("limits")), **_quantities(res.get("requests"))}
        for name, value in init.items():
            if value > total.get(name, Decimal(0)):
                total[name] = value
    _add(total, _quantities(spec.get("overhead")))
    total["pods"] = Decimal(1)
    return total


def gpu_requests(spec: Obj) -> Resources:
    return {k: v for k, v in pod_requests(spec).items() if is_gpu_resource(k) and v > 0}


def tolerates(tolerations: Iterable[Obj], taint: Obj) -> bool:
    """core/v1 Toleration.ToleratesTaint."""
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        op = t.get("operator") or "Equal"
        if not key:
            if op == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if op == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _expression_matches(expr: Obj, labels: Mapping[str, str]) -> bool:
    key = expr.get("key")
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    value = labels.get(str(key), "")
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def matches_node_affinity(spec: Obj, node: Obj) -> bool:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    )
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    fields = {"metadata.name": str(meta.get("name") or "")}
    for term in terms:  # terms are ORed, expressions within a term ANDed
        exprs = term.get("matchExpressions") or []
        field_exprs = term.get("matchFields") or []
        if not exprs and not field_exprs:
            continue
        if all(_expression_matches(e, labels) for e in exprs) and all(
            _expression_matches(e, fields) for e in field_exprs
        ):
            return True
    return False


def node_ready(node: Obj) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    for c in conditions:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return True  # no conditions reported: do not invent a failure


@dataclass
class NodeRoom:
    name: str
    node: Obj
    free: Resources

    @classmethod
    def of(cls, node: Obj, pods: Iterable[Obj]) -> NodeRoom:
        free = _quantities((node.get("status") or {}).get("allocatable"))
        if "pods" not in free:
            free["pods"] = Decimal(110)  # kubelet's default maxPods
        for pod in pods:
            for name, value in pod_requests(pod.get("spec") or {}).items():
                free[name] = free.get(name, Decimal(0)) - value
        return cls(name=str((node.get("metadata") or {}).get("name")), node=node, free=free)

    def why_not(self, spec: Obj) -> str | None:
        """None when the pod fits; otherwise the scheduler-style reason."""
        node_spec = self.node.get("spec") or {}
        tolerations = spec.get("tolerations") or []
        if node_spec.get("unschedulable") and not tolerates(
            tolerations, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
        ):
            return "cordoned (unschedulable)"
        if not node_ready(self.node):
            return "not Ready"
        for taint in node_spec.get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(
                tolerations, taint
            ):
                return f"untolerated taint {taint.get('key')}={taint.get('value', '')}:" + str(
                    taint.get("effect")
                )
        if not matches_node_affinity(spec, self.node):
            return "nodeSelector/affinity does not match"
        short = [
            f"Insufficient {name} ({_fmt(max(self.free.get(name, Decimal(0)), Decimal(0)))}"
            f" free, {_fmt(want)} needed)"
            for name, want in sorted(pod_requests(spec).items())
            if want > 0 and self.free.get(name, Decimal(0)) < want
        ]
        return "; ".join(short) or None

    def take(self, spec: Obj) -> None:
        for name, value in pod_requests(spec).items():
            self.free[name] = self.free.get(name, Decimal(0)) - value


def _fmt(value: Decimal) -> str:
    return f"{value.normalize():f}"


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

    `pods` are all bound pods; those in phase Succeeded/Failed free their requests.
    """
    skip = set(excluded)
    by_node: dict[str, list[Obj]] = {}
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name and phase not in ("Succeeded", "Failed"):
            by_node.setdefault(node_name, []).append(pod)
    rooms = [
        NodeRoom.of(n, by_node.get(str((n.get("metadata") or {}).get("name")), []))
        for n in nodes
    ]
    order = sorted(
        replacements,
        key=lambda kv: (-sum(gpu_requests(kv[1]).values()), kv[0]),
    )
    result: list[Placement] = []
    for key, spec in order:
        reasons: dict[str, str] = {}
        chosen: NodeRoom | None = None
        for room in rooms:
            if room.name in skip:
                reasons[room.name] = "being drained"
                continue
            why = room.why_not(spec)
            if why is None:
                chosen = room
                break
            reasons[room.name] = why
        if chosen is not None:
            chosen.take(spec)
            result.append(Placement(pod=key, node=chosen.name))
        else:
            result.append(Placement(pod=key, node=None, reasons=reasons))
    return result
