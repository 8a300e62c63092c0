"""Node lifecycle: the NoSchedule taints that mirror node conditions (TaintNodesByCondition),
and the pods of a node that stops being Ready marked not Ready.

node.kubernetes.io/not-ready while Ready is not True, node.kubernetes.io/unschedulable
while spec.unschedulable (kubernetes/kubernetes pkg/controller/nodelifecycle and
pkg/controller/nodelifecycle/scheduler). When a node's Ready condition leaves True,
monitorNodeHealth calls MarkPodsNotReady (pkg/controller/util/node/controller_utils.go,
read in its contextual-logging form, v1.28 and later): each pod bound to it gets its
Ready condition set to False (lastTransitionTime now, ContainersReady untouched) through
the status subresource, so endpoints drop pods whose kubelet can no longer report them (a
rebooting node's, lab.node.reboot). Heartbeat timeouts and NoExecute evictions are not emulated.
"""

from __future__ import annotations

from typing import Any

from drainsafe.kube.objects import condition, is_node_ready, rfc3339
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.status import StatusError
from drainsafe.lab.apiserver.store import Obj, Store, clone
from drainsafe.lab.controllers import Controller
from drainsafe.placement import NOT_READY_TAINT, UNSCHEDULABLE_TAINT

NODES = BY_KEY["nodes"]
PODS = BY_KEY["pods"]


def desired_taints(node: Obj, now: str) -> list[dict[str, Any]]:
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or []
              if t.get("key") not in (NOT_READY_TAINT, UNSCHEDULABLE_TAINT)]
    current = {t.get("key"): t for t in spec.get("taints") or []}
    if not is_node_ready(node):
        taints.append(current.get(NOT_READY_TAINT) or
                      {"key": NOT_READY_TAINT, "effect": "NoSchedule", "timeAdded": now})
    if spec.get("unschedulable"):
        taints.append(current.get(UNSCHEDULABLE_TAINT) or
                      {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule", "timeAdded": now})
    return taints


def marked_not_ready(pod: Obj, now: str) -> Obj | None:
    """The pod with its Ready condition False (MarkPodsNotReady), or None if it is so."""
    ready = condition(pod, "Ready")
    if ready is None or ready.get("status") == "False":
        return None
    updated: Obj = clone(pod)
    updated["status"]["conditions"] = [
        {**c, "status": "False", "lastTransitionTime": now} if c == ready else c
        for c in pod["status"]["conditions"]]
    return updated


class NodeLifecycleController(Controller):
    name = "nodelifecycle"
    watches = frozenset({"nodes"})

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._ready: dict[str, bool] = {}  # node -> Ready when last observed

    def reconcile(self) -> float | None:
        now = rfc3339(self.store.clock())
        nodes = list(self.store.items(NODES))
        left = [n["metadata"]["name"] for n in nodes
                if not is_node_ready(n) and self._ready.get(n["metadata"]["name"], False)]
        self._ready = {n["metadata"]["name"]: is_node_ready(n) for n in nodes}
        if left:
            self._mark_pods_not_ready(set(left), now)
        for node in nodes:
            want = desired_taints(node, now)
            if want != ((node.get("spec") or {}).get("taints") or []):
                updated = clone(node)
                if want:
                    updated.setdefault("spec", {})["taints"] = want
                else:
                    updated.setdefault("spec", {}).pop("taints", None)
                self.store.update(NODES, updated)
        return None

    def _mark_pods_not_ready(self, nodes: set[str], now: str) -> None:
        for pod in list(self.store.items(PODS)):
            if (pod.get("spec") or {}).get("nodeName") not in nodes:
                continue
            updated = marked_not_ready(pod, now)
            if updated is not None:
                try:
                    self.store.update(PODS, updated, subresource="status")
                except StatusError:
                    continue  # gone meanwhile, as upstream skips a NotFound
