"""The soft taint a NodeMaintenance puts on its Pending nodes, so that replacements and
stand-ins land elsewhere than on a node it drains later.

As cluster-autoscaler marks a node it means to remove with a PreferNoSchedule taint,
DeletionCandidateOfClusterAutoscaler (kubernetes/autoscaler cluster-autoscaler/utils/
taints/taints.go, MarkDeletionCandidate; removed by CleanDeletionCandidate): a preference
for the scheduler (TaintToleration's score, drainsafe.placement.score), never a filter, so
nothing becomes Pending for it and no capacity is lost; the drain's room arithmetic still
counts the node's free room (drain.room filters on NoSchedule and NoExecute only). Unlike
a cordon, which would take the room away until the node's wave.

The taint is its own record: key drainsafe.io/maintenance-pending, value the
NodeMaintenance's name, on a node while it is Pending in that operation (taken off when the
node starts, when the operation ends, and when it is deleted); a leader that lost its place
reads it from the node and the status alone. A taint of that key with another value is
another operation's and is left alone.

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PENDING_TAINT = "drainsafe.io/maintenance-pending"


def pending_of(node: Mapping[str, Any]) -> str | None:
    """The NodeMaintenance whose pending taint the node carries, if any."""
    for t in (node.get("spec") or {}).get("taints") or []:
        if t.get("key") == PENDING_TAINT:
            return str(t.get("value") or "")
    return None


def pending_taints(node: Mapping[str, Any], maintenance: str, *, pending: bool
                   ) -> list[dict[str, Any]] | None:
    """The node's taints with this operation's pending taint on (`pending`) or off; None
    when they are so already (or another operation's taint holds the key)."""
    taints = [dict(t) for t in (node.get("spec") or {}).get("taints") or []]
    holder = pending_of(node)
    if pending:
        if holder is not None:
            return None
        return [*taints, {"key": PENDING_TAINT, "value": maintenance,
                          "effect": "PreferNoSchedule"}]
    if holder != maintenance:
        return None
    return [t for t in taints if t.get("key") != PENDING_TAINT]
