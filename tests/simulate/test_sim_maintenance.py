"""An upgrade simulated as a NodeMaintenance runs it (drainsafe.simulate.maintenance): the
controller's wave planner chooses the nodes under maxParallelNodes and maxUnavailable; the
scenario section and `drainsafe simulate --maintenance` read the same settings."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from drainsafe.cli import main
from drainsafe.simulate.scenario import ScenarioError, parse_scenario
from drainsafe.simulate.simulation import Result, simulate

from .scenarios import small


def _maintained(max_parallel: int, max_unavailable: int | str | None = None,
                **changes: Any) -> dict[str, Any]:
    data = small(**changes)
    data["upgrade"].pop("parallelism")
    data["upgrade"]["maintenance"] = {"max_parallel_nodes": max_parallel,
                                      "max_unavailable": max_unavailable}
    return data


def _most_in_progress(r: Result) -> int:
    """The most nodes between cordon and back at once."""
    lc = r.lifecycle
    edges = sorted([(t, 1) for t in lc.node_drain_started] + [(t, -1) for t in lc.node_back],
                   key=lambda e: (e[0], e[1]))  # a node back frees its slot first
    most = now = 0
    for _t, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize(("strategy", "parallel"), [("kubectl", (1, 2, 3)),
                                                   ("surge", (1, 2)), ("drainsafe", (1,))])
def test_max_parallel_nodes_alone_is_the_upgrade_parallelism(
        strategy: str, parallel: tuple[int, ...]) -> None:
    """Without maxUnavailable the planner starts nodes in order, `parallelism` at a time:
    the same run, event for event, as the plain upgrade (drainsafe: one node at a time;
    beside another, its waves by room and surge choose, below)."""
    for k in parallel:
        plain = simulate(parse_scenario(small(**{"upgrade.parallelism": k,
                                                 "upgrade.strategy": strategy})))
        waves = simulate(parse_scenario(_maintained(k, **{"upgrade.strategy": strategy})))
        assert waves.scenario.upgrade.parallelism == k
        np.testing.assert_array_equal(plain.lifecycle.node_drain_started,
                                      waves.lifecycle.node_drain_started)
        assert waves.upgrade_time == plain.upgrade_time and waves.failed == plain.failed


def test_drainsafe_holds_a_node_whose_workload_is_surged_and_starts_a_free_one() -> None:
    """Three slots, the one Deployment on nodes 0-3 (two pods each), nodes 4 and 5 empty.
    The controller's planner starts node 0 and empty node 4; nodes 1-3 wait uncordoned
    for node 0's surge of the Deployment (WaitingForSurge), node 5 for room (its cordon
    would leave node 0's surge none). Node 1 starts once room is back (node 4), each later
    one once the surge before it is over (its old pods gone), not its node back; none is
    deferred; the plain fleet drain cordons 0-2 at once and queues them on the
    workload's lock, which takes longer. The engine before issue 30, with the lock for
    a Deployment too (upgrade.surge_sharing: lock); today's: the next test."""
    lock = {"upgrade.strategy": "drainsafe", "upgrade.surge_sharing": "lock"}
    plain = simulate(parse_scenario(small(**{"upgrade.parallelism": 3, **lock})))
    waves = simulate(parse_scenario(_maintained(3, **lock)))
    lc = waves.lifecycle
    assert lc.deferrals == 0
    started, empty = lc.node_drain_started, lc.node_empty
    assert [started[0], started[4]] == [5.0, 5.0]
    assert min(started[[1, 2, 3, 5]]) > 5.0
    assert started[1] == lc.node_back[4]
    assert [started[2], started[3], started[5]] == [empty[1], empty[2], empty[3]]
    assert all(empty[[1, 2, 3]] < lc.node_back[[1, 2, 3]])
    assert _most_in_progress(waves) == 2
    assert list(plain.lifecycle.node_drain_started[:3]) == [5.0] * 3
    assert waves.upgrade_time < plain.upgrade_time


def test_a_shared_deployment_holds_a_node_for_room_only() -> None:
    """The same pool under today's engine (a Deployment's surge shared): node 1 starts
    beside node 0 although node 0 surges the same Deployment (no WaitingForSurge); room
    for two nodes' new pods (4 GPUs on nodes 4 and 5) and no more, so empty node 4, whose
    cordon would take 2 of them, waits for room; none deferred, never below desired."""
    waves = simulate(parse_scenario(_maintained(3, **{"upgrade.strategy": "drainsafe"})))
    lc = waves.lifecycle
    assert waves.finished and lc.deferrals == 0
    started = lc.node_drain_started
    assert [started[0], started[1]] == [5.0, 5.0]
    assert min(started[[2, 3, 4, 5]]) > 5.0
    assert _most_in_progress(waves) == 2
    assert waves.min_ready()["llm"] == 8


def test_max_unavailable_bounds_the_nodes_in_progress() -> None:
    bounded = simulate(parse_scenario(_maintained(4, 2)))
    assert bounded.finished and _most_in_progress(bounded) == 2
    # the budget binds as a parallelism of 2 would: the same run
    two = simulate(parse_scenario(small(**{"upgrade.parallelism": 2})))
    np.testing.assert_array_equal(bounded.lifecycle.node_back, two.lifecycle.node_back)
    # a percent of the fleet, rounded up as intstr does: 34 % of 6 nodes is 2.04 -> 3
    three = simulate(parse_scenario(_maintained(6, "34%")))
    assert _most_in_progress(three) == 3
    assert three.upgrade_time < bounded.upgrade_time


def test_a_zero_budget_wedges_and_says_why() -> None:
    r = simulate(parse_scenario(_maintained(2, 0)))
    assert not r.finished and r.lifecycle.wedged is not None
    assert "maxUnavailable 0 allows no node" in r.lifecycle.wedged


@pytest.mark.parametrize(("change", "path"), [
    ({"upgrade.parallelism": 2}, "upgrade.parallelism"),
    ({"upgrade.maintenance.max_unavailable": "lots"}, "upgrade.maintenance.max_unavailable"),
    ({"upgrade.maintenance.max_unavailable": True}, "upgrade.maintenance.max_unavailable"),
    ({"upgrade.maintenance.max_parallel_nodes": 0},
     "upgrade.maintenance.max_parallel_nodes"),
    ({"upgrade.maintenance.wave": 1}, "upgrade.maintenance.wave"),
])
def test_bad_maintenance_fields_are_named(change: dict[str, Any], path: str) -> None:
    data = _maintained(2, 1)
    for dotted, value in change.items():
        target: Any = data
        *parents, last = dotted.split(".")
        for key in parents:
            target = target[key]
        target[last] = value
    with pytest.raises(ScenarioError) as info:
        parse_scenario(copy.deepcopy(data))
    assert info.value.path == path


def test_the_cli_reads_a_node_maintenance_through_the_controllers_spec_reader(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "fleet.yaml"
    scenario.write_text(yaml.safe_dump(small(**{"upgrade.parallelism": 6})))
    manifest = tmp_path / "nm.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "drainsafe.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "roll"},
        "spec": {"nodeSelector": {"matchLabels": {"pool": "a"}}, "maxParallelNodes": 4,
                 "maxUnavailable": "34%"}}))
    assert main(["simulate", str(scenario), "--maintenance", str(manifest), "-o", "json"]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    expected = simulate(parse_scenario(_maintained(4, "34%")))
    assert out["upgrade_seconds"] == pytest.approx(expected.upgrade_time, abs=1e-3)
    # what the controller refuses, simulate refuses, with its words (exit 2)
    manifest.write_text(yaml.safe_dump({"kind": "NodeMaintenance",
                                        "spec": {"nodeSelector": {}}}))
    assert main(["simulate", str(scenario), "--maintenance", str(manifest)]) == 2
    assert "non-empty nodeSelector or nodeNames" in capsys.readouterr().err
