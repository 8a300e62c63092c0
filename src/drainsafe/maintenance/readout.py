"""What a person reads of a NodeMaintenance: its conditions, its node table, its Events.

`kubectl describe` of a custom resource prints the object's fields (kubectl
pkg/describe/describe.go genericDescriber: printUnstructuredContent, keys sorted, each
item of a list of objects as its sorted "Key: value" lines with nothing between items, a
list of strings one line each) and then the Events whose involvedObject is the object. So:

- `status.nodeTable`: the per-node table as lines (header first), padded here so its
  columns line up: NODE, STATE, WAVE, STARTED, FINISHED, REASON, and WAITING FOR / DETAIL
  (what a node in a waiting state waits for, or the message of a failure or deferral).
  status.nodes[] stays the structured form tools read.
- `status.conditions`: Progressing (True while nodes are pending or in progress; False
  with reason Paused, Succeeded or Failed), Succeeded, Failed; each kept with its
  lastTransitionTime until its status changes, as apimachinery pkg/api/meta/conditions.go
  SetStatusCondition does.
- Events: derived from the change between the status read and the status written
  (`transition_events`), so each transition written gives its Event once, whichever
  leader writes it.

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from drainsafe.maintenance.capacity import from_status
from drainsafe.maintenance.progress import NodeProgress, read_nodes
from drainsafe.maintenance.reasons import EventReason

EventType = Literal["Normal", "Warning"]
TABLE_COLUMNS = ("NODE", "STATE", "WAVE", "STARTED", "FINISHED", "REASON",
                 "WAITING FOR / DETAIL")
DETAIL_MAX = 100


@dataclass(frozen=True)
class OperationEvent:
    type: EventType
    reason: EventReason
    message: str


def waiting_for(p: NodeProgress, *, name: str, uncordon: str, mark: str) -> str:
    """What the node waits for in its state, or the detail of how it ended."""
    if p.message:
        return p.message
    if p.state == "Pending":
        return "its wave (maxParallelNodes, maxUnavailable)"
    if p.state == "Cordoned":
        return "the cordon, then the drain"
    if p.state == "Draining":
        return "the drain (stand-ins Ready, then evictions)"
    if p.state == "AwaitingMaintenance":
        return f"the maintained mark: {mark}"
    if p.state == "Drained":
        return "left cordoned (uncordon: Never)" if uncordon == "Never" else "the uncordon"
    return ""


def node_table(nodes: Iterable[NodeProgress], *, name: str, uncordon: str,
               mark: str) -> list[str]:
    rows = [TABLE_COLUMNS] + [
        (p.name, p.state, str(p.wave) if p.wave else "-", p.started or "-",
         p.finished or "-", p.reason or "-",
         waiting_for(p, name=name, uncordon=uncordon, mark=mark)[:DETAIL_MAX] or "-")
        for p in nodes]
    widths = [max(len(r[i]) for r in rows) for i in range(len(TABLE_COLUMNS) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]])
            for r in rows]


def _wanted(type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "status": "True" if status else "False", "reason": reason,
            "message": message}


def wanted_conditions(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conditions the status's phase and counts call for (no times yet)."""
    phase = status.get("phase") or "Pending"
    done, total = int(status.get("done") or 0), int(status.get("total") or 0)
    failed = int(status.get("failed") or 0)
    counts = f"{done} of {total} nodes done, {failed} failed"
    earlier = {c.get("type"): c for c in status.get("conditions") or []}
    if phase == "Failed":
        # an invalid spec or no node: the reason the reconciler wrote with it
        cause = earlier.get("Failed") or {}
        if cause.get("status") != "True":
            cause = {}
        reason = str(cause.get("reason") or "NodeFailed")
        message = str(cause.get("message") or counts)
        return [_wanted("Progressing", False, "Failed", message),
                _wanted("Succeeded", False, reason, message),
                _wanted("Failed", True, reason, message)]
    if phase == "Succeeded":
        return [_wanted("Progressing", False, "Succeeded", counts),
                _wanted("Succeeded", True, "AllNodesDone", counts),
                _wanted("Failed", False, "AllNodesDone", counts)]
    progressing = phase in ("Pending", "Running")
    reason = {"Pending": "Pending", "Running": "NodesInProgress"}.get(phase, "Paused")
    return [_wanted("Progressing", progressing, reason, counts),
            _wanted("Succeeded", False, reason, counts),
            _wanted("Failed", False, reason, counts)]


def set_conditions(earlier: Sequence[Mapping[str, Any]], wanted: Iterable[dict[str, Any]],
                   *, now: str, generation: int) -> list[dict[str, Any]]:
    """SetStatusCondition for each wanted one: lastTransitionTime kept unless the status
    changed; conditions of other types kept as they are."""
    by_type = {str(c.get("type")): dict(c) for c in earlier}
    for want in wanted:
        old = by_type.get(want["type"])
        since = old.get("lastTransitionTime") if old and old.get("status") == want["status"] \
            else now
        by_type[want["type"]] = {**want, "lastTransitionTime": since or now,
                                 "observedGeneration": generation}
    return list(by_type.values())


def with_readout(status: Mapping[str, Any], *, name: str, uncordon: str, mark: str,
                 now: str, generation: int) -> dict[str, Any]:
    """The status to write, with its node table and conditions brought up to date."""
    out = dict(status)
    out["nodeTable"] = node_table(read_nodes(status).values(), name=name, uncordon=uncordon,
                                  mark=mark)
    out["conditions"] = set_conditions(status.get("conditions") or [],
                                       wanted_conditions(status), now=now,
                                       generation=generation)
    return out


def _node_events(old: NodeProgress | None, new: NodeProgress, *, name: str, uncordon: str,
                 mark: str) -> list[OperationEvent]:
    if old is not None and (old.state, old.reason) == (new.state, new.reason):
        return []
    n, s = new.name, new.state
    if s == "Cordoned":
        return [OperationEvent("Normal", "NodeStarted",
                               f"{n}: wave {new.wave} started (cordon, then drain)")]
    if s == "Pending" and new.reason == "Deferred":
        return [OperationEvent("Normal", "NodeDeferred",
                               f"{n}: deferred, cordon given back, retried later and alone: "
                               f"{new.message}")]
    if s == "Drained":
        out = [OperationEvent("Normal", "NodeDrained", f"{n}: drained")]
        if uncordon == "Never":
            out.append(OperationEvent("Normal", "NodeLeftCordoned",
                                      f"{n}: left cordoned (uncordon: Never)"))
        return out
    if s == "AwaitingMaintenance":
        return [OperationEvent("Normal", "NodeDrained", f"{n}: drained"),
                OperationEvent("Normal", "NodeAwaitingMaintenance",
                               f"{n}: cordoned until marked maintained ({mark})")]
    if s == "Uncordoned":
        return [OperationEvent("Normal", "NodeUncordoned", f"{n}: uncordoned, done")]
    if s == "Failed":
        return [OperationEvent("Warning", "NodeFailed",
                               f"{n}: {new.reason}: {new.message}".rstrip(": "))]
    return []


def transition_events(old: Mapping[str, Any], new: Mapping[str, Any], *, name: str,
                      uncordon: str, mark: str) -> list[OperationEvent]:
    """The Events for the change from the status `old` to `new`: per node, then the
    operation's phase, then a new lowest capacity below desired."""
    before = read_nodes(old)
    out = [e for p in read_nodes(new).values()
           for e in _node_events(before.get(p.name), p, name=name, uncordon=uncordon,
                                 mark=mark)]
    was, phase = old.get("phase"), new.get("phase")
    done = f"{new.get('done', 0)} of {new.get('total', 0)} nodes done"
    if phase != was:
        if phase == "Paused":
            out.append(OperationEvent("Normal", "Paused",
                                      f"paused: no new node starts ({done})"))
        elif was == "Paused" and phase in ("Pending", "Running"):
            out.append(OperationEvent("Normal", "Resumed", f"resumed ({done})"))
        elif phase == "Succeeded":
            out.append(OperationEvent("Normal", "Succeeded", f"succeeded: {done}"))
        elif phase == "Failed":
            failed: Mapping[str, Any] = next((c for c in new.get("conditions") or []
                                              if c.get("type") == "Failed"), {})
            why = failed.get("message") or f"{done}, {new.get('failed', 0)} failed"
            out.append(OperationEvent("Warning", "Failed", f"failed: {why}"))
    low, earlier = from_status(new), from_status(old)
    if low is not None and low.percent < 100 and (
            earlier is None or low.fraction < earlier.fraction):
        out.append(OperationEvent(
            "Warning", "CapacityBelowDesired",
            f"{low.workload}: {low.ready}/{low.desired} {low.unit} Ready "
            f"({low.percent}%) during the drain of {low.node}"))
    return out
