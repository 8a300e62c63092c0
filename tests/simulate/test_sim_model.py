"""The model's parts: distributions, the rate curve, and lifecycle invariants (hypothesis)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainsafe.simulate.distributions import (
    Constant,
    Histogram,
    LogNormal,
    Uniform,
    survival_table,
)
from drainsafe.simulate.scenario import Diurnal, parse_scenario
from drainsafe.simulate.simulation import simulate
from drainsafe.simulate.traffic import Rate

from .scenarios import small


@pytest.mark.parametrize("dist", [
    Constant(7.0), Uniform(1.0, 9.0), LogNormal(2.0, 20.0), LogNormal(12.0, 75.0, cap=90.0),
    Histogram((0.0, 1.0, 5.0, 30.0), (10.0, 50.0, 40.0)),
])
def test_integrated_survival_matches_monte_carlo(dist: object) -> None:
    rng = np.random.default_rng(5)
    samples = dist.sample(rng, 400_000)  # type: ignore[attr-defined]
    table = survival_table(dist)  # type: ignore[arg-type]
    assert table.mean == pytest.approx(samples.mean(), rel=0.01)
    assert dist.mean == pytest.approx(samples.mean(), rel=0.01)  # type: ignore[attr-defined]
    for w in (0.5, 3.0, 10.0, 25.0):
        want = np.maximum(samples - w, 0).mean()
        assert table.at_scalar(w) == pytest.approx(want, rel=0.03, abs=2e-3)
        assert float(table.at(np.array([w]))[0]) == pytest.approx(table.at_scalar(w))
    # Before the start, a request has all of its duration plus the head start to go.
    assert table.at_scalar(-2.0) == pytest.approx(table.mean + 2.0)


def test_lognormal_percentiles_are_the_given_ones() -> None:
    d = LogNormal(3.0, 12.0)
    assert d.cdf(3.0) == pytest.approx(0.5)
    assert d.cdf(12.0) == pytest.approx(0.99)
    assert LogNormal(3.0, 12.0, cap=10.0).cdf(10.0) == 1.0


def test_diurnal_rate_integral_is_the_integral_of_the_rate() -> None:
    rate = Rate(100.0, start_hour=3.0, diurnal=Diurnal(amplitude=0.6, peak_hour=15.0))
    assert rate.at(12 * 3600.0) == pytest.approx(100.0 * 1.6)  # 3 h + 12 h = the peak
    assert rate.at(0.0) == pytest.approx(100.0 * 0.4)          # 3 h is the trough
    a, b = 1000.0, 30_000.0
    grid = np.linspace(a, b, 200_001)
    numeric = float(np.trapezoid(rate.at_many(grid), grid))
    assert float(rate.integral(np.array([a]), np.array([b]))[0]) == pytest.approx(numeric,
                                                                                  rel=1e-6)
    # A whole day averages to the mean.
    assert float(rate.integral(np.array([0.0]), np.array([86400.0]))[0]) == pytest.approx(
        100.0 * 86400)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    strategy=st.sampled_from(["kubectl", "drainsafe", "surge"]),
    nodes=st.integers(2, 8),
    gpus=st.sampled_from([1, 2, 4]),
    fill=st.floats(0.3, 0.8),
    parallelism=st.integers(1, 4),
    surge=st.integers(0, 2),
    max_unavailable=st.integers(1, 3),
    delay=st.sampled_from([0.0, 5.0, 12.0]),
    seed=st.integers(0, 10_000),
)
def test_lifecycle_invariants(strategy: str, nodes: int, gpus: int, fill: float,
                              parallelism: int, surge: int, max_unavailable: int, delay: float,
                              seed: int) -> None:
    replicas = max(1, int(nodes * gpus * fill))
    data = small(**{
        "seed": seed, "fleet": {"nodes": nodes, "gpus_per_node": gpus},
        "workloads.0.replicas": replicas,
        "workloads.0.pdb": {"maxUnavailable": max_unavailable},
        "workloads.0.termination": {"grace": 60, "drain_delay": delay, "shutdown_deadline": 40},
        "consumers.0.propagation": {"min": 0, "max": 4},
        "consumers.1.propagation": {"min": 1, "max": 10},
        "upgrade": {"strategy": strategy, "parallelism": parallelism, "surge_nodes": surge,
                    "node_upgrade": {"min": 5, "max": 30}, "start": 5},
    })
    r = simulate(parse_scenario(data))
    lc = r.lifecycle
    # First fit packs the pods node by node; the first batch is cordoned at once.
    used = [min(gpus, max(0, replicas - i * gpus)) for i in range(nodes)]
    batch = min(parallelism, nodes)
    room = sum(gpus - u for u in used[batch:]) + surge * gpus
    if min(used[:batch]) > room:
        # Not even the emptiest node of the first batch can move its pods anywhere: the
        # budget holds the rest and the upgrade may wedge, as a real one would. Then it
        # must say so.
        if not r.finished:
            assert lc.wedged is not None
            assert "PodDisruptionBudget" in lc.wedged or "GPUs" in lc.wedged
            return
    else:
        # With room for a node's pods outside the batch, the upgrade always finishes.
        assert r.finished, lc.wedged
    # Every node was upgraded exactly once, in time order cordon <= empty <= back.
    assert not np.isnan(lc.node_back).any()
    assert (lc.node_drain_started <= lc.node_empty).all()
    assert (lc.node_empty <= lc.node_back).all()
    assert r.upgrade_time == pytest.approx(float(lc.node_back.max()) - 5)
    # Ready pods stay within [0, replicas], and above the budget except for make-before-break.
    counts = lc.ready_counts[:, 0]
    assert counts.min() >= 0
    if strategy == "kubectl":
        assert counts.max() <= replicas
        assert counts.min() >= replicas - max_unavailable
    else:
        # drainsafe (a node's pods surged in one step) and surge (per pod): never below,
        # replacements come first; a surge at most doubles the workload.
        assert counts.min() == replicas
        assert counts.max() <= 2 * replicas
    assert (np.diff(lc.ready_times) >= 0).all()
    # Once everything has settled, the workload is back at exactly its replicas.
    assert counts[-1] == replicas
    # Pods exit between the listener closing and the cut.
    close, cut = lc.times[0].close, lc.times[0].cut
    assert ((lc.gone_after >= close - 1e-9) & (lc.gone_after <= cut + 1e-9)).all()
    # A drain delay above every propagation delay (at most 10 s) refuses nothing.
    if delay >= 12.0:
        assert r.counts.failures["race"] == 0 and r.counts.expected["race"] == 0.0
    # Counts are whole, non-negative and within the requests simulated.
    assert all(v >= 0 for v in r.counts.failures.values())
    assert r.failed <= r.counts.requests
    # And the seed decides everything.
    again = simulate(parse_scenario(data))
    assert again.counts.failures == r.counts.failures
    assert again.upgrade_time == r.upgrade_time


def test_more_traffic_more_race_failures_in_proportion() -> None:
    base = parse_scenario(small())
    doubled = dataclasses.replace(base, workloads=(dataclasses.replace(
        base.workloads[0], rate=base.workloads[0].rate * 2),))
    one, two = simulate(base), simulate(doubled)
    # Same lifecycle draws (common random numbers), twice the rate: twice the expectation.
    assert two.counts.expected["race"] == pytest.approx(2 * one.counts.expected["race"])
    assert math.isclose(two.upgrade_time, one.upgrade_time, rel_tol=0.05)
