"""Node lifecycle: the NoSchedule taints that mirror node conditions (TaintNodesByCondition).

node.kubernetes.io/not-ready while Ready is not True, node.kubernetes.io/unschedulable
while spec.unschedulable (kubernetes/kubernetes pkg/controller/nodelifecycle and
pkg/controller/nodelifecycle/scheduler). Heartbeat timeouts and NoExecute evictions
are not emulated.
"""

from __future__ import annotations

from typing import Any

from drainsafe.kube.objects import is_node_ready, rfc3339
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Obj, clone
from drainsafe.lab.controllers import Controller
from drainsafe.placement import NOT_READY_TAINT, UNSCHEDULABLE_TAINT

NODES = BY_KEY["nodes"]


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


class NodeLifecycleController(Controller):
    name = "nodelifecycle"
    watches = frozenset({"nodes"})

    def reconcile(self) -> float | None:
        now = rfc3339(self.store.clock())
        for node in list(self.store.items(NODES)):
            want = desired_taints(node, now)
            if want != ((node.get("spec") or {}).get("taints") or []):
                updated = clone(node)
                if want:
                    updated.setdefault("spec", {})["taints"] = want
                else:
                    updated.setdefault("spec", {}).pop("taints", None)
                self.store.update(NODES, updated)
        return None
