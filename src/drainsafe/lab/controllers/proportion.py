"""Proportional scaling of a Deployment's ReplicaSets: a pure function of plain data.

After kubernetes/kubernetes at v1.31.0, pkg/controller/deployment/sync.go `isScalingEvent`
and `scale`, and util/deployment_util.go `FindActiveOrLatest`, `IsSaturated`,
`GetProportion`, `getReplicaSetFraction`:
- a scaling event is a change of spec.replicas that some active ReplicaSet (spec.replicas
  > 0) has not seen: its `deployment.kubernetes.io/desired-replicas` annotation differs;
- with one active ReplicaSet (or none: the newest), that one takes the whole count;
- if the new ReplicaSet is saturated (its size, its desired annotation and its available
  pods all equal spec.replicas), the old ones go to 0;
- otherwise, for RollingUpdate, the difference between replicas + maxSurge (0 when
  scaling to 0) and the sum of the active ReplicaSets is shared out in proportion to each
  ReplicaSet's size against its `deployment.kubernetes.io/max-replicas` annotation (the
  Deployment's status.replicas when missing): round(size x (replicas + maxSurge) /
  annotation) - size, never more than what is left to share; the ReplicaSets are visited
  largest first (ties: newer first when scaling up, older first when scaling down), and
  the rounding leftover goes to the first (largest) one, never below 0.
  A Recreate Deployment only gets the single-ReplicaSet case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ReplicaSetSize:
    """What proportional scaling reads off one ReplicaSet."""

    name: str
    created: float  # creationTimestamp, seconds
    replicas: int  # spec.replicas
    desired: int | None = None  # deployment.kubernetes.io/desired-replicas
    max_replicas: int | None = None  # deployment.kubernetes.io/max-replicas
    available: int = 0  # status.availableReplicas


def round_half_away(x: float) -> int:
    """integer.RoundToInt32 (math.Round: halves away from zero)."""
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


def is_scaling_event(replicas: int, rses: Sequence[ReplicaSetSize]) -> bool:
    return any(rs.replicas > 0 and rs.desired is not None and rs.desired != replicas
               for rs in rses)


def fraction(rs: ReplicaSetSize, replicas: int, max_surge: int, status_replicas: int) -> int:
    """getReplicaSetFraction: how many replicas `rs` should gain (negative: lose)."""
    if replicas == 0:
        return -rs.replicas
    annotated = rs.max_replicas if rs.max_replicas is not None else status_replicas
    if annotated == 0:
        return 0  # "never proportionally scale up from zero"; guard the division
    return round_half_away(rs.replicas * (replicas + max_surge) / annotated) - rs.replicas


def proportion(rs: ReplicaSetSize, replicas: int, max_surge: int, status_replicas: int,
               to_add: int, added: int) -> int:
    """GetProportion: the share of `to_add` for `rs`, given `added` so far."""
    if rs.replicas == 0 or to_add == 0 or to_add == added:
        return 0
    share = fraction(rs, replicas, max_surge, status_replicas)
    allowed = to_add - added
    return min(share, allowed) if to_add > 0 else max(share, allowed)


def scale(replicas: int, max_surge: int, rolling: bool, new: ReplicaSetSize | None,
          old: Sequence[ReplicaSetSize], status_replicas: int) -> dict[str, int]:
    """DeploymentController.scale: the new size of each ReplicaSet it writes (sizes that
    do not change are included too: the controller rewrites their annotations)."""
    everyone = ([new] if new is not None else []) + list(old)
    active = [rs for rs in everyone if rs.replicas > 0]
    if len(active) == 1 or (not active and everyone):
        # FindActiveOrLatest: the only active one, else the new one, else the newest old
        if active:
            target = active[0]
        elif new is not None:
            target = new
        else:
            target = max(old, key=lambda rs: (rs.created, rs.name))
        return {} if target.replicas == replicas else {target.name: replicas}
    if not active:
        return {}
    if (new is not None and new.desired is not None and new.replicas == replicas
            and new.desired == replicas and new.available == replicas):  # IsSaturated
        return {rs.name: 0 for rs in old if rs.replicas > 0}
    if not rolling:
        return {}
    allowed_size = replicas + max_surge if replicas > 0 else 0
    to_add = allowed_size - sum(rs.replicas for rs in active)
    if to_add > 0:  # ReplicaSetsBySizeNewer
        active.sort(key=lambda rs: (-rs.replicas, -rs.created, _reverse(rs.name)))
    elif to_add < 0:  # ReplicaSetsBySizeOlder
        active.sort(key=lambda rs: (-rs.replicas, rs.created, rs.name))
    added = 0
    sizes: dict[str, int] = {}
    for rs in active:
        share = proportion(rs, replicas, max_surge, status_replicas, to_add, added)
        sizes[rs.name] = rs.replicas + share
        added += share
    if to_add != 0:
        first = active[0].name
        sizes[first] = max(sizes[first] + to_add - added, 0)
    return sizes


def _reverse(name: str) -> tuple[int, ...]:
    """Sort key giving names in descending order (the tie-break among equal times)."""
    return (*(-ord(c) for c in name), 1)
