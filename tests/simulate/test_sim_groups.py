"""Grouped workloads (LeaderWorkerSet semantics, drainsafe.simulate.groups) on plain data:
what a drain does to a group under each strategy and restart policy, and invariants over
random fleets (hypothesis)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainsafe.simulate.groups import GroupLog, place_group
from drainsafe.simulate.scenario import ScenarioError, parse_scenario
from drainsafe.simulate.simulation import Result, simulate

STARTUP = 10.0
GRACE, DELAY, DEADLINE = 30.0, 0.0, 10.0


def lws(strategy: str = "kubectl", *, nodes: int = 7, groups: int = 2, size: int = 2,
        drain: list[int] | None = None, policy: str = "RecreateGroupOnPodRestart",
        max_unavailable: int | None = None, propagation: Any = 1.0, **more: Any
        ) -> dict[str, Any]:
    """groups x size one-GPU pods on one-GPU nodes: first fit puts group i on nodes
    i*size .. i*size + size - 1, its leader first."""
    upgrade: dict[str, Any] = {"strategy": strategy, "parallelism": 1, "node_upgrade": 20,
                               "start": 5}
    if drain is not None:
        upgrade["nodes"] = drain
    return {
        "name": "groups", "seed": 2,
        "fleet": {"nodes": nodes, "gpus_per_node": 1},
        "traffic": {"duration": 60},
        "consumers": [{"name": "kube-proxy", "share": 1.0, "propagation": propagation}],
        "workloads": [{
            "name": "llm", "replicas": groups, "group_size": size, "gpus": 1, "rate": 20,
            "durations": {"p50": 2, "p99": 8, "max": 12}, "startup": STARTUP,
            "restart_policy": policy,
            "pdb": {"maxUnavailable": size if max_unavailable is None else max_unavailable},
            "termination": {"grace": GRACE, "drain_delay": DELAY,
                            "shutdown_deadline": DEADLINE},
        }, *more.pop("workloads", [])],
        "upgrade": upgrade,
        **more,
    }


def run(data: dict[str, Any]) -> Result:
    r = simulate(parse_scenario(data))
    assert r.finished, r.lifecycle.wedged
    return r


def ready_steps(r: Result, w: int = 0) -> list[tuple[float, int]]:
    """(time, Ready groups) at every change."""
    lc = r.lifecycle
    out: list[tuple[float, int]] = []
    for t, n in zip(lc.ready_times, lc.ready_counts[:, w], strict=True):
        if not out or out[-1][1] != n:
            out.append((float(t), int(n)))
    return out


def test_place_group_puts_each_pod_on_a_node_of_its_own_or_none() -> None:
    free = [1, 0, 2, 1, 1]
    assert place_group([0, 1, 2, 3, 4], free, 1, 3) == [0, 2, 3]
    assert place_group([0, 1, 2, 3, 4], free, 2, 2) is None  # only node 2 has 2 free
    assert place_group([0, 2, 3, 4], free, 1, 2, avoid={0, 2}) == [3, 4]


def test_a_group_loses_its_capacity_when_any_of_its_pods_is_evicted() -> None:
    """kubectl drains the node of group 0's worker (node 1): the group stops serving at
    the eviction, and its leader on node 0, which no drain touched, goes with it,
    carrying its traffic: the only serving pod deleted."""
    r = run(lws(drain=[1]))
    lc = r.lifecycle
    assert ready_steps(r)[:2] == [(0.0, 2), (5.0, 1)]
    assert r.min_ready() == {"llm": 1}
    assert r.min_capacity == pytest.approx(0.5)
    [deleted] = lc.deleted_at
    assert deleted == 5.0
    assert lc.pod_rate.sum() == pytest.approx(10.0)  # its half of 20/s
    spells = lc.groups
    assert spells.serving_until[spells.group == 0].tolist() == [5.0]


def test_kubectl_drain_of_a_worker_node_drops_the_group_for_its_reload() -> None:
    """The group is recreated once all of its pods are gone (the leader last: it finishes
    its streams up to the deadline), and serves again a start-up later."""
    r = run(lws(drain=[1]))
    lc = r.lifecycle
    leader_gone = 5.0 + float(lc.gone_after[0])
    assert DELAY < lc.gone_after[0] <= DELAY + DEADLINE
    assert ready_steps(r)[:3] == [(0.0, 2), (5.0, 1), (pytest.approx(leader_gone + STARTUP), 2)]
    # The worker's node is empty when the worker is gone: it serves nothing, so at once.
    assert r.node_drain_seconds().tolist() == [DELAY]


def test_drainsafe_keeps_every_group_serving_when_room_allows() -> None:
    """A stand-in group first, the worker evicted once it is Ready, the recreated group
    Ready again, then the scale-down removes the stand-in: never below 2 groups, at most 3,
    and the node drained in a start-up plus the worker's exit."""
    r = run(lws("drainsafe", drain=[1]))
    lc = r.lifecycle
    assert r.min_ready() == {"llm": 2}
    assert lc.ready_counts.max() <= 3
    assert r.node_drain_seconds().tolist() == [pytest.approx(STARTUP + DELAY)]
    spells = lc.groups
    assert spells.standin.sum() == 1
    standin_until = float(spells.serving_until[spells.standin][0])
    # The stand-in served from its start-up until the recreated group served again.
    recreated = spells.serving_from[~spells.standin & (spells.serving_from > 0)]
    assert recreated.tolist() == [standin_until]
    # Deleted serving pods: the old leader and then the stand-in's, both carrying traffic.
    assert len(lc.deleted_at) == 2 and (lc.pod_rate.sum(axis=1) > 0).all()
    assert lc.ready_counts[-1, 0] == 2


def test_every_deleted_leader_carries_its_traffic() -> None:
    """Regression: a recreated or stand-in group's leader was never routed to (its routing
    was caught up only after it had stopped being Ready), so only the first groups'
    deletions counted and kubectl's and the surges' failures came out alike. Drained in
    full, each strategy deletes leaders of every kind, and each carries traffic."""
    results = {s: run(lws(s)) for s in ("kubectl", "drainsafe", "surge")}
    for strategy, r in results.items():
        rates = r.lifecycle.pod_rate.sum(axis=1)
        assert len(rates) >= 4 and (rates > 0).all(), (strategy, rates)
    # Make before break deletes each moved group and its stand-in: about twice kubectl's.
    k, d = (results[s].counts.expected["race"] for s in ("kubectl", "drainsafe"))
    assert 1.3 * k < d < 3.0 * k


def test_restart_policy_none_only_restarts_the_pod() -> None:
    """Under None the evicted worker is recreated alone under its name: the leader is not
    deleted (no serving pod goes), the group serves again a start-up after the worker's
    exit. An evicted leader takes its workers (their StatefulSet is the leader's)."""
    r = run(lws(drain=[1], policy="None"))
    assert len(r.lifecycle.deleted_at) == 0
    assert ready_steps(r)[:3] == [(0.0, 2), (5.0, 1), (5.0 + DELAY + STARTUP, 2)]
    leader = run(lws(drain=[0], policy="None"))
    assert len(leader.lifecycle.deleted_at) == 1 and leader.min_ready() == {"llm": 1}
    steps = ready_steps(leader)
    assert steps[2][0] == pytest.approx(5.0 + leader.lifecycle.gone_after[0] + STARTUP)
    # drainsafe under None: the stand-in serves while the worker comes back.
    ours = run(lws("drainsafe", drain=[1], policy="None"))
    assert ours.min_ready() == {"llm": 2} and len(ours.lifecycle.deleted_at) == 1


def test_capacity_weighs_a_group_by_all_of_its_gpus() -> None:
    """8 one-GPU pods beside 1 group of 2 one-GPU pods: losing the group loses 2 of 10
    GPUs (80 %), not 1 of 9 replicas."""
    data = lws(nodes=12, groups=1, drain=[1], workloads=[{
        "name": "small", "replicas": 8, "gpus": 1, "rate": 10, "durations": 2,
        "startup": STARTUP}])
    r = run(data)
    assert r.min_ready() == {"llm": 0, "small": 8}
    assert r.min_capacity == pytest.approx(0.8)


def test_drainsafe_asks_for_a_whole_group_and_kubectl_does_not() -> None:
    """maxUnavailable 1 over groups of 2: one eviction takes two pods. kubectl's eviction
    is allowed (the Eviction API asks for one disruption) and lws's DELETE takes the rest;
    drainsafe reads the budget in whole groups and never evicts (it refuses up front)."""
    kubectl = run(lws(drain=[1], max_unavailable=1))
    assert kubectl.min_ready() == {"llm": 1}
    ours = simulate(parse_scenario(lws("drainsafe", drain=[1], max_unavailable=1)))
    assert not ours.finished
    assert "whole group (2 pods)" in str(ours.lifecycle.wedged)
    assert ours.min_ready() == {"llm": 2}


@pytest.mark.parametrize(("changes", "path", "words"), [
    ({"restart_policy": "Sometimes"}, "workloads[0].restart_policy", "RecreateGroupOnPod"),
    ({"group_size": 8}, "workloads[0].group_size", "needs 8 nodes, the fleet has 7"),
    ({"group_size": 0}, "workloads[0].group_size", ">= 1"),
    ({"replicas": 4}, "workloads", "need 8 GPUs but the fleet has 7"),
])
def test_group_fields_are_checked(changes: dict[str, Any], path: str, words: str) -> None:
    data = lws()
    data["workloads"][0].update(changes)
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    assert err.value.path == path and words in str(err.value), str(err.value)


@pytest.mark.parametrize(("nodes", "path", "words"), [
    ([1, 7], "upgrade.nodes[1]", "expected a node index 0..6"),
    ([2, 2], "upgrade.nodes[1]", "node 2 is listed twice"),
    ([], "upgrade.nodes", "non-empty list"),
])
def test_the_nodes_drained_are_checked(nodes: list[int], path: str, words: str) -> None:
    data = lws(drain=nodes)
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    assert err.value.path == path and words in str(err.value), str(err.value)


def serving_at(log: GroupLog, t: float, standin: bool) -> int:
    return log.serving_at(t, standin=standin)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    strategy=st.sampled_from(["kubectl", "drainsafe", "surge"]),
    policy=st.sampled_from(["RecreateGroupOnPodRestart", "None"]),
    size=st.integers(2, 3),
    groups=st.integers(1, 3),
    spare=st.integers(0, 8),
    parallelism=st.integers(1, 2),
    surge=st.integers(0, 2),
    budget_groups=st.integers(1, 2),
    per_node=st.sampled_from([1, 1, 2]),
    seed=st.integers(0, 10_000),
)
def test_group_invariants(strategy: str, policy: str, size: int, groups: int, spare: int,
                          parallelism: int, surge: int, budget_groups: int, per_node: int,
                          seed: int) -> None:
    """per_node: pods of one GPU a node holds (2: pods of different groups share nodes)."""
    nodes = groups * size + spare
    data = lws(strategy, nodes=nodes, groups=groups, size=size, policy=policy,
               max_unavailable=budget_groups * size, propagation={"min": 0.5, "max": 4},
               seed=seed)
    data["fleet"]["gpus_per_node"] = per_node
    data["workloads"][0]["startup"] = {"min": 5, "max": 30}
    data["upgrade"].update(parallelism=parallelism, surge_nodes=surge,
                           node_upgrade={"min": 5, "max": 30})
    r = simulate(parse_scenario(data))
    lc = r.lifecycle
    ready = lc.ready_counts[:, 0]
    log = lc.groups
    # Spells are well formed, and at each change no more original replicas serve than
    # the set has: only stand-ins add to them, at most one per group being moved.
    assert (log.serving_until[~np.isnan(log.serving_until)]
            >= log.serving_from[~np.isnan(log.serving_until)]).all()
    for t, n in zip(lc.ready_times, ready, strict=True):
        assert serving_at(log, t, standin=False) <= groups
        assert serving_at(log, t, standin=False) + serving_at(log, t, standin=True) == n
    assert ready.min() >= 0
    if strategy == "kubectl":
        assert ready.max() <= groups
        # Each eviction needs one disruption allowed (a Ready pod above the budget's
        # desired), and lws's DELETE then takes up to size - 1 more: at most
        # maxUnavailable + size - 1 pods are not Ready, each costing at most its group.
        # More groups than the budget means: a recreated group half Ready counts as Ready
        # pods and lets another group go (tests below, and docs/simulate.md).
        assert ready.min() >= max(groups - (budget_groups * size + size - 1), 0)
        assert r.finished, lc.wedged
    else:
        # Never below the replicas: a group's pod is evicted only once its stand-in serves,
        # and the stand-in goes only once the group serves again. (No fixed bound above:
        # a stand-in landing on a node drained later gets a stand-in of its own.)
        assert ready.min() == groups
        # One pod per node, and room for every move in the upgrade at once (a stand-in
        # group and the recreation of the pod that was on the node) besides the nodes in
        # the upgrade: the upgrade finishes.
        if per_node == 1 and spare + surge - parallelism >= parallelism * (size + 1):
            assert r.finished, lc.wedged
    if r.finished:
        # Settled: exactly the replicas, every stand-in removed again.
        assert ready[-1] == groups
        assert not np.isnan(log.serving_until[log.standin]).any()
        assert math.isfinite(r.upgrade_time)
    again = simulate(parse_scenario(data))
    assert again.counts.failures == r.counts.failures


def test_a_half_ready_group_lets_kubectl_take_another_group() -> None:
    """maxUnavailable 2 over groups of 2 means one group at a time, but the disruption
    controller counts pods: once the recreated group's first pod is Ready, one disruption
    is allowed again, kubectl's retry evicts a pod of another group, and lws takes that
    whole group too: two groups down. drainsafe waits for `size` disruptions (and for its
    stand-ins) and never goes below the replicas."""
    def lowest(strategy: str, seed: int) -> int:
        data = lws(strategy, nodes=12, groups=3, drain=[1, 3], seed=seed)
        data["workloads"][0]["startup"] = {"min": 5, "max": 30}
        data["upgrade"]["parallelism"] = 2
        return run(data).min_ready()["llm"]

    kubectl = [lowest("kubectl", seed) for seed in range(8)]
    assert min(kubectl) == 1 and max(kubectl) == 2, kubectl
    assert {lowest("drainsafe", seed) for seed in range(8)} == {3}
