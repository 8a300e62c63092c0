"""Property tests of drainsafe.pdb against a direct transcription of Kubernetes' rules.

The transcription below is written from these sources, read for this test, and kept
deliberately literal (Go zero values, Go's float arithmetic), independent of drainsafe.pdb:
- kubernetes/kubernetes pkg/controller/disruption/disruption.go: getExpectedPodCount
  (maxUnavailable: expected = sum of controller scales, desired = expected - scaled(mu,
  round up), floored at 0; minAvailable int: desired = value, expected = len(pods);
  minAvailable %: expected = scales, desired = scaled(ma, round up)); updatePdbStatus
  (disruptionsAllowed = currentHealthy - desiredHealthy, 0 when that is <= 0 or when
  expectedCount <= 0).
- kubernetes/apimachinery pkg/util/intstr GetScaledValueFromIntOrPercent: an int is
  itself; "N%" is math.Ceil / math.Floor of float64(N) * float64(total) / 100.
- kubernetes/kubernetes pkg/registry/core/pod/storage/eviction.go canIgnorePDB: terminating
  pods and pods in phase Pending, Succeeded or Failed are deleted without the budget.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainsafe.pdb import (
    BudgetSpecError,
    PdbSpec,
    best_case_disruptions,
    desired_healthy,
    disruptions_allowed,
    eviction_bypasses_budget,
    group_disruptions,
    scaled_value,
    status,
    whole_group_spec,
)

# --- the transcription -------------------------------------------------------------------


def go_scaled_value(value: int | str, total: int, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    n = int(value.removesuffix("%"))  # strconv.Atoi of the string without its "%"
    product = float(n) * float(total) / 100
    return math.ceil(product) if round_up else math.floor(product)


def go_get_expected_pod_count(min_available: int | str | None, max_unavailable: int | str | None,
                              controller_scale: int, pods: int) -> tuple[int, int]:
    expected_count, desired_healthy_ = 0, 0  # Go zero values
    if max_unavailable is not None:
        expected_count = controller_scale
        mu = go_scaled_value(max_unavailable, expected_count, True)
        desired_healthy_ = expected_count - mu
        if desired_healthy_ < 0:
            desired_healthy_ = 0
    elif min_available is not None:
        if isinstance(min_available, int):
            desired_healthy_ = min_available
            expected_count = pods
        else:
            expected_count = controller_scale
            desired_healthy_ = go_scaled_value(min_available, expected_count, True)
    return expected_count, desired_healthy_


def go_disruptions_allowed(current_healthy: int, desired_healthy_: int, expected_count: int
                           ) -> int:
    allowed = current_healthy - desired_healthy_
    if expected_count <= 0 or allowed <= 0:
        allowed = 0
    return allowed


def go_can_ignore_pdb(phase: str, deleting: bool) -> bool:
    return phase in ("Succeeded", "Failed", "Pending") or deleting


# --- strategies --------------------------------------------------------------------------

counts = st.integers(min_value=0, max_value=5000)
percent = st.integers(min_value=0, max_value=100).map(lambda n: f"{n}%")
int_or_percent = st.one_of(st.integers(min_value=0, max_value=5000), percent)


@st.composite
def specs(draw: st.DrawFn) -> tuple[int | str | None, int | str | None]:
    which = draw(st.sampled_from(["min", "max", "none"]))
    value = draw(int_or_percent)
    if which == "min":
        return value, None
    if which == "max":
        return None, value
    return None, None


# --- properties --------------------------------------------------------------------------


@given(int_or_percent, counts, st.booleans())
def test_scaled_value_matches_intstr(value: int | str, total: int, round_up: bool) -> None:
    assert scaled_value(value, total, round_up=round_up) == go_scaled_value(value, total,
                                                                              round_up)


@given(specs(), counts, counts)
def test_expected_and_desired_match_controller(spec: tuple[int | str | None, int | str | None],
                                               scale: int, pods: int) -> None:
    min_available, max_unavailable = spec
    ours = desired_healthy(PdbSpec(min_available=min_available, max_unavailable=max_unavailable),
                           expected_scale=scale, matched_pods=pods)
    assert ours == go_get_expected_pod_count(min_available, max_unavailable, scale, pods)


@given(specs(), counts, counts, counts)
def test_status_matches_controller(spec: tuple[int | str | None, int | str | None], scale: int,
                                   pods: int, healthy: int) -> None:
    min_available, max_unavailable = spec
    ours = status(PdbSpec(min_available=min_available, max_unavailable=max_unavailable),
                  expected_scale=scale, matched_pods=pods, current_healthy=healthy)
    expected, desired = go_get_expected_pod_count(min_available, max_unavailable, scale, pods)
    assert (ours.expected_pods, ours.desired_healthy) == (expected, desired)
    assert ours.disruptions_allowed == go_disruptions_allowed(healthy, desired, expected)
    assert 0 <= ours.disruptions_allowed <= max(healthy, 0)


@given(specs(), counts)
def test_best_case_is_every_pod_ready(spec: tuple[int | str | None, int | str | None],
                                      replicas: int) -> None:
    min_available, max_unavailable = spec
    expected, desired = go_get_expected_pod_count(min_available, max_unavailable, replicas,
                                                  replicas)
    assert best_case_disruptions(
        PdbSpec(min_available=min_available, max_unavailable=max_unavailable), replicas
    ) == go_disruptions_allowed(replicas, desired, expected)


@given(specs(), counts, counts, counts)
def test_more_healthy_pods_never_allow_fewer_disruptions(
        spec: tuple[int | str | None, int | str | None], scale: int, pods: int,
        healthy: int) -> None:
    pdb = PdbSpec(min_available=spec[0], max_unavailable=spec[1])
    low = status(pdb, expected_scale=scale, matched_pods=pods, current_healthy=healthy)
    high = status(pdb, expected_scale=scale, matched_pods=pods, current_healthy=healthy + 1)
    assert high.disruptions_allowed >= low.disruptions_allowed


@given(st.integers(min_value=0, max_value=500), st.integers(min_value=1, max_value=500))
def test_integer_min_available_wedges_exactly_at_or_above_replicas(minimum: int,
                                                                   replicas: int) -> None:
    wedged = best_case_disruptions(PdbSpec(min_available=minimum), replicas) == 0
    assert wedged is (minimum >= replicas)


@given(st.integers(min_value=1, max_value=500))
def test_max_unavailable_zero_always_wedges_and_one_never(replicas: int) -> None:
    assert best_case_disruptions(PdbSpec(max_unavailable=0), replicas) == 0
    assert best_case_disruptions(PdbSpec(max_unavailable="0%"), replicas) == 0
    assert best_case_disruptions(PdbSpec(max_unavailable=1), replicas) == 1


@given(counts, counts, counts)
def test_disruptions_allowed_matches(current: int, desired: int, expected: int) -> None:
    assert disruptions_allowed(current_healthy=current, desired=desired, expected=expected) \
        == go_disruptions_allowed(current, desired, expected)


@given(st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]), st.booleans())
def test_eviction_bypass_matches_can_ignore_pdb(phase: str, deleting: bool) -> None:
    assert eviction_bypasses_budget(phase=phase, terminating=deleting) is go_can_ignore_pdb(
        phase, deleting)


def test_documented_examples() -> None:
    # kubernetes.io/docs/tasks/run-application/configure-pdb/: 7 pods, minAvailable 50% -> 4.
    assert desired_healthy(PdbSpec(min_available="50%"), expected_scale=7, matched_pods=7) == \
        (7, 4)
    # The seed's wedge: minAvailable 2 on two replicas.
    assert best_case_disruptions(PdbSpec(min_available=2), 2) == 0
    # maxUnavailable percentages round up: 10% of 3 pods is 1.
    assert best_case_disruptions(PdbSpec(max_unavailable="10%"), 3) == 1


@pytest.mark.parametrize("spec", [
    {"minAvailable": 1, "maxUnavailable": 1},
    {"minAvailable": "half"},
    {"maxUnavailable": -1},
    {"maxUnavailable": True},
    {"unhealthyPodEvictionPolicy": "Sometimes"},
])
def test_invalid_specs_are_rejected(spec: dict[str, object]) -> None:
    with pytest.raises(BudgetSpecError):
        PdbSpec.from_manifest(spec)


GROUPS = st.integers(min_value=0, max_value=60)
SIZES = st.integers(min_value=1, max_value=16)


@given(specs(), GROUPS, SIZES)
def test_group_disruptions_are_pod_disruptions_read_in_groups(
        fields: tuple[int | str | None, int | str | None], groups: int, size: int) -> None:
    spec = PdbSpec(*fields)
    budget = group_disruptions(spec, groups=groups, size=size)
    pods = best_case_disruptions(spec, groups * size)
    assert budget.pods_allowed == pods
    assert budget.groups_allowed * size <= pods < (budget.groups_allowed + 1) * size
    assert budget.fits == (pods == budget.groups_allowed * size)


@given(specs(), GROUPS, SIZES)
def test_whole_group_spec_fits_and_never_lets_more_go(
        fields: tuple[int | str | None, int | str | None], groups: int, size: int) -> None:
    spec = PdbSpec(*fields)
    before = group_disruptions(spec, groups=groups, size=size)
    fixed = whole_group_spec(spec, groups=groups, size=size)
    if fixed is None:
        value = fields[0] if fields[0] is not None else fields[1]
        assert before.fits or before.groups_allowed == 0 or isinstance(value, str)
        return
    after = group_disruptions(fixed, groups=groups, size=size)
    assert after.fits
    assert after.pods_allowed <= before.pods_allowed
    assert after.groups_allowed == before.groups_allowed >= 1  # rounds down to whole groups
