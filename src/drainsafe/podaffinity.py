"""Inter-pod affinity and anti-affinity: the scheduler's InterPodAffinity filter and score.

After kubernetes/kubernetes pkg/scheduler/framework/plugins/interpodaffinity/filtering.go
(read at the stored commit 53f1b9d and in a later copy that uses the `fwk` status package;
not checked at a tagged release: the filter's three checks, their order and their texts
are the same in both): a PreFilter pass over the pods bound to nodes counts, per
topology pair (topologyKey, the node's value),
- the pods that match ALL of the incoming pod's required affinity terms,
- the pods that match each of its required anti-affinity terms,
- the existing pods whose required anti-affinity terms match the incoming pod;
then a node passes when every affinity term's topology key is on the node and its pair
counts a matching pod (or, for the first pod of a series, when no pod anywhere matches
and the pod matches its own terms), no anti-affinity term's pair there counts a pod, and
no existing pod's anti-affinity covers the node's pairs. A term's namespaces default to
the incoming (or existing) pod's own; its selector is a metav1.LabelSelector
(drainsafe.labels). The failure texts are the plugin's ErrReason* strings.

The same pass gathers the plugin's score per topology pair (scoring.go PreScore, at
v1.33: preferred terms of the incoming pod and of the pods already bound, and their
required affinity terms at hardPodAffinityWeight 1); drainsafe.placement.score sums it
per node and normalises it.

Not modelled: namespaceSelector other than {} (every namespace), matchLabelKeys and
mismatchLabelKeys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drainsafe.labels import Selector, SelectorError, from_label_selector

Obj = Mapping[str, Any]
Pair = tuple[str, str]  # (topologyKey, the node's value)

HARD_POD_AFFINITY_WEIGHT = 1  # InterPodAffinityArgs.hardPodAffinityWeight's default
AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


@dataclass(frozen=True)
class Term:
    """A required PodAffinityTerm, resolved: whose pods it selects, over which domain."""

    selector: Selector | None  # None: a nil labelSelector, which selects no pod
    namespaces: frozenset[str] | None  # None: every namespace
    topology_key: str

    def selects(self, pod: Obj) -> bool:
        m = pod.get("metadata") or {}
        if self.namespaces is not None and str(m.get("namespace") or "default") \
                not in self.namespaces:
            return False
        return self.selector is not None and self.selector.matches(m.get("labels") or {})


def _term(t: Obj, own: str) -> Term | None:
    """A PodAffinityTerm of a pod in namespace `own`, resolved (None: unreadable)."""
    selector: Selector | None = None
    if t.get("labelSelector") is not None:
        try:
            selector = from_label_selector(t.get("labelSelector"))
        except SelectorError:
            return None  # the API server rejects such a pod; nothing to match
    namespaces: frozenset[str] | None = frozenset(t.get("namespaces") or ())
    if t.get("namespaceSelector") == {}:
        namespaces = None
    elif not namespaces:
        namespaces = frozenset({own})
    return Term(selector, namespaces, str(t.get("topologyKey") or ""))


def _block(pod: Obj, kind: str) -> tuple[Obj, str]:
    spec = pod.get("spec") or {}
    own = str((pod.get("metadata") or {}).get("namespace") or "default")
    return ((spec.get("affinity") or {}).get(kind) or {}), own


def required_terms(pod: Obj, kind: str) -> tuple[Term, ...]:
    """The pod's required terms of `kind` ("podAffinity" or "podAntiAffinity")."""
    block, own = _block(pod, kind)
    terms = (_term(t, own) for t in block.get("requiredDuringSchedulingIgnoredDuringExecution")
             or [])
    return tuple(t for t in terms if t is not None)


def preferred_terms(pod: Obj, kind: str) -> tuple[tuple[Term, int], ...]:
    """The pod's preferred terms of `kind`, each with its weight."""
    block, own = _block(pod, kind)
    out = []
    for w in block.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        term = _term(w.get("podAffinityTerm") or {}, own)
        if term is not None:
            out.append((term, int(w.get("weight") or 0)))
    return tuple(out)


def has_required_terms(pod: Obj) -> bool:
    aff = (pod.get("spec") or {}).get("affinity") or {}
    return any((aff.get(k) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
               for k in ("podAffinity", "podAntiAffinity"))


def has_terms(pod: Obj) -> bool:
    """Any inter-pod (anti-)affinity term, required or preferred: what filter or score read."""
    aff = (pod.get("spec") or {}).get("affinity") or {}
    return any((aff.get(k) or {}).get(f"{when}DuringSchedulingIgnoredDuringExecution")
               for k in ("podAffinity", "podAntiAffinity") for when in ("required", "preferred"))


@dataclass(frozen=True)
class AffinityState:
    """The PreFilter counts for one incoming pod (pure data; see check)."""

    affinity: tuple[Term, ...]
    anti_affinity: tuple[Term, ...]
    affinity_counts: Counter[Pair]
    anti_affinity_counts: Counter[Pair]
    existing_anti_affinity: Counter[Pair]
    matches_own_terms: bool
    # InterPodAffinity's score per topology pair (its PreScore topologyScore; see prefilter)
    preferred: Counter[Pair] = field(default_factory=Counter)

    @property
    def trivial(self) -> bool:
        return not (self.affinity or self.anti_affinity or self.existing_anti_affinity)


def prefilter(pod: Obj, bound: Iterable[tuple[Obj, Mapping[str, str]]]) -> AffinityState:
    """Counts over `bound`: each pod already on a node with that node's labels. Also the
    score's (`preferred`): for each pod already bound, in its node's topology pairs, the
    weights of the incoming pod's preferred affinity terms that select it (anti-affinity
    ones subtracted), and of the terms of its own that select the incoming pod: its
    preferred ones likewise, its required affinity ones with hardPodAffinityWeight 1
    (interpodaffinity/scoring.go processExistingPod)."""
    affinity = required_terms(pod, "podAffinity")
    anti = required_terms(pod, "podAntiAffinity")
    liked = preferred_terms(pod, "podAffinity")
    disliked = preferred_terms(pod, "podAntiAffinity")
    aff_counts: Counter[Pair] = Counter()
    anti_counts: Counter[Pair] = Counter()
    existing: Counter[Pair] = Counter()
    preferred: Counter[Pair] = Counter()

    def credit(term: Term, weight: int, labels: Mapping[str, str]) -> None:
        if term.topology_key in labels:
            preferred[(term.topology_key, labels[term.topology_key])] += weight

    for other, labels in bound:
        for t, w in liked:
            if t.selects(other):
                credit(t, w, labels)
        for t, w in disliked:
            if t.selects(other):
                credit(t, -w, labels)
        if has_terms(other):
            for t in required_terms(other, "podAffinity"):
                if t.selects(pod):
                    credit(t, HARD_POD_AFFINITY_WEIGHT, labels)
            for t, w in preferred_terms(other, "podAffinity"):
                if t.selects(pod):
                    credit(t, w, labels)
            for t, w in preferred_terms(other, "podAntiAffinity"):
                if t.selects(pod):
                    credit(t, -w, labels)
        if affinity and all(t.selects(other) for t in affinity):
            for t in affinity:
                if t.topology_key in labels:
                    aff_counts[(t.topology_key, labels[t.topology_key])] += 1
        for t in anti:
            if t.topology_key in labels and t.selects(other):
                anti_counts[(t.topology_key, labels[t.topology_key])] += 1
        if has_required_terms(other):
            for t in required_terms(other, "podAntiAffinity"):
                if t.topology_key in labels and t.selects(pod):
                    existing[(t.topology_key, labels[t.topology_key])] += 1
    return AffinityState(affinity, anti, aff_counts, anti_counts, existing,
                         bool(affinity) and all(t.selects(pod) for t in affinity),
                         Counter({k: v for k, v in preferred.items() if v}))


def refusal(state: AffinityState, node_labels: Mapping[str, str]) -> str | None:
    """The filter's failure text on a node with these labels, or None when it passes."""
    found = True
    for t in state.affinity:
        if t.topology_key not in node_labels:
            return AFFINITY_RULES  # every topology key must be on the node
        if state.affinity_counts[(t.topology_key, node_labels[t.topology_key])] <= 0:
            found = False
    # The first pod of a series with affinity to itself: nothing matches anywhere yet.
    if not found and not (not state.affinity_counts and state.matches_own_terms):
        return AFFINITY_RULES
    for t in state.anti_affinity:
        value = node_labels.get(t.topology_key)
        if value is not None and state.anti_affinity_counts[(t.topology_key, value)] > 0:
            return ANTI_AFFINITY_RULES
    if any(state.existing_anti_affinity[(k, v)] > 0 for k, v in node_labels.items()):
        return EXISTING_ANTI_AFFINITY
    return None


def bound_pods(pods: Iterable[Obj], nodes: Sequence[Obj]) -> list[tuple[Obj, Mapping[str, str]]]:
    """Each pod on a known node with that node's labels (what prefilter counts over)."""
    labels = {str((n.get("metadata") or {}).get("name")):
              (n.get("metadata") or {}).get("labels") or {} for n in nodes}
    out = []
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node in labels and (p.get("status") or {}).get("phase") not in ("Succeeded",
                                                                              "Failed"):
            out.append((p, labels[node]))
    return out
