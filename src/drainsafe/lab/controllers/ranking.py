"""Which pods a ReplicaSet deletes first when it scales down: a pure function of plain data.

After kubernetes/kubernetes at v1.31.0:
- pkg/controller/replicaset/replica_set.go `getPodsToDelete`: when only some of the active
  pods go, rank each by `getPodsRankedByRelatedPodsOnSameNode` and sort with
  `controller.ActivePodsWithRanks`; the first `diff` are deleted. The rank of a pod is the
  number of *active related pods* on its node, related pods being those selected by any
  ReplicaSet with the same controller (`getIndirectlyRelatedPods`; a Deployment's old and
  new ReplicaSets count together). A ReplicaSet without a controller has no related pods,
  so every rank is 0. The pod itself counts when it is active.
- pkg/controller/controller_utils.go `ActivePodsWithRanks.Less`, rules in turn:
  1. unassigned before assigned;
  2. Pending < Unknown < Running (any other phase sorts with Pending);
  3. not Ready before Ready;
  4. lower `controller.kubernetes.io/pod-deletion-cost` first (feature PodDeletionCost,
     beta and on by default since 1.22; the value is read as
     pkg/apis/core/helper `GetDeletionCostFromPodAnnotations` does: an int32 without "+"
     or leading zeros, anything else counts as 0);
  5. higher rank (more related pods on the same node) first;
  6. both Ready: Ready more recently first;
  7. more restarts (of the container that restarted most) first;
  8. created more recently first.
  In 6 and 8 a missing time sorts first, and times are compared as log2 buckets of the
  nanoseconds since "now" (LogarithmicScaleDown, GA and locked on in v1.31); two different
  times in the same bucket are ordered by pod UID, a pseudo-random order. Equal times fall
  through to the next rule.

What this means for a surge-then-restore drain: after scaling up by k and back down by k,
a surge pod that is not yet Ready (or still Pending, or unscheduled) is removed before any
Ready pod, whatever its cost; among Ready pods a lower deletion cost wins over everything
after rule 3, and without a cost the pod that became Ready most recently (the surge pod)
goes first only when its Ready time falls in a younger log2 bucket than the others'; Ready
within the same bucket (a few seconds apart, seconds to minutes after the others became
Ready), the UID decides.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from drainsafe.kube.objects import condition, is_active, is_ready, parse_time
from drainsafe.lab.apiserver.store import Obj

POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}
_INT32 = (-(2**31), 2**31 - 1)
_VALID_FIRST = re.compile(r"-|0$|[1-9]")
_DECIMAL = re.compile(r"[-+]?[0-9]+", re.ASCII)


def deletion_cost(annotations: dict[str, str] | None) -> int:
    """GetDeletionCostFromPodAnnotations: the cost, or 0 if unset or not a valid int32."""
    value = (annotations or {}).get(POD_DELETION_COST)
    # validFirstDigit rejects "+10" and "008"; strconv.ParseInt(value, 10, 32) the rest
    if value is None or not _VALID_FIRST.match(value) or not _DECIMAL.fullmatch(value):
        return 0
    cost = int(value)
    return cost if _INT32[0] <= cost <= _INT32[1] else 0


@dataclass(frozen=True)
class RankedPod:
    """What ActivePodsWithRanks.Less reads off a pod, plus its rank."""

    name: str
    uid: str
    node: str
    phase: str
    ready: bool
    ready_since: float | None  # Ready condition's lastTransitionTime when Ready
    cost: int
    restarts: int  # the highest restartCount of its containers
    created: float | None
    rank: int = 0

    @classmethod
    def of(cls, pod: Obj, rank: int = 0) -> RankedPod:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        ready = is_ready(pod)
        return cls(
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            node=str((pod.get("spec") or {}).get("nodeName") or ""),
            phase=str(status.get("phase") or ""),
            ready=ready,
            ready_since=parse_time((condition(pod, "Ready") or {}).get("lastTransitionTime"))
            if ready else None,
            cost=deletion_cost(meta.get("annotations")),
            restarts=max((int(c.get("restartCount", 0))
                          for c in status.get("containerStatuses") or []), default=0),
            created=parse_time(meta.get("creationTimestamp")),
            rank=rank,
        )


def _log2_bucket(t: float, now: float) -> int:
    """logarithmicRankDiff's rank: int64(log2(nanoseconds since t)), -1 if not in the past."""
    ns = round((now - t) * 1e9)
    return int(math.log2(ns)) if ns > 0 else -1


def _newer_first(t1: float | None, t2: float | None, uid1: str, uid2: str,
                 now: float | None) -> bool:
    """Rules 6 and 8 for two different times: True if the first pod goes first."""
    if now is None or t1 is None or t2 is None:
        # afterOrZero: a missing time first, else the later time first
        if t1 is None or t2 is None:
            return t1 is None
        return t1 > t2
    diff = _log2_bucket(t1, now) - _log2_bucket(t2, now)
    if diff == 0:
        return uid1 < uid2
    return diff < 0


def less(a: RankedPod, b: RankedPod, now: float | None) -> bool:
    """ActivePodsWithRanks.Less: True if `a` should be deleted before `b`.
    now=None compares times without log2 buckets (a zero Now upstream)."""
    if a.node != b.node and (not a.node or not b.node):
        return not a.node
    pa, pb = PHASE_ORDINAL.get(a.phase, 0), PHASE_ORDINAL.get(b.phase, 0)
    if pa != pb:
        return pa < pb
    if a.ready != b.ready:
        return not a.ready
    if a.cost != b.cost:
        return a.cost < b.cost
    if a.rank != b.rank:
        return a.rank > b.rank
    if a.ready and b.ready and a.ready_since != b.ready_since:
        return _newer_first(a.ready_since, b.ready_since, a.uid, b.uid, now)
    if a.restarts != b.restarts:
        return a.restarts > b.restarts
    if a.created != b.created:
        return _newer_first(a.created, b.created, a.uid, b.uid, now)
    return False


def _compare(now: float | None, a: RankedPod, b: RankedPod) -> int:
    if less(a, b, now):
        return -1
    if less(b, a, now):
        return 1
    return 0


def ranks_on_nodes(related: Iterable[Obj]) -> Counter[str]:
    """Active related pods per node name ("" for unassigned), as
    getPodsRankedByRelatedPodsOnSameNode counts them (controller.IsPodActive)."""
    counts: Counter[str] = Counter()
    for pod in related:
        if not is_active(pod):
            continue
        counts[str((pod.get("spec") or {}).get("nodeName") or "")] += 1
    return counts


def deletion_order(pods: Sequence[Obj], related: Iterable[Obj],
                   now: float | None) -> list[Obj]:
    """`pods` sorted so that those to delete first come first."""
    per_node = ranks_on_nodes(related)
    ranked = [(RankedPod.of(p, per_node[str((p.get("spec") or {}).get("nodeName") or "")]), p)
              for p in pods]
    key = functools.cmp_to_key(functools.partial(_compare, now))
    ranked.sort(key=lambda rp: key(rp[0]))
    return [p for _, p in ranked]


def pods_to_delete(pods: Sequence[Obj], related: Iterable[Obj], diff: int,
                   now: float | None) -> list[Obj]:
    """getPodsToDelete: the `diff` active pods a ReplicaSet deletes (no ranking if all go)."""
    if diff >= len(pods):
        return list(pods)
    return deletion_order(pods, related, now)[:diff]
