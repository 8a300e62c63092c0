"""Disruption controller: PodDisruptionBudget status from pods and their controllers.

After kubernetes/kubernetes pkg/controller/disruption/disruption.go (trySync,
getExpectedPodCount, countHealthyPods, buildDisruptedPodMap, updatePdbStatus) with the
arithmetic in drainsafe.pdb: expected pods come from the owning controllers' scale
(a ReplicaSet owned by a Deployment counts the Deployment's replicas; a StatefulSet
counts its own spec.replicas, getExpectedScale's finder getPodStatefulSet) for
maxUnavailable and percentage minAvailable; healthy pods are Ready, not terminating and not in
disruptedPods; disruptedPods entries expire after 2 minutes (DeletionTimeout) or when
the pod is gone or terminating. A budget whose pods have no scalable controller gets
disruptionsAllowed 0 and a SyncFailed condition (the controller's failSafe).
"""

from __future__ import annotations

from typing import Any

from drainsafe import pdb as pdbmath
from drainsafe.kube.objects import controller_ref, is_ready, is_terminating, parse_time, rfc3339
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Obj, clone
from drainsafe.lab.controllers import Controller
from drainsafe.lab.controllers.podstate import set_condition
from drainsafe.labels import SelectorError, from_label_selector

PODS = BY_KEY["pods"]
PDBS = BY_KEY["policy/poddisruptionbudgets"]
REPLICASETS = BY_KEY["apps/replicasets"]
DEPLOYMENTS = BY_KEY["apps/deployments"]
STATEFULSETS = BY_KEY["apps/statefulsets"]
DELETION_TIMEOUT = 120.0


class DisruptionController(Controller):
    name = "disruption"
    watches = frozenset({"pods", "policy/poddisruptionbudgets", "apps/replicasets",
                         "apps/deployments", "apps/statefulsets"})

    def reconcile(self) -> float | None:
        next_wake: float | None = None
        for budget in list(self.store.items(PDBS)):
            delay = self.sync(budget)
            if delay is not None:
                next_wake = delay if next_wake is None else min(next_wake, delay)
        return next_wake

    def _expected_scale(self, pods: list[Obj], ns: str) -> int | None:
        seen: dict[str, int] = {}
        for pod in pods:
            ref = controller_ref(pod)
            if ref is None:
                return None
            if ref.get("kind") == "ReplicaSet":
                rs = self.store.peek(REPLICASETS, ns, str(ref.get("name")))
                if rs is None or rs["metadata"]["uid"] != ref.get("uid"):
                    return None
                owner = controller_ref(rs)
                if owner is not None and owner.get("kind") == "Deployment":
                    d = self.store.peek(DEPLOYMENTS, ns, str(owner.get("name")))
                    if d is None:
                        return None
                    seen[d["metadata"]["uid"]] = int(d["spec"].get("replicas", 1))
                else:
                    seen[rs["metadata"]["uid"]] = int(rs["spec"].get("replicas", 1))
            elif ref.get("kind") == "StatefulSet":
                sts = self.store.peek(STATEFULSETS, ns, str(ref.get("name")))
                if sts is None or sts["metadata"]["uid"] != ref.get("uid"):
                    return None
                seen[sts["metadata"]["uid"]] = int(sts["spec"].get("replicas", 1))
            else:
                return None  # only ReplicaSet/Deployment/StatefulSet scale is emulated
        return sum(seen.values())

    def sync(self, budget: Obj) -> float | None:
        ns = budget["metadata"]["namespace"]
        now = self.store.clock()
        spec = budget.get("spec") or {}
        try:
            selector = from_label_selector(spec.get("selector"))
            pspec = pdbmath.PdbSpec.from_manifest(spec)
        except (SelectorError, pdbmath.BudgetSpecError):
            return None
        pods = [] if selector.empty else [
            p for p in self.store.items(PODS, ns)
            if selector.matches(p["metadata"].get("labels"))]
        status = clone(budget.get("status") or {})
        # buildDisruptedPodMap
        by_name = {p["metadata"]["name"]: p for p in pods}
        disrupted: dict[str, str] = {}
        next_wake: float | None = None
        for pod_name, when in (status.get("disruptedPods") or {}).items():
            pod = by_name.get(pod_name)
            if pod is None or is_terminating(pod):
                continue
            expires = (parse_time(when) or 0.0) + DELETION_TIMEOUT
            if expires <= now:
                continue
            disrupted[pod_name] = when
            next_wake = expires - now if next_wake is None else min(next_wake, expires - now)
        healthy = sum(1 for p in pods if not is_terminating(p)
                      and p["metadata"]["name"] not in disrupted and is_ready(p))
        stamp = rfc3339(now)
        generation = int(budget["metadata"].get("generation", 1))
        scale = self._expected_scale(pods, ns) if pspec.uses_scale else len(pods)
        new: dict[str, Any]
        if scale is None:
            new = {"observedGeneration": generation, "disruptionsAllowed": 0,
                   "currentHealthy": healthy, "desiredHealthy": 0, "expectedPods": 0}
            cond = {"type": "DisruptionAllowed", "status": "False", "reason": "SyncFailed",
                    "message": "found no controllers for a pod the budget selects (the lab "
                               "emulates Deployment, ReplicaSet and StatefulSet scale "
                               "only)"}
        else:
            result = pdbmath.status(pspec, expected_scale=scale, matched_pods=len(pods),
                                    current_healthy=healthy)
            new = {"observedGeneration": generation,
                   "disruptionsAllowed": result.disruptions_allowed,
                   "currentHealthy": result.current_healthy,
                   "desiredHealthy": result.desired_healthy,
                   "expectedPods": result.expected_pods}
            cond = ({"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
                     "message": ""} if result.disruptions_allowed > 0 else
                    {"type": "DisruptionAllowed", "status": "False",
                     "reason": "InsufficientPods", "message": ""})
        if disrupted:
            new["disruptedPods"] = disrupted
        new["conditions"] = set_condition(status.get("conditions") or [], cond, stamp)
        if new != budget.get("status"):
            updated = clone(budget)
            updated["status"] = new
            self.store.update(PDBS, updated, subresource="status")
        return next_wake
