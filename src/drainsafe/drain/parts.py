"""A shared surge's arithmetic and rules (issue 30): pure functions of the record.

Several nodes of one fleet run (or one NodeMaintenance leader) hold parts of one
Deployment's surge at once (drain.ownership.SurgeRecord version 2, `parts`); the scale is
the recorded replicas plus every part's pods, written with the record in one guarded patch
(drain.scale.join_shared, lower_shared). The rules, as the simulator measured them
(drainsafe.simulate.surgelock.SharedSurges, docs/simulate.md "shared surge"):

- join on room: a node joins a surge others hold only when its new pods fit now; else it
  waits until a part leaves. Plain sharing wedges: holders' evictions wait on each other's
  unplaced new pods. A lone holder surges as before (an Unschedulable new pod takes its
  surge back).
- the gate: an old pod is evicted only while the workload's Available pods minus that one
  stay at or above the recorded replicas (desired), so capacity never goes below desired
  whichever holder evicts. Safe only with one decider per workload deciding each eviction
  in turn: one process, under the workload's lock (drain.sharedsurge).
"""

from __future__ import annotations

from collections.abc import Collection

from drainsafe.drain.ownership import SurgePart, SurgeRecord


def surged(record: SurgeRecord) -> int:
    """Replicas above the recorded scale: every part's pods."""
    return sum(len(p.pods) for p in record.holders.values())


def target(record: SurgeRecord) -> int:
    """The scale while `record` is on the workload."""
    return record.replicas + surged(record)


def with_part(record: SurgeRecord, node: str, part: SurgePart) -> SurgeRecord:
    """The record (a version 1 record becomes one part) with `node`'s part set to `part`."""
    # A part that names no pod holds nothing (a version 1 record taken back is one).
    parts = {n: p for n, p in {**record.holders, node: part}.items() if p.pods}
    return _with_parts(record, parts)


def without_pods(record: SurgeRecord, node: str, pods: Collection[str]) -> SurgeRecord | None:
    """`pods` out of `node`'s part; the part out once it names none; None once no part is
    left (the record comes off and the recorded scale goes back)."""
    parts = dict(record.holders)
    part = parts.get(node)
    if part is not None:
        left = {k: v for k, v in part.pods.items() if k not in pods}
        if left:
            parts[node] = SurgePart(part.by, part.at, left)
        else:
            del parts[node]
    if not parts:
        return None
    return _with_parts(record, parts)


def _with_parts(record: SurgeRecord, parts: dict[str, SurgePart]) -> SurgeRecord:
    # `pods`: every part's, as a version 1 reader (the eviction guard's view) reads them.
    return SurgeRecord(node=record.node, replicas=record.replicas, by=record.by,
                       at=record.at, autoscaler=record.autoscaler, guard=record.guard,
                       pods={k: v for p in parts.values() for k, v in p.pods.items()},
                       parts=parts)


def may_join(others: int, fits: bool) -> bool:
    """Join now: alone, or with room for the joiner's new pods (and the holders' still
    unplaced ones) now."""
    return others == 0 or fits


def may_evict(available: int, base: int, *, serving: bool) -> bool:
    """The gate: evicting this old pod (`serving`: it is one of the `available`) leaves
    the workload at or above `base`."""
    return available - (1 if serving else 0) >= base
