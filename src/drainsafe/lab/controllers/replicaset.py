"""ReplicaSet controller: keep spec.replicas active pods; report status.

After kubernetes/kubernetes pkg/controller/replicaset/replica_set.go (v1.31.0): active pods
are those neither finished nor terminating (so a terminating pod is already replaced while
it drains); at most burstReplicas (500) pods are created or deleted per pass; surplus pods
are chosen by `getPodsToDelete` (drainsafe.lab.controllers.ranking: ActivePodsWithRanks,
with the pod-deletion-cost annotation and the related pods of sibling ReplicaSets on the
same node) and deleted with a plain graceful DELETE (no PDB); availableReplicas counts pods
Ready for minReadySeconds (drainsafe.kube.objects.is_available, upstream IsPodAvailable).
Adoption of orphans by selector is not emulated: pods belong to the ReplicaSet that
created them.
"""

from __future__ import annotations

from typing import Any

from drainsafe.kube.objects import (
    available_since,
    controller_ref,
    is_active,
    is_available,
    is_ready,
)
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Obj, Store, clone
from drainsafe.lab.controllers import Controller
from drainsafe.lab.controllers.podstate import owned_by, owner_reference
from drainsafe.lab.controllers.ranking import pods_to_delete
from drainsafe.labels import SelectorError, from_label_selector

PODS = BY_KEY["pods"]
REPLICASETS = BY_KEY["apps/replicasets"]
BURST = 500  # pods created per pass at most (the real controller's burstReplicas)


def pods_of(store: Store, owner: Obj) -> list[Obj]:
    ns = owner["metadata"].get("namespace", "")
    out = []
    for res, dep_ns, name in store.dependents(owner["metadata"]["uid"]):
        if res != "pods":
            continue
        pod = store.peek(PODS, dep_ns, name)
        if pod is not None and dep_ns == ns and owned_by(pod, owner):
            out.append(pod)
    return out


def pod_from_template(owner: Obj, template: dict[str, Any], *,
                      generate_name: str) -> Obj:
    tmeta = template.get("metadata") or {}
    metadata: dict[str, Any] = {
        "generateName": generate_name,
        "namespace": owner["metadata"]["namespace"],
        "labels": dict(tmeta.get("labels") or {}),
        "ownerReferences": [owner_reference(owner)],
    }
    if tmeta.get("annotations"):
        metadata["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": clone(template.get("spec") or {})}


def related_pods(store: Store, rs: Obj) -> list[Obj]:
    """getIndirectlyRelatedPods: the pods selected by every ReplicaSet with the same
    controller as `rs` (none if `rs` has no controller), each pod once."""
    ref = controller_ref(rs)
    if ref is None:
        return []
    ns = rs["metadata"].get("namespace", "")
    seen: dict[str, Obj] = {}
    siblings = [o for o in store.items(REPLICASETS, ns)
                if (controller_ref(o) or {}).get("uid") == ref.get("uid")]
    pods = list(store.items(PODS, ns))
    for sibling in siblings:
        try:
            selector = from_label_selector((sibling.get("spec") or {}).get("selector"))
        except SelectorError:
            continue  # an invalid selector matches no pods
        for pod in pods:
            if selector.matches(pod["metadata"].get("labels")):
                seen.setdefault(pod["metadata"]["uid"], pod)
    return list(seen.values())


class ReplicaSetController(Controller):
    name = "replicaset"
    watches = frozenset({"apps/replicasets", "pods"})

    def reconcile(self) -> float | None:
        next_wake: float | None = None
        now = self.store.clock()
        for rs in list(self.store.items(REPLICASETS)):
            if rs["metadata"].get("deletionTimestamp"):
                continue
            delay = self.sync(rs, now)
            if delay is not None:
                next_wake = delay if next_wake is None else min(next_wake, delay)
        return next_wake

    def sync(self, rs: Obj, now: float) -> float | None:
        ns, name = rs["metadata"]["namespace"], rs["metadata"]["name"]
        spec = rs.get("spec") or {}
        want = int(spec.get("replicas", 1))
        pods = pods_of(self.store, rs)
        active = [p for p in pods if is_active(p)]
        diff = len(active) - want
        if diff < 0:
            template = spec.get("template") or {}
            for _ in range(min(-diff, BURST)):
                try:
                    self.store.create(PODS, pod_from_template(rs, template,
                                                              generate_name=f"{name}-"))
                except st.StatusError:
                    break  # e.g. the namespace is going away
        elif diff > 0:
            doomed = pods_to_delete(active, related_pods(self.store, rs), min(diff, BURST),
                                    now)
            for pod in doomed:
                try:
                    self.store.delete(PODS, ns, pod["metadata"]["name"])
                except st.StatusError:
                    continue
        pods = pods_of(self.store, rs)
        active = [p for p in pods if is_active(p)]
        min_ready = int(spec.get("minReadySeconds", 0))
        labels = from_label_selector({"matchLabels": (spec.get("template") or {})
                                      .get("metadata", {}).get("labels") or {}})
        available = 0
        next_wake: float | None = None
        for p in active:
            if is_available(p, min_ready, now):
                available += 1
                continue
            at = available_since(p, min_ready)
            if at is not None:
                next_wake = at - now if next_wake is None else min(next_wake, at - now)
        new_status = dict(rs.get("status") or {})
        new_status.update(
            replicas=len(active),
            fullyLabeledReplicas=sum(1 for p in active
                                     if labels.matches(p["metadata"].get("labels"))),
            readyReplicas=sum(1 for p in active if is_ready(p)),
            availableReplicas=available,
            observedGeneration=int(rs["metadata"].get("generation", 1)),
        )
        current = self.store.peek(REPLICASETS, ns, name)
        if current is not None and current.get("status") != new_status:
            updated = clone(current)
            updated["status"] = new_status
            self.store.update(REPLICASETS, updated, subresource="status")
        return next_wake
