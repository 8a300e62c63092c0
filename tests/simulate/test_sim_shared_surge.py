"""The shared surge (upgrade.shared_surge, a what-if of issue 30's engine change:
drainsafe.simulate.surgelock SharedSurges): its bookkeeping alone, a property that the gate
keeps every workload at desired whatever the interleaving, the wedge of plain sharing
reported by name and avoided by joining on room, and default off leaving runs as they were."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainsafe.maintenance.roomwaves import Hold, HoldCode
from drainsafe.maintenance.waves import Admit
from drainsafe.simulate.maintenance import Maintenance, Waves
from drainsafe.simulate.scenario import ScenarioError, parse_scenario
from drainsafe.simulate.simulation import Result, simulate
from drainsafe.simulate.surgelock import SharedSurges, first_fit

from .scenarios import small
from .test_sim_surgelock import STARTUP, fleet

# ------------------------------------------------------------------ the bookkeeping alone


def test_parts_add_to_the_scale_and_leave_one_by_one() -> None:
    shared = SharedSurges()
    assert shared.join(0, node=3, part=8, fits=False)  # first holder: joins, room or not
    assert shared.join(0, node=5, part=2, fits=False)  # plain sharing: joins too
    assert shared.join(0, node=5, part=2, fits=False)  # already holds
    assert shared.scale(0, base=100) == 110
    assert shared.holders(0) == [3, 5]
    assert shared.leave(0, node=3) == []
    assert shared.scale(0, base=100) == 102
    assert shared.leave(0, node=5) == []
    assert shared.holders(0) == [] and shared.scale(0, base=100) == 100


def test_joining_on_room_waits_in_order_until_a_part_leaves() -> None:
    shared = SharedSurges(join_room=True)
    assert shared.join(0, node=1, part=8, fits=False)  # the first holder is the lock's
    assert not shared.join(0, node=2, part=8, fits=False)
    assert not shared.join(0, node=4, part=1, fits=False)
    assert not shared.join(0, node=2, part=8, fits=False)  # queued once
    assert shared.join(0, node=6, part=1, fits=True)  # fits now: joins beside node 1
    assert shared.join(1, node=2, part=1, fits=False)  # another workload: its own surge
    assert shared.leave(0, node=6) == [2, 4]  # the waiters try again, in order
    assert not shared.join(0, node=2, part=8, fits=False)  # node 1 still holds: waits on
    assert shared.join(0, node=4, part=1, fits=True)
    assert shared.leave(0, node=1) == [2]
    assert shared.leave(0, node=4) == []  # node 2 did not try again: no longer queued


def test_the_gate_counts_only_pods_serving_off_the_holders() -> None:
    assert SharedSurges.may_evict(serving_off_holders=10, base=10)
    assert not SharedSurges.may_evict(serving_off_holders=9, base=10)


def test_first_fit_takes_room_only_when_every_pod_fits() -> None:
    free = [1, 0, 2]
    assert not first_fit(free, [0, 1, 2], gpus=1, pods=4)
    assert free == [1, 0, 2]
    assert first_fit(free, [2, 0], gpus=1, pods=3)
    assert free == [0, 0, 0]


@st.composite
def interleavings(draw: st.DrawFn) -> tuple[list[int], list[tuple[str, int, bool]]]:
    pods = draw(st.lists(st.integers(0, 4), min_size=2, max_size=6))
    steps = draw(st.lists(st.tuples(st.sampled_from(["drain", "ready", "evict", "gone"]),
                                    st.integers(0, len(pods) - 1), st.booleans()),
                          max_size=60))
    return pods, steps


@settings(max_examples=300, deadline=None)
@given(interleavings(), st.booleans())
def test_no_interleaving_of_joins_readies_and_evictions_drops_below_base(
        world: tuple[list[int], list[tuple[str, int, bool]]], join_room: bool) -> None:
    """A workload's base pods spread over nodes; nodes join its shared surge (each part a
    new pod per old pod there), new pods turn Ready one by one, holders evict old pods
    whenever the gate lets them, a holder whose old pods are gone leaves. Ready pods never
    fall below base, whatever the order."""
    old_ready, steps = world
    old_ready = list(old_ready)
    base = sum(old_ready)
    shared = SharedSurges(join_room=join_room)
    starting = ready_new = 0
    for action, node, fits in steps:
        if action == "drain" and not shared.holds(0, node):
            others = shared.holders(0)
            if shared.join(0, node, old_ready[node], fits):
                starting += old_ready[node]
                # On room, a node joins beside others only when its new pods fit.
                assert not (join_room and others and not fits)
        elif action == "ready" and starting:
            starting -= 1
            ready_new += 1
        elif action == "evict" and shared.holds(0, node) and old_ready[node]:
            off = ready_new + sum(n for i, n in enumerate(old_ready)
                                  if not shared.holds(0, i))
            if shared.may_evict(off, base):
                old_ready[node] -= 1
        elif action == "gone" and shared.holds(0, node) and not old_ready[node]:
            for again in shared.leave(0, node):
                if shared.join(0, again, old_ready[again], fits):
                    starting += old_ready[again]
        assert sum(old_ready) + ready_new >= base


# ------------------------------------------------------------------ in the simulator


def run(data: dict[str, Any]) -> Result:
    r = simulate(parse_scenario(data))
    assert r.finished, r.lifecycle.wedged
    return r


def two_nodes(shared: bool, maintenance: bool = False) -> Result:
    """One Deployment, two pods on each of nodes 0 and 1, both drained at once; room for
    all four new pods on nodes 2 and 3 (test_sim_surgelock's layout)."""
    data = fleet("drainsafe", nodes=4, gpus=2, drain=[0, 1], maintenance=maintenance,
                 workloads=[{"name": "llm", "replicas": 4, "gpus": 1}])
    data["upgrade"]["shared_surge"] = shared
    return run(data)


@pytest.mark.parametrize("maintenance", [False, True], ids=["fleet", "maintenance"])
def test_a_shared_surge_lets_both_nodes_surge_at_once(maintenance: bool) -> None:
    lc = two_nodes(True, maintenance).lifecycle
    locked = two_nodes(False, maintenance).lifecycle
    # With the lock node 1 surges only once node 0's old pods are gone; shared, both surge
    # at once, their old pods go after one start-up, and they empty together.
    assert locked.node_empty[1] >= locked.node_empty[0] + STARTUP
    assert abs(lc.node_empty[1] - lc.node_empty[0]) < STARTUP
    assert np.sort(lc.deleted_at)[-1] < 5.0 + 2 * STARTUP
    assert lc.deferrals == 0  # a workload another node surges is no reason to defer


def short_of_room(join_room: bool | None) -> Result:
    """One-GPU nodes: a Deployment's pods on nodes 0 and 1, node 2 free, both drained at
    once: room for one new pod, not two."""
    data = fleet("drainsafe", nodes=3, gpus=1, drain=[0, 1],
                 workloads=[{"name": "llm", "replicas": 2, "gpus": 1}])
    if join_room is not None:
        data["upgrade"]["shared_surge"] = True
        data["upgrade"]["shared_join_room"] = join_room
    return simulate(parse_scenario(data))


def test_plain_sharing_wedges_short_of_room_and_says_so() -> None:
    wedged = short_of_room(join_room=False)
    assert not wedged.finished
    reason = wedged.lifecycle.wedged or ""
    assert reason.startswith("workload llm: its surge is shared by 2 nodes")
    assert "1 of which have no room" in reason and "upgrade.shared_join_room" in reason
    # Both old pods still serve: the gate held them.
    assert wedged.min_ready()["llm"] == 2
    assert len(wedged.lifecycle.deleted_at) == 0


def test_joining_on_room_finishes_where_plain_sharing_wedges() -> None:
    joined = short_of_room(join_room=True)
    assert joined.finished and joined.min_ready()["llm"] == 2
    lc = joined.lifecycle
    # Node 1 waited to join until node 0's part left; then it was the first holder.
    assert lc.node_empty[1] >= lc.node_empty[0] + STARTUP
    locked = short_of_room(join_room=None)
    assert locked.finished
    assert joined.upgrade_time == pytest.approx(locked.upgrade_time)


def shared_or_not(maintenance: bool, join_room: bool, **changes: Any) -> dict[str, Any]:
    data = small(**{"upgrade.strategy": "drainsafe", "upgrade.parallelism": 3,
                    "upgrade.surge_nodes": 1, **changes})
    if maintenance:
        data["upgrade"]["maintenance"] = {"max_parallel_nodes": data["upgrade"].pop(
            "parallelism")}
    data["upgrade"]["shared_surge"] = True
    data["upgrade"]["shared_join_room"] = join_room
    return data


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(3, 8), replicas=st.integers(1, 12), parallel=st.integers(1, 6),
       surge=st.integers(0, 2), maintenance=st.booleans(), join_room=st.booleans(),
       startup=st.sampled_from([10, {"p50": 10, "p99": 40}]), seed=st.integers(0, 50),
       budget=st.sampled_from([{"maxUnavailable": 1}, {"maxUnavailable": "50%"}, None]))
def test_a_shared_surge_never_takes_a_workload_below_desired(
        nodes: int, replicas: int, parallel: int, surge: int, maintenance: bool,
        join_room: bool, startup: Any, seed: int, budget: dict[str, Any] | None) -> None:
    """Random small fleets (two Deployments; start-ups that differ, so holders' new pods
    turn Ready out of order), fleet drain or NodeMaintenance: Ready never below desired for
    either, and the run ends, finished or with a wedge named."""
    data = shared_or_not(maintenance, join_room, **{
        "fleet.nodes": nodes, "workloads.0.replicas": min(replicas, nodes),
        "workloads.0.startup": startup, "upgrade.parallelism": min(parallel, nodes),
        "upgrade.surge_nodes": surge, "seed": seed})
    wl = data["workloads"][0]
    if budget is None:
        wl.pop("pdb")
    else:
        wl["pdb"] = budget
    data["workloads"].append({**wl, "name": "small", "replicas": nodes - 1})
    r = simulate(parse_scenario(data))
    for w in r.scenario.workloads:
        assert r.min_ready()[w.name] >= w.replicas
    assert r.finished or r.lifecycle.wedged


def test_default_off_is_the_run_as_before() -> None:
    """shared_surge: false (and no join rule) is the lock's run, figure for figure."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "sim_golden", Path(__file__).resolve().parents[2] / "bench" / "sim_golden.py")
    assert spec is not None and spec.loader is not None
    golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(golden)
    data = small(**{"upgrade.strategy": "drainsafe", "upgrade.parallelism": 3})
    plain = golden.digest(simulate(parse_scenario(data)))
    data["upgrade"]["shared_surge"] = False
    data["upgrade"]["shared_join_room"] = False
    off = golden.digest(simulate(parse_scenario(data)))
    assert json.dumps(off, sort_keys=True) == json.dumps(plain, sort_keys=True)
    data["upgrade"]["shared_surge"] = True
    on = golden.digest(simulate(parse_scenario(data)))
    assert on["lifecycle_sha256"] != plain["lifecycle_sha256"]


@pytest.mark.parametrize(("changes", "path", "words"), [
    ({"upgrade.shared_surge": "yes"}, "upgrade.shared_surge", "expected true or false"),
    ({"upgrade.shared_join_room": 1}, "upgrade.shared_join_room", "expected true or false"),
    ({"upgrade.shared_join_room": True}, "upgrade.shared_join_room",
     "set upgrade.shared_surge: true too"),
    ({"upgrade.shared_surge": True, "upgrade.strategy": "kubectl"}, "upgrade.shared_surge",
     "only the drainsafe strategy"),
])
def test_bad_shared_surge_fields_are_named(changes: dict[str, Any], path: str,
                                           words: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(small(**changes))
    assert caught.value.path == path
    assert words in str(caught.value)


def test_the_cli_names_the_wedge_and_exits_1(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the real entry point, a scenario file: plain sharing short of room stops,
    says why in the text report, and exits 1; joining on room finishes."""
    import yaml

    from drainsafe.cli import main

    data = fleet("drainsafe", nodes=3, gpus=1, drain=[0, 1],
                 workloads=[{"name": "llm", "replicas": 2, "gpus": 1}])
    data["upgrade"]["shared_surge"] = True
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["simulate", str(path)]) == 1
    text = " ".join(capsys.readouterr().out.split())
    assert "never finishes" in text and "its surge is shared by 2 nodes" in text
    data["upgrade"]["shared_join_room"] = True
    path.write_text(yaml.safe_dump(data))
    main(["simulate", str(path), "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert out["finished"] and out["min_ready"]["llm"] == 2


# ------------------------------------------------------------------ the planner's holds


def _room(holds: dict[str, HoldCode]) -> Admit:
    """A room answer as the engine gives the planner (drainsafe.simulate.lifecycle
    room_check): these nodes are held, with these codes."""
    def room(_wave: Sequence[str], name: str) -> Hold | None:
        return Hold(holds[name], "held") if name in holds else None
    return room


def test_the_planner_passes_over_a_held_node_and_keeps_it_first_in_line() -> None:
    waves = Waves(Maintenance(), order=[0, 1, 2, 3], parallelism=2, by_room=True)
    assert waves.start(0.0, _room({"1": "no-room"})) == [0, 2]
    assert waves.pending == [1, 3] and waves.why == {1: "no-room"}
    assert waves.back(0, 1.0, _room({})) == [1]  # first in line, before node 3
    assert waves.back(2, 2.0, _room({})) == [3]
    assert not waves.pending and waves.holds == {"no-room": {1}}


def test_a_node_that_cannot_surge_alone_starts_last_and_alone() -> None:
    waves = Waves(Maintenance(), order=[0, 1, 2], parallelism=3, by_room=True)
    cannot = _room({"0": "cannot-surge"})
    assert waves.start(0.0, cannot) == [1, 2]
    assert waves.why == {0: "cannot-surge"}
    assert waves.back(1, 1.0, _room({})) == []  # last: not beside node 2, though it fits
    assert waves.back(2, 2.0, cannot) == []  # alone, and still no room
    wedge = waves.wedge_reason()
    assert wedge is not None and "CannotSurge" in wedge and "node 0" in wedge
    assert waves.start(3.0, _room({})) == [0]
    assert waves.wedge_reason() is None


def test_a_deferred_node_is_pending_again_last_and_alone_after_its_backoff() -> None:
    waves = Waves(Maintenance(), order=[0, 1, 2], parallelism=2, by_room=True)
    free = _room({})
    assert waves.start(0.0, free) == [0, 1]
    assert waves.defer(1, 10.0) == 12.0
    assert waves.pending == [1, 2] and waves.why == {1: "deferred"}
    assert waves.back(0, 11.0, free) == [2]  # a fresh node goes first, the deferred one later
    assert waves.back(2, 11.5, free) == []  # alone now, but still in its backoff
    assert waves.start(12.0, free) == [1]


def test_room_waves_is_no_longer_a_field() -> None:
    """The controller plans by room since b62e978: the simulator's NodeMaintenance always
    does (under drainsafe's engine), so the switch for the planner before it is gone."""
    data = small()
    data["upgrade"].pop("parallelism")
    data["upgrade"]["maintenance"] = {"max_parallel_nodes": 2, "room_waves": False}
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    assert caught.value.path == "upgrade.maintenance.room_waves"
