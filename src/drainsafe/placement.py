"""Where a pod can run: the scheduler's filter decision as a pure function.

Shared by the lab's scheduler and the drain's room-for-replacements preflight, so both
answer "does this pod fit on that node?" the same way. Filters and their failure
reasons follow the default scheduler's plugins (kubernetes/kubernetes
pkg/scheduler/framework/plugins): NodeUnschedulable ("node(s) were unschedulable"),
TaintToleration ("node(s) had untolerated taint {k: v}"), NodeAffinity ("node(s) didn't
match Pod's node affinity/selector"), NodeResourcesFit ("Insufficient cpu",
"Insufficient nvidia.com/gpu", "Too many pods"), and, given its PreFilter counts,
InterPodAffinity (drainsafe.podaffinity: "node(s) didn't match pod affinity rules", ...).
Requests come from the containers
(limits stand in for missing requests, as defaulting does) and the maximum of the init
containers (resource.PodRequests). Each failure is a typed `Reason` (a code, the
scheduler's text, and the resource short of room), so callers decide on the code. Plain
dicts in, plain data out; no I/O.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from drainsafe import podaffinity
from drainsafe.labels import Requirement, Selector
from drainsafe.quantity import QuantityError, parse_quantity

Resources = dict[str, Decimal]
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


# Which filter refused (the scheduler plugin's status, typed): code decides, text explains.
ReasonCode = Literal["node-name", "unschedulable", "affinity", "taint", "too-many-pods",
                     "insufficient", "pod-affinity"]


@dataclass(frozen=True)
class Reason:
    code: ReasonCode
    text: str  # the scheduler's own wording, as in a FailedScheduling event
    resource: str | None = None  # the resource short of room, for "insufficient"


@dataclass(frozen=True)
class Fit:
    fits: bool
    why: tuple[Reason, ...] = ()

    @property
    def reasons(self) -> tuple[str, ...]:
        """The scheduler's texts, in order (for events and messages)."""
        return tuple(r.text for r in self.why)


@functools.lru_cache(maxsize=4096)
def _quantity(value: str | int | float) -> Decimal | None:
    # The same few strings ("1", "32Gi") recur on every node and pod: parse each once.
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _quantities(values: Mapping[str, Any] | None) -> Resources:
    out: Resources = {}
    for k, v in (values or {}).items():
        q = _quantity(v) if isinstance(v, str | int | float) else None
        if q is not None:
            out[str(k)] = q
    return out


def container_requests(container: Mapping[str, Any]) -> Resources:
    res = container.get("resources") or {}
    reqs = _quantities(res.get("limits"))
    reqs.update(_quantities(res.get("requests")))
    return reqs


def pod_requests(pod_spec: Mapping[str, Any]) -> Resources:
    total: Resources = {}
    for c in pod_spec.get("containers") or []:
        for k, v in container_requests(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in pod_spec.get("initContainers") or []:
        for k, v in container_requests(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return total


def node_allocatable(node: Mapping[str, Any]) -> Resources:
    status = node.get("status") or {}
    return _quantities(status.get("allocatable") or status.get("capacity"))


def occupying(pod: Mapping[str, Any]) -> bool:
    """A bound pod holds its node's resources until it is finished or gone."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def usage(pods: Iterable[Mapping[str, Any]]) -> tuple[Resources, int]:
    """Summed requests and the count of the pods that occupy a node."""
    total: Resources = {}
    count = 0
    for p in pods:
        if not occupying(p):
            continue
        count += 1
        for k, v in pod_requests(p.get("spec") or {}).items():
            total[k] = total.get(k, Decimal(0)) + v
    return total, count


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """v1.Toleration.ToleratesTaint."""
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


def _match_node_selector_term(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    fields = {"metadata.name": (node.get("metadata") or {}).get("name", "")}
    exprs = term.get("matchExpressions") or []
    field_exprs = term.get("matchFields") or []
    if not exprs and not field_exprs:
        return False  # an empty term matches no objects (NodeSelectorTerm docs)
    for source, items in ((labels, exprs), (fields, field_exprs)):
        for e in items:
            op = e.get("operator")
            values = tuple(str(v) for v in e.get("values") or ())
            if op in ("In", "NotIn", "Exists", "DoesNotExist"):
                if not Requirement(str(e.get("key")), op, values).matches(source):
                    return False
            elif op in ("Gt", "Lt"):
                have = source.get(str(e.get("key")))
                try:
                    ok = have is not None and (int(have) > int(values[0]) if op == "Gt"
                                               else int(have) < int(values[0]))
                except (ValueError, IndexError):
                    ok = False
                if not ok:
                    return False
            else:
                return False
    return True


def matches_node_affinity(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector AND requiredDuringSchedulingIgnoredDuringExecution (terms ORed)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    selector = pod_spec.get("nodeSelector") or {}
    if not Selector(tuple(Requirement(k, "In", (str(v),)) for k, v in selector.items())
                    ).matches(labels):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return True
    return any(_match_node_selector_term(t, node) for t in terms)


def untolerated_taint(tolerations: Sequence[Mapping[str, Any]], node: Mapping[str, Any]
                      ) -> Mapping[str, Any] | None:
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if taint.get("key") == UNSCHEDULABLE_TAINT:
            continue  # reported by the NodeUnschedulable filter instead
        if not tolerates(tolerations, taint):
            return taint  # type: ignore[no-any-return]
    return None


@dataclass
class NodeLoad:
    """What the pods bound to one node hold: summed requests, pod count, pods per owner.
    Lets a scheduler place many pods in one pass without re-summing (see NodeLoad.of)."""

    used: Resources
    count: int
    owners: dict[str, int]
    allocatable: Resources | None = None  # the node's, when the caller parsed it already

    @classmethod
    def of(cls, pods: Iterable[Mapping[str, Any]]) -> NodeLoad:
        load = cls({}, 0, {})
        for p in pods:
            load.add(p)
        return load

    def add(self, pod: Mapping[str, Any]) -> None:
        if not occupying(pod):
            return
        self.count += 1
        for k, v in pod_requests(pod.get("spec") or {}).items():
            self.used[k] = self.used.get(k, Decimal(0)) + v
        owner = _owner_uid(pod)
        if owner:
            self.owners[owner] = self.owners.get(owner, 0) + 1


def check(node: Mapping[str, Any], pod: Mapping[str, Any],
          bound: Iterable[Mapping[str, Any]] = (), *, load: NodeLoad | None = None,
          requests: Resources | None = None,
          pod_affinity: podaffinity.AffinityState | None = None) -> Fit:
    """Whether `pod` can be placed on `node` next to the pods already `bound` there
    (or whose summed `load` is given instead); with `pod_affinity` (podaffinity.prefilter
    over the cluster's bound pods) its inter-pod (anti-)affinity too."""
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    reasons: list[Reason] = []
    node_spec = node.get("spec") or {}
    wanted = spec.get("nodeName")
    if wanted and wanted != (node.get("metadata") or {}).get("name"):
        return Fit(False, (Reason("node-name", "node(s) didn't match the requested node name"),))
    if node_spec.get("unschedulable") and not tolerates(
            tolerations, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}):
        reasons.append(Reason("unschedulable", "node(s) were unschedulable"))
    if not matches_node_affinity(spec, node):
        reasons.append(Reason("affinity", "node(s) didn't match Pod's node affinity/selector"))
    if pod_affinity is not None and not pod_affinity.trivial:
        text = podaffinity.refusal(pod_affinity, (node.get("metadata") or {}).get("labels") or {})
        if text is not None:
            reasons.append(Reason("pod-affinity", text))
    taint = untolerated_taint(tolerations, node)
    if taint is not None:
        reasons.append(Reason("taint", f"node(s) had untolerated taint {{{taint.get('key')}: "
                              f"{taint.get('value') or ''}}}"))
    if load is None:
        load = NodeLoad.of(bound)
    allocatable = load.allocatable if load.allocatable is not None else node_allocatable(node)
    used, count = load.used, load.count
    pods_cap = allocatable.get("pods")
    if pods_cap is not None and count + 1 > pods_cap:
        reasons.append(Reason("too-many-pods", "Too many pods"))
    for name, amount in sorted((requests if requests is not None
                                else pod_requests(spec)).items()):
        if amount <= 0:
            continue
        if used.get(name, Decimal(0)) + amount > allocatable.get(name, Decimal(0)):
            reasons.append(Reason("insufficient", f"Insufficient {name}", resource=name))
    return Fit(not reasons, tuple(reasons))


def failure_message(total_nodes: int, fits: Iterable[Fit]) -> str:
    """The FailedScheduling message: "0/3 nodes are available: 1 node(s) were ..."."""
    histogram: Counter[str] = Counter()
    for f in fits:
        for r in f.reasons:
            histogram[r] += 1
    parts = sorted(f"{n} {r}" for r, n in histogram.items())
    text = f"0/{total_nodes} nodes are available"
    if parts:
        text += ": " + ", ".join(parts)
    return (text + f". preemption: 0/{total_nodes} nodes are available: {total_nodes} "
            "Preemption is not helpful for scheduling.")


def score(node: Mapping[str, Any], pod: Mapping[str, Any],
          bound: Sequence[Mapping[str, Any]] = (), *, load: NodeLoad | None = None,
          requests: Resources | None = None) -> tuple[float, ...]:
    """Higher is better: fewest PreferNoSchedule taints the pod does not tolerate
    (TaintToleration's score: kubernetes pkg/scheduler/framework/plugins/tainttoleration/
    taint_toleration.go countIntolerableTaintsPreferNoSchedule, normalised in reverse; a
    preference, never a filter; ranked first here where kube-scheduler weighs it in a
    sum), then spread pods of one owner (default PodTopologySpread), then least allocated
    (NodeResourcesFit LeastAllocated), then fewest pods."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    avoided = sum(1 for t in (node.get("spec") or {}).get("taints") or []
                  if t.get("effect") == "PreferNoSchedule" and not tolerates(tolerations, t))
    if load is None:
        load = NodeLoad.of(bound)
    owner = _owner_uid(pod)
    same_owner = load.owners.get(owner, 0) if owner else 0
    allocatable = load.allocatable if load.allocatable is not None else node_allocatable(node)
    used, count = load.used, load.count
    req = requests if requests is not None else pod_requests(pod.get("spec") or {})
    fractions = []
    for name in ("cpu", "memory", "nvidia.com/gpu"):
        cap = allocatable.get(name)
        if cap:
            fractions.append(float((cap - used.get(name, Decimal(0)) - req.get(name, 0)) / cap))
    free = sum(fractions) / len(fractions) if fractions else 0.0
    return (-avoided, -same_owner, free, -count)


def _owner_uid(pod: Mapping[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def choose(nodes: Sequence[Mapping[str, Any]], pod: Mapping[str, Any],
           bound_by_node: Mapping[str, Sequence[Mapping[str, Any]]] | None = None, *,
           loads: Mapping[str, NodeLoad] | None = None,
           pod_affinity: podaffinity.AffinityState | None = None
           ) -> tuple[str | None, dict[str, Fit]]:
    """The best feasible node's name (None if none fits) and each node's verdict.
    Give either the pods bound to each node or their precomputed loads."""
    verdicts: dict[str, Fit] = {}
    best: tuple[tuple[float, ...], str] | None = None
    empty = NodeLoad({}, 0, {})
    requests = pod_requests(pod.get("spec") or {})
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name"))
        if loads is not None:
            load = loads.get(name, empty)
        else:
            load = NodeLoad.of((bound_by_node or {}).get(name, ()))
        fit = check(node, pod, load=load, requests=requests, pod_affinity=pod_affinity)
        verdicts[name] = fit
        if fit.fits:
            key = (score(node, pod, load=load, requests=requests), name)
            # Ties go to the alphabetically first node, so placement is reproducible.
            if best is None or key[0] > best[0] or (key[0] == best[0] and name < best[1]):
                best = key
    return (best[1] if best else None), verdicts
