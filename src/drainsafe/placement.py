"""Where a pod can run and where it goes: the scheduler's filter and score as pure functions.

Shared by the lab's scheduler, the drain's room-for-replacements preflight and the
eviction guard's stand-in checks, so all answer "does this pod fit on that node?" (check)
and "which node gets it?" (choose, score: see score for the plugins and weights) the
same way. Filters and their failure reasons follow the default scheduler's plugins
(kubernetes/kubernetes pkg/scheduler/framework/plugins): NodeUnschedulable ("node(s) were
unschedulable"), TaintToleration ("node(s) had untolerated taint {k: v}"), NodeAffinity
("node(s) didn't match Pod's node affinity/selector"), NodeResourcesFit ("Insufficient
cpu", "Insufficient nvidia.com/gpu", "Too many pods"), and, given its PreFilter counts,
InterPodAffinity (drainsafe.podaffinity: "node(s) didn't match pod affinity rules", ...).
Requests come from the containers (limits stand in for missing requests, as defaulting
does) and the maximum of the init containers (resource.PodRequests). Each failure is a
typed `Reason` (a code, the scheduler's text, and the resource short of room), so callers
decide on the code. Plain dicts in, plain data out; no I/O.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
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
    return _requests(pod_spec)[0]


def _requests(pod_spec: Mapping[str, Any]) -> tuple[Resources, tuple[int, int]]:
    """pod_requests, and (millicpu, memory bytes) as the scheduler's scoring counts them:
    a container without a cpu or memory request counts the non-zero default
    (resourcehelper PodRequests with NonMissingContainerRequests), init containers by
    maximum as well."""
    total: Resources = {}
    cpu = memory = init_cpu = init_memory = 0
    for c in pod_spec.get("containers") or []:
        reqs = container_requests(c)
        for k, v in reqs.items():
            total[k] = total.get(k, Decimal(0)) + v
        cpu += _milli(reqs["cpu"]) if "cpu" in reqs else DEFAULT_MILLI_CPU_REQUEST
        memory += _whole(reqs["memory"]) if "memory" in reqs else DEFAULT_MEMORY_REQUEST
    for c in pod_spec.get("initContainers") or []:
        reqs = container_requests(c)
        for k, v in reqs.items():
            total[k] = max(total.get(k, Decimal(0)), v)
        init_cpu = max(init_cpu, _milli(reqs["cpu"]) if "cpu" in reqs
                       else DEFAULT_MILLI_CPU_REQUEST)
        init_memory = max(init_memory, _whole(reqs["memory"]) if "memory" in reqs
                          else DEFAULT_MEMORY_REQUEST)
    return total, (max(cpu, init_cpu), max(memory, init_memory))


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
    """What the pods bound to one node hold: summed requests, pod count, the pods per
    owner that default spreading counts (not terminating), and the cpu and memory the
    scorer counts (non-zero defaults; see score). Lets a scheduler place many pods in one
    pass without re-summing (see NodeLoad.of)."""

    used: Resources
    count: int
    owners: dict[str, int]
    allocatable: Resources | None = None  # the node's, when the caller parsed it already
    nonzero: tuple[int, int] = (0, 0)  # (millicpu, memory bytes), non-zero defaults
    requested: tuple[int, int] = (0, 0)  # (millicpu, memory bytes) as requested

    @classmethod
    def of(cls, pods: Iterable[Mapping[str, Any]]) -> NodeLoad:
        load = cls({}, 0, {})
        for p in pods:
            load.add(p)
        return load

    def copy(self) -> NodeLoad:
        return NodeLoad(dict(self.used), self.count, dict(self.owners), self.allocatable,
                        self.nonzero, self.requested)

    def add(self, pod: Mapping[str, Any]) -> None:
        held = PodShare.of(pod)
        if held is not None:
            self.include(held)

    def include(self, held: PodShare) -> None:
        self.count += 1
        for k, v in held.used.items():
            self.used[k] = self.used.get(k, Decimal(0)) + v
        self.requested = (self.requested[0] + held.requested[0],
                          self.requested[1] + held.requested[1])
        self.nonzero = (self.nonzero[0] + held.nonzero[0], self.nonzero[1] + held.nonzero[1])
        if held.owner:
            self.owners[held.owner] = self.owners.get(held.owner, 0) + 1

    def exclude(self, held: PodShare) -> None:
        """Undo include(held) (the pod left the node, finished, or changed)."""
        self.count -= 1
        for k, v in held.used.items():
            self.used[k] = self.used.get(k, Decimal(0)) - v
        self.requested = (self.requested[0] - held.requested[0],
                          self.requested[1] - held.requested[1])
        self.nonzero = (self.nonzero[0] - held.nonzero[0], self.nonzero[1] - held.nonzero[1])
        if held.owner:
            left = self.owners.get(held.owner, 0) - 1
            if left > 0:
                self.owners[held.owner] = left
            else:
                self.owners.pop(held.owner, None)


@dataclass(frozen=True)
class PodShare:
    """What one pod adds to its node's NodeLoad: its requests, as requested and with the
    scorer's non-zero defaults, and the owner default spreading counts it under."""

    used: Resources
    requested: tuple[int, int]  # (millicpu, memory bytes) as requested
    nonzero: tuple[int, int]  # (millicpu, memory bytes), non-zero defaults
    owner: str | None

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodShare | None:
        """None for a pod that holds nothing (finished)."""
        if not occupying(pod):
            return None
        requests, nonzero = _requests(pod.get("spec") or {})
        owner = _spread_owner(pod)
        # a terminating pod is not counted (podtopologyspread countPodsMatchSelector)
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            owner = None
        return cls(requests, (_milli(requests.get("cpu")), _whole(requests.get("memory"))),
                   nonzero, owner or None)


class LoadLedger:
    """Each node's NodeLoad kept up to date pod change by pod change, as kube-scheduler's
    cache keeps NodeInfo's Requested from the pod informer's events (AddPod, UpdatePod,
    RemovePod) instead of summing every pod each cycle. `put` a pod's new state (None
    when gone); `loads` then equals NodeLoad.of over each node's bound pods (allocatable
    aside, which the caller sets)."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, PodShare]] = {}  # pod uid -> (node, its share)
        self.loads: dict[str, NodeLoad] = {}

    @classmethod
    def of(cls, pods: Iterable[Mapping[str, Any]]) -> LoadLedger:
        ledger = cls()
        for p in pods:
            ledger.put(str((p.get("metadata") or {}).get("uid")), p)
        return ledger

    def put(self, uid: str, pod: Mapping[str, Any] | None) -> None:
        before = self._held.pop(uid, None)
        if before is not None:
            self.loads[before[0]].exclude(before[1])
        node = (pod.get("spec") or {}).get("nodeName") if pod is not None else None
        held = PodShare.of(pod) if pod is not None and node else None
        if node and held is not None:
            self._held[uid] = (str(node), held)
            self.loads.setdefault(str(node), NodeLoad({}, 0, {})).include(held)

    def snapshot(self) -> dict[str, NodeLoad]:
        """Copies a pass can add its own bindings to."""
        return {name: load.copy() for name, load in self.loads.items()}


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


# --- scoring: which feasible node the scheduler picks ----------------------------------------

MAX_NODE_SCORE = 100
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
DEFAULT_MILLI_CPU_REQUEST = 100  # schedutil.DefaultMilliCPURequest
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024  # schedutil.DefaultMemoryRequest
# PodTopologySpread's system default constraints (ScheduleAnyway): (topologyKey, maxSkew)
DEFAULT_SPREAD = ((HOSTNAME_LABEL, 3), (ZONE_LABEL, 5))
# Owners whose selector DefaultSelector takes (Services too, not modelled); a reference
# without a kind (hand-made test data) counts as one of them.
SPREAD_OWNER_KINDS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController", ""})


class Plugin(StrEnum):
    """The default profile's score plugins that the lab models (see score)."""

    TAINT_TOLERATION = "TaintToleration"
    NODE_AFFINITY = "NodeAffinity"
    NODE_RESOURCES_FIT = "NodeResourcesFit"
    POD_TOPOLOGY_SPREAD = "PodTopologySpread"
    INTER_POD_AFFINITY = "InterPodAffinity"
    NODE_RESOURCES_BALANCED_ALLOCATION = "NodeResourcesBalancedAllocation"


WEIGHTS: Mapping[Plugin, int] = {
    Plugin.TAINT_TOLERATION: 3, Plugin.NODE_AFFINITY: 2, Plugin.NODE_RESOURCES_FIT: 1,
    Plugin.POD_TOPOLOGY_SPREAD: 2, Plugin.INTER_POD_AFFINITY: 2,
    Plugin.NODE_RESOURCES_BALANCED_ALLOCATION: 1,
}


@dataclass(frozen=True)
class NodeScore:
    """A feasible node's score: each plugin's normalised score (0-100) and their sum
    weighted by WEIGHTS. A plugin that skips this pod has no entry."""

    plugins: Mapping[Plugin, int]

    @property
    def total(self) -> int:
        return sum(WEIGHTS[p] * s for p, s in self.plugins.items())


def score(feasible: Sequence[Mapping[str, Any]], pod: Mapping[str, Any], *,
          loads: Mapping[str, NodeLoad], requests: Resources | None = None,
          pod_affinity: podaffinity.AffinityState | None = None,
          all_nodes: Sequence[Mapping[str, Any]] | None = None) -> dict[str, NodeScore]:
    """Each feasible node's score, as kube-scheduler's default profile scores it.

    The plugins and weights are getDefaultPlugins' (kubernetes/kubernetes
    pkg/scheduler/apis/config/v1/default_plugins.go, the v1.33 scheduler's; read in stored
    copies from the pointer.Int32 era (~v1.26) to a v1.36 one, the weights the same in
    each, though not at the v1.33.0 tag itself): TaintToleration 3, NodeAffinity 2,
    NodeResourcesFit 1, PodTopologySpread 2, InterPodAffinity 2,
    NodeResourcesBalancedAllocation 1, ImageLocality 1. Each plugin scores every feasible
    node, normalises over them to 0..MaxNodeScore (100), and the node's score is the sum
    weighted (framework runtime RunScorePlugins). What each does here, from
    pkg/scheduler/framework/plugins/... (the formulas read in copies either side of v1.33,
    unchanged between them):
    - TaintToleration (tainttoleration/taint_toleration.go): counts the PreferNoSchedule
      taints the pod does not tolerate (countIntolerableTaintsPreferNoSchedule), then
      helper.DefaultNormalizeScore reversed: 100 - 100 * count / max, all 100 when none.
    - NodeAffinity (nodeaffinity/node_affinity.go): the summed weights of the pod's
      preferredDuringScheduling terms the node matches, DefaultNormalizeScore (not
      reversed).
    - NodeResourcesFit (noderesources/fit.go, least_allocated.go, resource_allocation.go;
      defaults.go: LeastAllocated over cpu and memory, weight 1 each): per resource
      (allocatable - requested) * 100 / allocatable, 0 when over, averaged by weight, in
      integers; requested is the node's pods' plus this pod's, a container that asks for
      no cpu or memory counted at 100m and 200Mi (the non-zero defaults). GPUs are not
      scored (not among the default resources).
    - NodeResourcesBalancedAllocation (balanced_allocation.go): 100 * (1 - the standard
      deviation of cpu's and memory's requested fractions, this pod's actual requests
      added); skipped for a pod that requests neither (kubernetes/kubernetes#130260).
    - PodTopologySpread (podtopologyspread/scoring.go): a pod without constraints of its
      own gets the system defaults, kubernetes.io/hostname maxSkew 3 and
      topology.kubernetes.io/zone maxSkew 5, over the pods its owner selects (here: the
      not-terminating pods of the same ReplicaSet, StatefulSet or ReplicationController);
      per constraint the node's label domain's count * ln(domains + 2) + maxSkew - 1,
      rounded, then 100 * (max + min - s) / max. Zone counts take every node the pod's
      required node affinity admits; a node without a label skips that constraint.
    - InterPodAffinity (interpodaffinity/scoring.go): the node's topology pairs' sums from
      podaffinity.prefilter, normalised as (s - min) / (max - min) with min <= 0 <= max.
    - ImageLocality scores nothing here: lab nodes report no images (the same for all).
    Not modelled: a pod's own topologySpreadConstraints (no score from PodTopologySpread
    then, as none from its system defaults either), Services' selectors in the default
    spreading, ImageLocality, percentageOfNodesToScore (every feasible node is scored).
    """
    spec = pod.get("spec") or {}
    empty = NodeLoad({}, 0, {})
    names = [str((n.get("metadata") or {}).get("name")) for n in feasible]
    held = [loads.get(name, empty) for name in names]
    raw: dict[Plugin, list[int]] = {}
    tolerations = spec.get("tolerations") or []
    raw[Plugin.TAINT_TOLERATION] = [
        sum(1 for t in (n.get("spec") or {}).get("taints") or []
            if t.get("effect") == "PreferNoSchedule" and not tolerates(tolerations, t))
        for n in feasible]
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    raw[Plugin.NODE_AFFINITY] = [
        sum(int(t.get("weight") or 0) for t in terms
            if _match_node_selector_term(t.get("preference") or {}, n)) for n in feasible]
    req, nonzero = _requests(spec)
    if requests is not None:
        req = requests
    alloc = [_allocatable(n, load) for n, load in zip(feasible, held, strict=True)]
    raw[Plugin.NODE_RESOURCES_FIT] = [
        _least_allocated(a, load, nonzero) for a, load in zip(alloc, held, strict=True)]
    asked = (_milli(req.get("cpu")), _whole(req.get("memory")))
    if any(asked):
        raw[Plugin.NODE_RESOURCES_BALANCED_ALLOCATION] = [
            _balanced(a, load, asked) for a, load in zip(alloc, held, strict=True)]
    spread = _spread_scores(feasible, pod, loads, all_nodes if all_nodes is not None
                            else feasible)
    if spread is not None:
        raw[Plugin.POD_TOPOLOGY_SPREAD] = spread
    if pod_affinity is not None and pod_affinity.preferred:
        raw[Plugin.INTER_POD_AFFINITY] = [
            sum(v for (k, value), v in pod_affinity.preferred.items()
                if ((n.get("metadata") or {}).get("labels") or {}).get(k) == value)
            for n in feasible]
    normalised = {
        Plugin.TAINT_TOLERATION: _default_normalize(raw[Plugin.TAINT_TOLERATION], True),
        Plugin.NODE_AFFINITY: _default_normalize(raw[Plugin.NODE_AFFINITY], False),
        Plugin.NODE_RESOURCES_FIT: raw[Plugin.NODE_RESOURCES_FIT],
    }
    if Plugin.NODE_RESOURCES_BALANCED_ALLOCATION in raw:
        normalised[Plugin.NODE_RESOURCES_BALANCED_ALLOCATION] = raw[
            Plugin.NODE_RESOURCES_BALANCED_ALLOCATION]
    if Plugin.POD_TOPOLOGY_SPREAD in raw:
        normalised[Plugin.POD_TOPOLOGY_SPREAD] = _spread_normalize(
            raw[Plugin.POD_TOPOLOGY_SPREAD])
    if Plugin.INTER_POD_AFFINITY in raw:
        normalised[Plugin.INTER_POD_AFFINITY] = _affinity_normalize(
            raw[Plugin.INTER_POD_AFFINITY])
    return {name: NodeScore({p: s[i] for p, s in normalised.items()})
            for i, name in enumerate(names)}


def _default_normalize(scores: list[int], reverse: bool) -> list[int]:
    """helper.DefaultNormalizeScore(MaxNodeScore, reverse, scores)."""
    top = max(scores, default=0)
    if top == 0:
        return [MAX_NODE_SCORE if reverse else 0 for _ in scores]
    out = [MAX_NODE_SCORE * s // top for s in scores]
    return [MAX_NODE_SCORE - s for s in out] if reverse else out


def _spread_normalize(scores: list[int]) -> list[int]:
    """PodTopologySpread.NormalizeScore (no node ignored under the system defaults)."""
    top, low = max(scores, default=0), min(scores, default=0)
    if top == 0:
        return [MAX_NODE_SCORE for _ in scores]
    return [MAX_NODE_SCORE * (top + low - s) // top for s in scores]


def _affinity_normalize(scores: list[int]) -> list[int]:
    """InterPodAffinity.NormalizeScore: min-max, with 0 inside the range."""
    top, low = max([0, *scores]), min([0, *scores])
    if top == low:
        return [0 for _ in scores]
    return [int(MAX_NODE_SCORE * (s - low) / (top - low)) for s in scores]


def _milli(q: Decimal | None) -> int:
    """Quantity.MilliValue: rounded up."""
    return math.ceil(q * 1000) if q else 0


def _whole(q: Decimal | None) -> int:
    """Quantity.Value: rounded up."""
    return math.ceil(q) if q else 0


def _allocatable(node: Mapping[str, Any], load: NodeLoad) -> tuple[int, int]:
    alloc = load.allocatable if load.allocatable is not None else node_allocatable(node)
    return _milli(alloc.get("cpu")), _whole(alloc.get("memory"))


def _least_allocated(alloc: tuple[int, int], load: NodeLoad, pod: tuple[int, int]) -> int:
    """LeastAllocated's score over cpu and memory (weights 1), in integers."""
    total = weights = 0
    for capacity, requested in zip(alloc, (load.nonzero[0] + pod[0], load.nonzero[1] + pod[1]),
                                   strict=True):
        if capacity == 0:
            continue
        total += 0 if requested > capacity else \
            (capacity - requested) * MAX_NODE_SCORE // capacity
        weights += 1
    return total // weights if weights else 0


def _balanced(alloc: tuple[int, int], load: NodeLoad, pod: tuple[int, int]) -> int:
    """BalancedAllocation's score: 100 * (1 - std of the requested fractions)."""
    used = (load.requested[0] + pod[0], load.requested[1] + pod[1])
    fractions = [min(u / a, 1.0) for u, a in zip(used, alloc, strict=True) if a]
    std = abs(fractions[0] - fractions[1]) / 2 if len(fractions) == 2 else 0.0
    return int((1 - std) * MAX_NODE_SCORE)


def _spread_owner(pod: Mapping[str, Any]) -> str | None:
    """The owner whose pods the system default spreading counts, if any."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and str(ref.get("kind") or "") in SPREAD_OWNER_KINDS:
            return str(ref.get("uid"))
    return None


def _spread_scores(feasible: Sequence[Mapping[str, Any]], pod: Mapping[str, Any],
                   loads: Mapping[str, NodeLoad], all_nodes: Sequence[Mapping[str, Any]]
                   ) -> list[int] | None:
    """PodTopologySpread's raw scores under the system defaults; None when it skips."""
    spec = pod.get("spec") or {}
    owner = _spread_owner(pod)
    if spec.get("topologySpreadConstraints") or owner is None:
        return None

    def labels(n: Mapping[str, Any]) -> Mapping[str, str]:
        return (n.get("metadata") or {}).get("labels") or {}

    def count(n: Mapping[str, Any]) -> int:
        load = loads.get(str((n.get("metadata") or {}).get("name")))
        return load.owners.get(owner, 0) if load is not None else 0

    weights: dict[str, float] = {}
    zones: dict[str, int] = {}
    for key, _ in DEFAULT_SPREAD:
        if key == HOSTNAME_LABEL:
            weights[key] = math.log(len(feasible) + 2)
        else:
            domains = {labels(n).get(key, "") for n in feasible}
            weights[key] = math.log(len(domains) + 2)
            zones = dict.fromkeys(domains, 0)
    if any(ZONE_LABEL in labels(n) for n in feasible):  # else no node scores a zone
        for n in all_nodes:
            value = labels(n).get(ZONE_LABEL, "")
            if value in zones and matches_node_affinity(spec, n):
                zones[value] += count(n)
    out = []
    for n in feasible:
        total = 0.0
        for key, max_skew in DEFAULT_SPREAD:
            if key not in labels(n):
                continue
            matching = count(n) if key == HOSTNAME_LABEL else zones[labels(n)[key]]
            total += matching * weights[key] + max_skew - 1
        out.append(math.floor(total + 0.5))  # Go's math.Round, for these non-negatives
    return out


def choose(nodes: Sequence[Mapping[str, Any]], pod: Mapping[str, Any],
           bound_by_node: Mapping[str, Sequence[Mapping[str, Any]]] | None = None, *,
           loads: Mapping[str, NodeLoad] | None = None,
           pod_affinity: podaffinity.AffinityState | None = None
           ) -> tuple[str | None, dict[str, Fit]]:
    """The node the scheduler binds the pod to (None if none fits) and each node's
    verdict. Give either the pods bound to each node or their precomputed loads.

    As schedulePod: a pod with one feasible node goes there unscored; with more, the
    highest total score (score) wins. The scheduler breaks ties at random (selectHost's
    reservoir sampling); here the alphabetically first wins, so placement is
    reproducible."""
    verdicts: dict[str, Fit] = {}
    empty = NodeLoad({}, 0, {})
    requests = pod_requests(pod.get("spec") or {})
    held: dict[str, NodeLoad] = {}
    feasible = []
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name"))
        if loads is not None:
            load = loads.get(name, empty)
        else:
            load = NodeLoad.of((bound_by_node or {}).get(name, ()))
        held[name] = load
        fit = check(node, pod, load=load, requests=requests, pod_affinity=pod_affinity)
        verdicts[name] = fit
        if fit.fits:
            feasible.append(node)
    if len(feasible) <= 1:
        return ((str((feasible[0].get("metadata") or {}).get("name")) if feasible else None),
                verdicts)
    scores = score(feasible, pod, loads=held, requests=requests, pod_affinity=pod_affinity,
                   all_nodes=nodes)
    totals = {name: s.total for name, s in scores.items()}
    best = min(totals, key=lambda name: (-totals[name], name))
    return best, verdicts
