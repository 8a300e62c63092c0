"""Analytic checks: the simulator agrees with arithmetic a person can do by hand, and it sees
each failure mode when the settings invite it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from drainsafe.simulate.scenario import parse_scenario
from drainsafe.simulate.simulation import Result, simulate

from .scenarios import small


def _runs(data: dict[str, object], seeds: range) -> list[Result]:
    s = parse_scenario(data)
    return [simulate(dataclasses.replace(s, seed=seed)) for seed in seeds]


def test_drain_delay_over_propagation_and_deadline_over_durations_lose_nothing() -> None:
    # Propagation is bounded (uniform up to 9 s) below the 10 s drain delay, and every
    # request (at most 40 s) fits in the 45 s deadline: the model must give exactly zero.
    data = small(**{
        "consumers.0.propagation": {"min": 0.5, "max": 4},
        "consumers.1.propagation": {"min": 2, "max": 9},
        "workloads.0.termination": {"grace": 60, "drain_delay": 10, "shutdown_deadline": 45},
        "workloads.0.rate": 400,
    })
    for r in _runs(data, range(20)):
        assert r.finished
        assert r.failed == 0, r.counts.failures
        assert r.expected_failed == 0.0
        assert r.counts.requests > 50_000
        assert len(r.lifecycle.deleted_at) >= 8  # every pod was drained at least once


DRAINED_SHARE = 1 / 10 + 9 / 9


def _race_scenario(propagation: list[object], rate: float) -> dict[str, object]:
    """Ten one-GPU nodes, one pod each, no drain delay, deadline longer than any request:
    only the race can lose requests. Start-up is instant and each later drain begins the
    instant the node before came back and its replacement turned Ready, before any consumer
    routes to that replacement: the first drained pod carries 1/10 of the traffic, each of
    the nine others 1/9 (nine peers routed), DRAINED_SHARE in all."""
    data = small(**{
        "fleet": {"nodes": 10, "gpus_per_node": 1},
        "workloads.0.replicas": 10,
        "workloads.0.rate": rate,
        "workloads.0.startup": 0,
        "workloads.0.durations": {"p50": 2, "p99": 10, "max": 20},
        "workloads.0.termination": {"grace": 60, "drain_delay": 0, "shutdown_deadline": 30},
        "upgrade.node_upgrade": 30,
    })
    for i, dist in enumerate(propagation):
        data["consumers"][i]["propagation"] = dist  # type: ignore[index]
    return data


def test_no_drain_delay_loses_rate_times_propagation_times_drained_share_exactly() -> None:
    rate = 50.0
    runs = _runs(_race_scenario([1.0, 3.0], rate), range(40))
    mean_propagation = 0.6 * 1.0 + 0.4 * 3.0
    for r in runs:
        assert len(r.lifecycle.deleted_at) == 10
        drained_share = float((r.lifecycle.pod_rate / rate).sum())
        assert drained_share == pytest.approx(DRAINED_SHARE)
        # With constant propagation the Poisson mean is the hand arithmetic, exactly.
        assert r.counts.expected["race"] == pytest.approx(
            rate * mean_propagation * DRAINED_SHARE)
        assert r.counts.failures["cut_deadline"] + r.counts.failures["cut_sigkill"] == 0
    # And the sampled counts scatter around it as a Poisson law does.
    total = sum(r.counts.failures["race"] for r in runs)
    want = len(runs) * rate * mean_propagation * DRAINED_SHARE
    assert abs(total - want) < 4 * math.sqrt(want)


def test_no_drain_delay_with_random_propagation_matches_its_mean() -> None:
    rate = 50.0
    props = [{"p50": 1, "p99": 4}, {"min": 1, "max": 5}]
    runs = _runs(_race_scenario(props, rate), range(150))
    lognormal_mean = math.exp(0 + (math.log(4) / 2.3263478740408408) ** 2 / 2)
    mean_propagation = 0.6 * lognormal_mean + 0.4 * 3.0
    per_run = np.array([r.counts.failures["race"] for r in runs], dtype=float)
    want = rate * mean_propagation * DRAINED_SHARE
    stderr = per_run.std(ddof=1) / math.sqrt(len(per_run))
    assert abs(per_run.mean() - want) < 4 * stderr, (per_run.mean(), want, stderr)


def test_a_drain_delay_shorter_than_propagation_loses_only_the_excess() -> None:
    # Constant 3 s (ingress) against a 2 s drain delay: 1 s of its 40 % share is lost.
    rate = 50.0
    data = _race_scenario([1.0, 3.0], rate)
    data["workloads"][0]["termination"]["drain_delay"] = 2  # type: ignore[index]
    r = _runs(data, range(1))[0]
    assert r.counts.expected["race"] == pytest.approx(rate * 0.4 * 1.0 * DRAINED_SHARE)


@pytest.mark.parametrize("strategy", ["drainsafe", "surge"])
def test_make_before_break_evicts_before_the_consumers_route_to_the_new_pod(
        strategy: str) -> None:
    # The lab's layout: 2 pods, a spare GPU, 1 s propagation, no drain delay. The old pod is
    # evicted the instant its replacement is Ready, before the consumer routes to the
    # replacement: it carries 1/2 of the traffic through its race window, not 1/3.
    rate = 20.0
    data = small(**{
        "fleet": {"nodes": 2, "gpus_per_node": 1},
        "consumers": [{"name": "clusterip", "share": 1.0, "propagation": 1.0}],
        "workloads.0.replicas": 2, "workloads.0.rate": rate, "workloads.0.startup": 2,
        "workloads.0.pdb": None,
        "workloads.0.termination": {"grace": 60, "drain_delay": 0, "shutdown_deadline": 30},
        "upgrade.strategy": strategy, "upgrade.surge_nodes": 1,
    })
    r = _runs(data, range(1))[0]
    assert r.lifecycle.pod_rate.tolist() == [[rate / 2], [rate / 2]]
    assert r.counts.expected["race"] == pytest.approx(2 * rate / 2 * 1.0)
    # A drain delay as long as the propagation loses nothing, whatever the split.
    data["workloads"][0]["termination"]["drain_delay"] = 1  # type: ignore[index]
    assert _runs(data, range(1))[0].counts.expected["race"] == 0.0


def test_a_pod_deleted_before_any_consumer_learnt_of_it_takes_no_traffic() -> None:
    # One pod on two one-GPU nodes, 50 s propagation: the replacement of the first node's
    # pod starts on the second node at once, and that node is drained some seconds later,
    # long before any consumer routes to the replacement.
    rate = 20.0
    data = small(**{
        "fleet": {"nodes": 2, "gpus_per_node": 1},
        "consumers.0.propagation": 50.0, "consumers.1.propagation": 50.0,
        "workloads.0.replicas": 1, "workloads.0.rate": rate, "workloads.0.startup": 0,
        "workloads.0.pdb": None, "upgrade.node_upgrade": 1,
    })
    r = _runs(data, range(1))[0]
    assert r.lifecycle.pod_rate.tolist() == [[rate * 0.6, rate * 0.4], [0.0, 0.0]]
    assert r.counts.expected["race"] == pytest.approx(rate * 50.0)  # the first pod's only


def test_a_grace_period_shorter_than_the_budget_cuts_requests_by_sigkill() -> None:
    # drain delay 20 + deadline 25 + buffer 5 = 50 > grace 30: SIGKILL at 30 cuts the work.
    data = small(**{"workloads.0.termination": {"grace": 30, "drain_delay": 20,
                                                 "shutdown_deadline": 25}})
    runs = _runs(data, range(10))
    assert sum(r.counts.failures["cut_sigkill"] for r in runs) > 0
    assert sum(r.counts.failures["cut_deadline"] for r in runs) == 0


def test_a_server_without_a_deadline_is_cut_by_sigkill_only() -> None:
    data = small(**{"workloads.0.termination": {"grace": 15, "drain_delay": 0,
                                                 "shutdown_deadline": None}})
    runs = _runs(data, range(10))
    assert sum(r.counts.failures["cut_sigkill"] for r in runs) > 0
    assert sum(r.counts.failures["cut_deadline"] for r in runs) == 0
    # Pods live until SIGKILL when long requests are in flight, never longer.
    assert max(float(r.lifecycle.gone_after.max()) for r in runs) <= 15.0 + 1e-9


def test_an_overrunning_prestop_gets_the_kubelets_two_second_extension() -> None:
    # preStop (drain delay) 40 s > grace 30 s: SIGTERM at 30, SIGKILL at 32 (Budget.sigkill_at).
    data = small(**{"workloads.0.termination": {"grace": 30, "drain_delay": 40,
                                                 "shutdown_deadline": 25}})
    r = _runs(data, range(1))[0]
    assert r.lifecycle.times[0].close == 30
    assert r.lifecycle.times[0].cut == 32
    assert float(r.lifecycle.gone_after.max()) <= 32.0 + 1e-9


def test_a_pdb_that_allows_nothing_wedges_the_upgrade_and_says_why() -> None:
    data = small(**{"workloads.0.pdb": {"minAvailable": 8}})
    r = _runs(data, range(1))[0]
    assert not r.finished
    assert r.lifecycle.wedged is not None and "PodDisruptionBudget" in r.lifecycle.wedged
    assert math.isinf(r.upgrade_time)


@pytest.mark.parametrize(("strategy", "words"), [("drainsafe", "surge"), ("surge", "surge")])
def test_replacement_first_on_a_full_fleet_needs_room(strategy: str, words: str) -> None:
    full = {"workloads.0.replicas": 12, "upgrade.strategy": strategy}
    wedged = _runs(small(**full), range(1))[0]
    assert not wedged.finished
    assert wedged.lifecycle.wedged is not None and words in wedged.lifecycle.wedged
    assert "add surge nodes" in wedged.lifecycle.wedged
    surged = _runs(small(**full, **{"upgrade.surge_nodes": 1}), range(1))[0]
    assert surged.finished


def test_kubectl_on_a_full_fleet_drops_capacity_and_rejects_requests() -> None:
    # 12 replicas on 12 GPUs: evicted pods wait Pending for their node to come back.
    data = small(**{"workloads.0.replicas": 12, "workloads.0.pdb": {"maxUnavailable": 2},
                    "workloads.0.max_concurrency": 3, "workloads.0.rate": 10})
    r = _runs(data, range(1))[0]
    assert r.finished
    assert r.min_capacity <= 10 / 12
    assert r.counts.failures["capacity"] > 0
    # Offered concurrency is 10 req/s x E[D] (the capped lognormal's mean is about 3.25 s),
    # about 32: within 12 pods x 3 slots, beyond the 30 slots of 10 pods.
    assert r.counts.expected["capacity"] > 0


def test_replacement_first_keeps_capacity_where_kubectl_drops_it() -> None:
    base = {"upgrade.surge_nodes": 1, "workloads.0.replicas": 12,
            "workloads.0.pdb": {"maxUnavailable": 2}, "workloads.0.max_concurrency": 3,
            "workloads.0.rate": 10}
    kubectl = _runs(small(**base), range(1))[0]
    drainsafe = _runs(small(**base, **{"upgrade.strategy": "drainsafe"}), range(1))[0]
    surge = _runs(small(**base, **{"upgrade.strategy": "surge"}), range(1))[0]
    # Make before break never dips (drainsafe's surge of a node's pods in one step and the
    # per-pod surge alike); kubectl as the PDB lets it.
    assert surge.min_capacity == 1.0 and drainsafe.min_capacity == 1.0
    assert surge.counts.failures["capacity"] == 0
    assert drainsafe.counts.failures["capacity"] == 0
    assert drainsafe.min_ready() == {"llm": 12}
    assert kubectl.min_ready() == {"llm": 10}
    assert all(r.finished for r in (kubectl, drainsafe, surge))


def test_parallel_drains_shorten_the_upgrade() -> None:
    one = _runs(small(), range(1))[0]
    three = _runs(small(**{"upgrade.parallelism": 3, "workloads.0.pdb": None}), range(1))[0]
    assert three.upgrade_time < one.upgrade_time


def test_the_same_seed_gives_the_same_result() -> None:
    a, b = _runs(small(), range(1))[0], _runs(small(), range(1))[0]
    assert a.summary() | {"wall_seconds": 0} == b.summary() | {"wall_seconds": 0}
