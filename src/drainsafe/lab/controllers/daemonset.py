"""DaemonSet controller: one pod per eligible node.

After kubernetes/kubernetes pkg/controller/daemon: a node is eligible when the pod
template's nodeSelector/affinity match it and its NoSchedule/NoExecute taints are
tolerated, counting the tolerations every daemon pod gets (not-ready, unreachable,
disk/memory/pid-pressure, unschedulable: so cordoned nodes keep their daemon pods, and
`kubectl drain` must skip them with --ignore-daemonsets); a pod already on a node stays
while its NoExecute taints are tolerated, since a NoSchedule taint (an unreachable or
not-ready node's) only keeps new ones off (NodeShouldRunDaemonPod). Pods are pinned with required
node affinity on metadata.name and bound by the scheduler, as upstream does. A template
change replaces outdated pods one node at a time while fewer than maxUnavailable are
unavailable (RollingUpdate); OnDelete leaves them.
"""

from __future__ import annotations

import contextlib
from typing import Any

from drainsafe import placement
from drainsafe.kube.objects import available_since, is_active, is_available, is_ready
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Obj, clone
from drainsafe.lab.controllers import Controller
from drainsafe.lab.controllers.deployment import template_hash
from drainsafe.lab.controllers.replicaset import pod_from_template, pods_of

PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
DAEMONSETS = BY_KEY["apps/daemonsets"]
REVISION_LABEL = "controller-revision-hash"

DAEMON_TOLERATIONS: tuple[dict[str, Any], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists",
     "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)


def daemon_pod_spec(template_spec: dict[str, Any], node: str) -> dict[str, Any]:
    spec = clone(template_spec)
    tolerations = spec.setdefault("tolerations", [])
    for t in DAEMON_TOLERATIONS:
        if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"]
                   for x in tolerations):
            tolerations.append(dict(t))
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [{
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    return spec  # type: ignore[no-any-return]


def should_run(template_spec: dict[str, Any], node: Obj) -> bool:
    spec = daemon_pod_spec(template_spec, node["metadata"]["name"])
    if not placement.matches_node_affinity(spec, node):
        return False
    return placement.untolerated_taint(spec.get("tolerations") or [], node) is None


def should_continue_running(template_spec: dict[str, Any], node: Obj) -> bool:
    """A daemon pod already on the node stays unless a NoExecute taint is untolerated:
    a NoSchedule taint (an unreachable node's, say) only stops new ones
    (NodeShouldRunDaemonPod's second result, pkg/controller/daemon, v1.33)."""
    spec = daemon_pod_spec(template_spec, node["metadata"]["name"])
    if not placement.matches_node_affinity(spec, node):
        return False
    tolerations = spec.get("tolerations") or []
    return all(placement.tolerates(tolerations, t)
               for t in (node.get("spec") or {}).get("taints") or []
               if t.get("effect") == "NoExecute")


def _node_of(pod: Obj) -> str | None:
    if pod.get("spec", {}).get("nodeName"):
        return str(pod["spec"]["nodeName"])
    terms = (((pod.get("spec", {}).get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms") or []
    for term in terms:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("values"):
                return str(f["values"][0])
    return None


class DaemonSetController(Controller):
    name = "daemonset"
    watches = frozenset({"apps/daemonsets", "pods", "nodes"})

    def reconcile(self) -> float | None:
        nodes = sorted(self.store.items(NODES), key=lambda n: str(n["metadata"]["name"]))
        next_wake: float | None = None
        for ds in list(self.store.items(DAEMONSETS)):
            if ds["metadata"].get("deletionTimestamp"):
                continue
            delay = self.sync(ds, nodes)
            if delay is not None:
                next_wake = delay if next_wake is None else min(next_wake, delay)
        return next_wake

    def sync(self, ds: Obj, nodes: list[Obj]) -> float | None:
        ns, name = ds["metadata"]["namespace"], ds["metadata"]["name"]
        spec = ds.get("spec") or {}
        template = spec.get("template") or {}
        tspec = template.get("spec") or {}
        rev = template_hash(template)
        by_node: dict[str, list[Obj]] = {}
        for p in pods_of(self.store, ds):
            if is_active(p):
                by_node.setdefault(_node_of(p) or "", []).append(p)
        wanted = {n["metadata"]["name"] for n in nodes if should_run(tspec, n)}
        kept = wanted | {n["metadata"]["name"] for n in nodes
                         if should_continue_running(tspec, n)}
        rolling = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") \
            == "RollingUpdate"
        max_unavailable = 1
        if rolling:
            mu = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get(
                "maxUnavailable", 1)
            from drainsafe import pdb as pdbmath

            max_unavailable = max(pdbmath.scaled_value(mu, len(wanted), round_up=True), 1)
        for node_name in sorted(wanted):
            pods = by_node.get(node_name, [])
            if not pods:
                pod = pod_from_template(ds, template, generate_name=f"{name}-")
                pod["metadata"]["labels"][REVISION_LABEL] = rev
                pod["spec"] = daemon_pod_spec(tspec, node_name)
                try:
                    self.store.create(PODS, pod)
                except st.StatusError:
                    continue
            for extra in pods[1:]:
                self._delete(ns, extra)
        for node_name, pods in by_node.items():
            if node_name not in kept:
                for p in pods:
                    self._delete(ns, p)
        if rolling:
            current = {n: ps for n, ps in by_node.items() if n in wanted}
            unavailable = sum(1 for n in wanted
                              if not any(is_ready(p) for p in current.get(n, [])))
            for node_name in sorted(current):
                if unavailable >= max_unavailable:
                    break
                outdated = [p for p in current[node_name]
                            if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) != rev]
                if outdated:
                    for p in outdated:
                        self._delete(ns, p)
                    unavailable += 1
        return self._status(ds, wanted, rev)

    def _delete(self, ns: str, pod: Obj) -> None:
        with contextlib.suppress(st.StatusError):
            self.store.delete(PODS, ns, pod["metadata"]["name"])

    def _status(self, ds: Obj, wanted: set[str], rev: str) -> float | None:
        now = self.store.clock()
        min_ready = int((ds.get("spec") or {}).get("minReadySeconds", 0))
        scheduled = ready = available = updated = misscheduled = 0
        next_wake: float | None = None
        for p in pods_of(self.store, ds):
            if not is_active(p):
                continue
            node = _node_of(p)
            if node not in wanted:
                misscheduled += 1
                continue
            scheduled += 1
            if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == rev:
                updated += 1
            if is_ready(p):
                ready += 1
                at = available_since(p, min_ready)
                if is_available(p, min_ready, now):
                    available += 1
                elif at is not None:
                    next_wake = at - now if next_wake is None else min(next_wake, at - now)
        status = {
            "currentNumberScheduled": scheduled,
            "numberMisscheduled": misscheduled,
            "desiredNumberScheduled": len(wanted),
            "numberReady": ready,
            "observedGeneration": int(ds["metadata"].get("generation", 1)),
            "updatedNumberScheduled": updated,
            "numberAvailable": available,
            "numberUnavailable": max(len(wanted) - available, 0),
        }
        for k in ("numberAvailable", "numberUnavailable", "updatedNumberScheduled"):
            if status[k] == 0:
                status.pop(k)
        current = self.store.peek(DAEMONSETS, ds["metadata"]["namespace"],
                                  ds["metadata"]["name"])
        if current is not None and current.get("status") != status:
            obj = clone(current)
            obj["status"] = status
            self.store.update(DAEMONSETS, obj, subresource="status")
        return next_wake
