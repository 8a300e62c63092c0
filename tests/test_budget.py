from hypothesis import given
from hypothesis import strategies as st

from drainsafe.budget import (
    PRESTOP_OVERRUN_EXTENSION,
    Budget,
    covers_propagation,
    fit_deadline,
    recommend,
)

seconds = st.floats(min_value=0, max_value=3600, allow_nan=False)


def test_seed_example_is_killed_mid_drain() -> None:
    # Seed: a 55 s hook plus a 10 s shutdown under a 60 s grace period is killed first.
    budget = Budget(grace=60, drain_delay=55, shutdown_deadline=10, buffer=0)
    assert not budget.fits
    assert budget.slack == -5
    assert budget.arithmetic() == "55s + 10s + 0s = 65s > 60s"


def test_seed_gpu_example_fits() -> None:
    # Seed: 20 s preStop + 90 s p99 generation inside 150 s.
    budget = Budget(grace=150, drain_delay=20, shutdown_deadline=90)
    assert budget.fits
    assert budget.slack == 150 - 20 - 90 - 5


def test_prestop_overrun_gets_the_kubelet_extension() -> None:
    budget = Budget(grace=30, drain_delay=40, shutdown_deadline=0)
    assert budget.sigkill_at == 30 + PRESTOP_OVERRUN_EXTENSION
    assert budget.serving_window == 0


@given(propagation=seconds, max_request=seconds, margin=st.floats(0, 2))
def test_recommendation_always_fits_and_covers(
    propagation: float, max_request: float, margin: float
) -> None:
    rec = recommend(propagation=propagation, max_request=max_request, margin=margin)
    assert rec.budget.fits
    assert covers_propagation(rec.budget.drain_delay, propagation)
    assert rec.budget.shutdown_deadline >= max_request
    assert rec.grace_seconds >= rec.budget.required


@given(grace=seconds, delay=seconds, buffer=seconds)
def test_fit_deadline_is_the_largest_that_fits(grace: float, delay: float, buffer: float) -> None:
    deadline = fit_deadline(grace=grace, drain_delay=delay, buffer=buffer)
    if deadline > 0:
        assert Budget(grace, delay, deadline, buffer).slack >= -1e-6
        assert not Budget(grace, delay, deadline + 0.01, buffer).fits
