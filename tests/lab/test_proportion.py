"""Proportional scaling of a Deployment's ReplicaSets (sync.go scale at v1.31.0)."""

from __future__ import annotations

import pytest

from drainsafe.lab.controllers.proportion import (
    ReplicaSetSize,
    fraction,
    is_scaling_event,
    round_half_away,
    scale,
)


def rs(name: str, replicas: int, *, created: float, desired: int | None = None,
       max_replicas: int | None = None, available: int = 0) -> ReplicaSetSize:
    return ReplicaSetSize(name, created, replicas, desired, max_replicas, available)


def test_the_documented_example_spreads_the_extra_replicas_by_size() -> None:
    # kubernetes.io "Proportional scaling": 10 replicas, maxSurge 3, a stuck rollout with
    # 8 old and 5 new; scaled to 15: 3 more for the old ReplicaSet, 2 for the new one.
    old = rs("old", 8, created=1, desired=10, max_replicas=13)
    new = rs("new", 5, created=2, desired=10, max_replicas=13)
    assert scale(15, 3, True, new, [old], status_replicas=13) == {"old": 11, "new": 7}


def test_scaling_down_mid_rollout_takes_from_each_by_size() -> None:
    old = rs("old", 11, created=1, desired=15, max_replicas=18)
    new = rs("new", 7, created=2, desired=15, max_replicas=18)
    assert scale(10, 3, True, new, [old], status_replicas=18) == {"old": 8, "new": 5}


def test_rounding_leftover_goes_to_the_largest() -> None:
    # 3 + 3 + 3 at max 10 (7 + surge 3); scaled to 8 (+ surge 3 = 11): each share rounds to
    # round(3 x 11 / 10) - 3 = 0, so the 2 left over all go to the first (newest of the
    # equally large, when scaling up).
    rses = [rs("a", 3, created=1, max_replicas=10, desired=7),
            rs("b", 3, created=2, max_replicas=10, desired=7)]
    new = rs("c", 3, created=3, max_replicas=10, desired=7)
    assert scale(8, 3, True, new, rses, status_replicas=9) == {"c": 5, "a": 3, "b": 3}
    # Scaling down, the oldest of the equally large comes first.
    assert scale(5, 3, True, new, rses, status_replicas=9) == {"a": 2, "b": 3, "c": 3}


def test_a_single_active_replicaset_takes_the_whole_count() -> None:
    new = rs("new", 3, created=2, desired=3)
    old = rs("old", 0, created=1)
    assert scale(5, 1, True, new, [old], status_replicas=3) == {"new": 5}
    assert scale(3, 1, True, new, [old], status_replicas=3) == {}
    # none active: the new one, else the newest old one
    assert scale(2, 1, True, rs("new", 0, created=2), [old], 0) == {"new": 2}
    assert scale(2, 1, True, None, [old, rs("older", 0, created=0)], 0) == {"old": 2}


def test_a_saturated_new_replicaset_scales_the_old_ones_to_zero() -> None:
    new = rs("new", 4, created=2, desired=4, available=4)
    old = rs("old", 1, created=1, desired=4)
    assert scale(4, 1, True, new, [old], status_replicas=5) == {"old": 0}


def test_recreate_and_scale_to_zero() -> None:
    new = rs("new", 2, created=2, desired=4, max_replicas=4)
    old = rs("old", 2, created=1, desired=4, max_replicas=4)
    assert scale(6, 0, False, new, [old], status_replicas=4) == {}  # not RollingUpdate
    assert scale(0, 0, True, new, [old], status_replicas=4) == {"new": 0, "old": 0}


def test_without_the_annotation_the_deployment_status_stands_in() -> None:
    old = rs("old", 4, created=1)
    assert fraction(old, 8, 1, status_replicas=5) == round_half_away(4 * 9 / 5) - 4 == 3


@pytest.mark.parametrize(("x", "rounded"), [(2.5, 3), (-2.5, -3), (1.49, 1), (-0.5, -1)])
def test_round_half_away_from_zero(x: float, rounded: int) -> None:
    assert round_half_away(x) == rounded


def test_a_scaling_event_is_a_replica_count_an_active_replicaset_has_not_seen() -> None:
    assert is_scaling_event(5, [rs("a", 3, created=1, desired=3)])
    assert not is_scaling_event(3, [rs("a", 3, created=1, desired=3)])
    assert not is_scaling_event(5, [rs("a", 0, created=1, desired=3)])  # not active
    assert not is_scaling_event(5, [rs("a", 3, created=1)])  # no annotation
