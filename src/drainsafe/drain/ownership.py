"""Who cordoned a node, when and why, and how far a drain got: node annotations.

A forgotten cordon is the seed's most expensive invisible failure ("the node reports Ready
and takes no work"), and no drain tool but draino records why a node was cordoned
(research drain-anchors.md, feature table). drainsafe writes these on the node together
with spec.unschedulable, in one patch, and reads them back for uncordon, audit and resume.
Pure helpers; the patches are sent by drain.execute.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

PREFIX = "drainsafe.io/"
CORDONED_BY = PREFIX + "cordoned-by"
CORDONED_AT = PREFIX + "cordoned-at"
REASON = PREFIX + "reason"
DEFAULT_REASON = "drainsafe drain"
"""The reason recorded when none is given; a re-run without --reason keeps the recorded one."""
WAS_UNSCHEDULABLE = PREFIX + "was-unschedulable"
PROGRESS = PREFIX + "drain-progress"
OWNED_KEYS = (CORDONED_BY, CORDONED_AT, REASON, WAS_UNSCHEDULABLE, PROGRESS)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_annotations(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("annotations") or {}


def is_cordoned(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def owned_by_drainsafe(node: Mapping[str, Any]) -> bool:
    """drainsafe owns the cordon when it set it (not when the node was cordoned already)."""
    ann = node_annotations(node)
    return CORDONED_BY in ann and ann.get(WAS_UNSCHEDULABLE) != "true"


@dataclass
class Progress:
    """The drain's record on the node: which pods were evicted (by UID) and the state."""

    state: str = "draining"  # draining | drained | failed | interrupted
    evicted: dict[str, str] = field(default_factory=dict)  # "ns/name" -> uid
    detail: str = ""
    updated: str = ""

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> Progress:
        raw = node_annotations(node).get(PROGRESS)
        if not raw:
            return cls()
        try:
            doc = json.loads(raw)
        except ValueError:
            return cls(detail="unreadable progress annotation")
        return cls(
            state=str(doc.get("state") or "draining"),
            evicted={str(k): str(v) for k, v in (doc.get("evicted") or {}).items()},
            detail=str(doc.get("detail") or ""),
            updated=str(doc.get("updated") or ""),
        )

    def to_json(self) -> str:
        return json.dumps(
            {"state": self.state, "evicted": self.evicted, "detail": self.detail,
             "updated": self.updated or now_rfc3339()},
            sort_keys=True,
        )


def cordon_patch(
    node: Mapping[str, Any], *, actor: str, reason: str, progress: Progress
) -> dict[str, Any]:
    """A merge patch that cordons and records ownership, guarded by resourceVersion.

    Including metadata.resourceVersion turns the merge patch into a compare-and-swap:
    a concurrent writer makes it fail with 409 instead of being overwritten.
    """
    meta = node.get("metadata") or {}
    ann = node_annotations(node)
    new: dict[str, str | None] = {PROGRESS: progress.to_json()}
    if CORDONED_BY not in ann:
        new.update({
            CORDONED_BY: actor,
            CORDONED_AT: now_rfc3339(),
            REASON: reason,
            WAS_UNSCHEDULABLE: "true" if is_cordoned(node) else "false",
        })
    elif reason != DEFAULT_REASON and ann.get(REASON) != reason:
        new[REASON] = reason  # a re-run with a new --reason says why it runs now
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": new},
        "spec": {"unschedulable": True},
    }


def progress_patch(progress: Progress) -> dict[str, Any]:
    return {"metadata": {"annotations": {PROGRESS: progress.to_json()}}}


def uncordon_patch(node: Mapping[str, Any]) -> dict[str, Any]:
    meta = node.get("metadata") or {}
    return {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "annotations": {k: None for k in OWNED_KEYS},
        },
        "spec": {"unschedulable": None},
    }


@dataclass(frozen=True)
class CordonRecord:
    node: str
    cordoned: bool
    owner: str  # "drainsafe: <actor>", "unknown (not drainsafe)", or ""
    since: str
    reason: str
    drain_state: str
    takes_work: bool
    pods: int
    daemon_pods: int


def audit_record(node: Mapping[str, Any], pods_on_node: int, daemon_pods: int) -> CordonRecord:
    ann = node_annotations(node)
    cordoned = is_cordoned(node)
    if CORDONED_BY in ann:
        owner = ann[CORDONED_BY]
        if ann.get(WAS_UNSCHEDULABLE) == "true":
            owner = f"unknown (already cordoned before drainsafe; drained by {owner})"
    else:
        owner = "unknown (no drainsafe record)" if cordoned else ""
    return CordonRecord(
        node=str((node.get("metadata") or {}).get("name")),
        cordoned=cordoned,
        owner=owner,
        since=ann.get(CORDONED_AT, ""),
        reason=ann.get(REASON, ""),
        drain_state=Progress.of(node).state if PROGRESS in ann else "",
        takes_work=not cordoned,
        pods=pods_on_node,
        daemon_pods=daemon_pods,
    )
