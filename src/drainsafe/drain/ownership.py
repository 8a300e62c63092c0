"""Who cordoned a node, when and why, and how far a drain got: node annotations.

A forgotten cordon is an expensive invisible failure (the node reports Ready and takes no
work), and kubectl's cordon (kubectl pkg/drain/cordon.go) records nothing but
spec.unschedulable; among drain tools only draino annotates why. drainsafe writes these on
the node together
with spec.unschedulable, in one patch, and reads them back for uncordon, audit and resume.
The surge record (drainsafe.io/surge) does the same for a workload scaled up by a
surge-first drain. Pure helpers; the patches are sent by drain.cordon and drain.scale.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from drainsafe.kube.objects import rfc3339

PREFIX = "drainsafe.io/"
CORDONED_BY = PREFIX + "cordoned-by"
CORDONED_AT = PREFIX + "cordoned-at"
REASON = PREFIX + "reason"
DEFAULT_REASON = "drainsafe drain"
"""The reason recorded when none is given; a re-run without --reason keeps the recorded one."""
WAS_UNSCHEDULABLE = PREFIX + "was-unschedulable"
PROGRESS = PREFIX + "drain-progress"
CORDONED_FOR = PREFIX + "cordoned-for"
"""The operation that cordoned, as "NodeMaintenance/<name>"; absent for `drainsafe drain`.
Written with the rest of the record, so metrics and audit say whose cordon it is whatever
spec.reason says."""
OWNED_KEYS = (CORDONED_BY, CORDONED_AT, REASON, WAS_UNSCHEDULABLE, PROGRESS, CORDONED_FOR)
MAINTENANCE_KIND = "NodeMaintenance"


def node_annotations(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("annotations") or {}


def is_cordoned(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def maintenance_ref(name: str) -> str:
    """The CORDONED_FOR value a NodeMaintenance writes."""
    return f"{MAINTENANCE_KIND}/{name}"


def cordoned_for(node: Mapping[str, Any]) -> str:
    """The NodeMaintenance whose record the node carries, by name; "" for none."""
    kind, _, name = node_annotations(node).get(CORDONED_FOR, "").partition("/")
    return name if kind == MAINTENANCE_KIND else ""


def owned_by_drainsafe(node: Mapping[str, Any]) -> bool:
    """drainsafe owns the cordon when it set it (not when the node was cordoned already)."""
    ann = node_annotations(node)
    return CORDONED_BY in ann and ann.get(WAS_UNSCHEDULABLE) != "true"


# Where a node's drain is: queued (cordoned first with its fleet), draining, and how it
# ended. A rerun continues from any of them.
ProgressState = Literal["queued", "draining", "drained", "failed", "interrupted"]
PROGRESS_STATES: tuple[ProgressState, ...] = ("queued", "draining", "drained", "failed",
                                              "interrupted")


@dataclass
class Progress:
    """The drain's record on the node: which pods were evicted (by UID) and the state."""

    state: ProgressState = "draining"
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
            state=_state(doc.get("state")),
            evicted={str(k): str(v) for k, v in (doc.get("evicted") or {}).items()},
            detail=str(doc.get("detail") or ""),
            updated=str(doc.get("updated") or ""),
        )

    def to_json(self) -> str:
        return json.dumps(
            {"state": self.state, "evicted": self.evicted, "detail": self.detail,
             "updated": self.updated or rfc3339()},
            sort_keys=True,
        )


def _state(raw: Any) -> ProgressState:
    for state in PROGRESS_STATES:
        if raw == state:
            return state
    return "draining"  # absent (or not drainsafe's word): a drain that has not ended


def cordon_patch(
    node: Mapping[str, Any], *, actor: str, reason: str, progress: Progress,
    now: float | None = None, operation: str = "",
) -> dict[str, Any]:
    """A merge patch that cordons and records ownership, guarded by resourceVersion;
    `operation` (maintenance_ref) names the NodeMaintenance cordoning, if one is.

    Including metadata.resourceVersion turns the merge patch into a compare-and-swap:
    a concurrent writer makes it fail with 409 instead of being overwritten.
    """
    meta = node.get("metadata") or {}
    ann = node_annotations(node)
    new: dict[str, str | None] = {PROGRESS: progress.to_json()}
    if CORDONED_BY not in ann:
        new.update({
            CORDONED_BY: actor,
            CORDONED_AT: rfc3339(now),
            REASON: reason,
            WAS_UNSCHEDULABLE: "true" if is_cordoned(node) else "false",
        })
        if operation:
            new[CORDONED_FOR] = operation
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


# Who owns a node's cordon, as drainsafe's record tells: drainsafe; someone before
# drainsafe (the node was cordoned when drainsafe drained it); nobody it knows of (cordoned
# with no record: a forgotten cordon, perhaps); or no cordon at all.
CordonOwner = Literal["drainsafe", "before-drainsafe", "no-record", "none"]


@dataclass(frozen=True)
class CordonRecord:
    node: str
    cordoned: bool
    owner: str  # for people: the recorded actor, or why it is unknown; "" when none
    since: str
    reason: str
    drain_state: str
    takes_work: bool
    pods: int
    daemon_pods: int
    owned_by: CordonOwner = "none"

    @property
    def forgotten(self) -> bool:
        """Cordoned, and no record says drainsafe owns the cordon: worth a look."""
        return self.cordoned and self.owned_by in ("before-drainsafe", "no-record")


def audit_record(node: Mapping[str, Any], pods_on_node: int, daemon_pods: int) -> CordonRecord:
    ann = node_annotations(node)
    cordoned = is_cordoned(node)
    owned_by: CordonOwner
    if CORDONED_BY in ann:
        owner, owned_by = ann[CORDONED_BY], "drainsafe"
        if ann.get(WAS_UNSCHEDULABLE) == "true":
            owner = f"unknown (already cordoned before drainsafe; drained by {owner})"
            owned_by = "before-drainsafe"
    else:
        owner = "unknown (no drainsafe record)" if cordoned else ""
        owned_by = "no-record" if cordoned else "none"
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
        owned_by=owned_by,
    )


# -- the surge record on a workload ----------------------------------------------------------

SURGE = PREFIX + "surge"

@dataclass(frozen=True)
class SurgeKind:
    """Where a surgeable kind lives in the API, and how its scale is written."""

    api_version: str
    plural: str
    # The scale is written through the scale subresource (a custom resource's
    # spec.replicas, as the CRD's scale subresource maps it), not the object's spec.
    scale_subresource: bool = False
    # The eviction guard (drainsafe controller) surges this kind too, so a drain may find
    # the guard's record on it and wait for its restore.
    guarded: bool = True


# The kinds a surge record goes on: the workloads a drain scales up by their pods (or
# groups) on the node and back. A Deployment's surge pods replace the old ones; a
# StatefulSet's new ordinals stand in while each old pod is recreated under its own name; a
# LeaderWorkerSet's new groups stand in while each affected group is recreated whole
# (kubernetes-sigs/lws v0.10.0: the scale subresource is on .spec.replicas, in groups).
SURGE_KINDS: Mapping[str, SurgeKind] = {
    "Deployment": SurgeKind("apps/v1", "deployments"),
    "StatefulSet": SurgeKind("apps/v1", "statefulsets"),
    "LeaderWorkerSet": SurgeKind("leaderworkerset.x-k8s.io/v1", "leaderworkersets",
                                 scale_subresource=True),
}
GUARDED_KINDS: Mapping[str, SurgeKind] = {k: v for k, v in SURGE_KINDS.items() if v.guarded}


@dataclass(frozen=True)
class AutoscalerBounds:
    """The HorizontalPodAutoscaler that owns a workload's scale, and its bounds before."""

    name: str
    min_replicas: int | None  # None: the field was absent (the API defaults it to 1)
    max_replicas: int


@dataclass(frozen=True)
class SurgePart:
    """One node's part of a shared surge (a Deployment's, drain.sharedsurge): who joined,
    when, and the old pods on that node it still stands in for ("ns/name" -> uid). The
    part is as many replicas as it names pods: each accepted eviction takes its pod out
    of the part, in the same write that lowers the scale."""

    by: str = ""
    at: str = ""
    pods: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SurgeRecord:
    """What drainsafe changed on a workload to surge it, written on the workload before
    the change: who, when, for which node, the scale before (or the HPA's bounds before),
    and the old pods it surges for. A rerun, `drainsafe uncordon` and `drainsafe audit`
    read it back; the restore sets exactly these values again.

    `guard` says which tool owns the surge, in the same guarded write as the rest, so
    the two never take each other's: the eviction guard (drainsafe controller) restores
    only its own, a `drainsafe drain` waits for the guard's to be restored.

    Version 2 (a Deployment's shared surge, drain.sharedsurge) adds `parts`: several
    nodes of one fleet run (or one controller leader) hold parts of one surge, the scale
    being `replicas` plus every part's pods. `node`, `by` and `at` then name who started
    the record (its identity, kept while parts come and go) and `pods` every part's pods,
    so a reader of version 1 still finds a record for a node it knows. A version 1 record
    reads as one part (`holders`)."""

    node: str
    replicas: int
    by: str = ""
    at: str = ""
    autoscaler: AutoscalerBounds | None = None
    pods: Mapping[str, str] = field(default_factory=dict)  # "ns/name" -> uid
    guard: bool = False
    parts: Mapping[str, SurgePart] = field(default_factory=dict)  # node -> part (version 2)

    @property
    def holders(self) -> Mapping[str, SurgePart]:
        """The parts by node; a version 1 record is one part, its own node's."""
        if self.parts:
            return self.parts
        return {self.node: SurgePart(self.by, self.at, self.pods)}

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node the surge is held for, sorted."""
        return tuple(sorted(self.holders))

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> SurgeRecord | None:
        raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(SURGE)
        if not raw:
            return None
        try:
            doc = json.loads(raw)
            hpa = doc.get("autoscaler")
            parts = {str(n): SurgePart(by=str(p.get("by") or ""), at=str(p.get("at") or ""),
                                       pods=_pods(p.get("pods")))
                     for n, p in (doc.get("parts") or {}).items()}
            return cls(
                node=str(doc["node"]), replicas=int(doc["replicas"]), by=str(doc.get("by") or ""),
                at=str(doc.get("at") or ""),
                autoscaler=None if not hpa else AutoscalerBounds(
                    name=str(hpa["name"]),
                    min_replicas=None if hpa.get("minReplicas") is None
                    else int(hpa["minReplicas"]),
                    max_replicas=int(hpa["maxReplicas"])),
                pods=_pods(doc.get("pods")),
                guard=doc.get("guard") is True,
                parts=parts,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"unreadable {SURGE} annotation: {exc}") from exc

    def to_json(self) -> str:
        hpa = None if self.autoscaler is None else {
            "name": self.autoscaler.name, "minReplicas": self.autoscaler.min_replicas,
            "maxReplicas": self.autoscaler.max_replicas}
        pods = dict(self.pods)
        if self.parts:  # what a version 1 reader counts: every part's pods
            pods = {k: v for p in self.parts.values() for k, v in p.pods.items()}
        doc: dict[str, Any] = {"node": self.node, "replicas": self.replicas, "by": self.by,
                               "at": self.at or rfc3339(), "autoscaler": hpa, "pods": pods}
        if self.guard:
            doc["guard"] = True
        if self.parts:
            doc["version"] = 2
            doc["parts"] = {n: {"by": p.by, "at": p.at, "pods": dict(p.pods)}
                            for n, p in self.parts.items()}
        return json.dumps(doc, sort_keys=True)


def _pods(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (raw or {}).items()}


def guard_surged(obj: Mapping[str, Any] | None) -> bool:
    """The workload carries a surge record of the eviction guard's (an unreadable record
    is not the guard's: the drain's own write reports it)."""
    try:
        record = None if obj is None else SurgeRecord.of(obj)
    except ValueError:
        return False
    return record is not None and record.guard


def surge_record_patch(obj: Mapping[str, Any], record: SurgeRecord) -> dict[str, Any]:
    """Record the surge on the workload, guarded by resourceVersion (a concurrent writer,
    say a rollout, makes it a 409 and drainsafe decides again)."""
    meta = obj.get("metadata") or {}
    return {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                         "annotations": {SURGE: record.to_json()}}}


def surge_clear_patch(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                         "annotations": {SURGE: None}}}


@dataclass(frozen=True)
class SurgedWorkload:
    """For `drainsafe audit`: a workload left scaled up by an unfinished drain."""

    workload: str
    node: str
    replicas_now: int
    replicas_before: int
    autoscaler: str
    by: str
    since: str
