"""A Deployment's shared surge as today's drain engine runs it (drain.sharedsurge, rules
drain.parts; the simulator's drainsafe.simulate.surgelock SharedSurges), the simulator's
default: its bookkeeping alone, a property that the counting gate keeps a workload at
desired whatever the interleaving, both nodes surging at once where the lock makes one wait,
a node short of room waiting to join, random small fleets never below desired, the lock as
a what-if (upgrade.surge_sharing: lock), and the what-ifs of no engine refused by name."""

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
    assert shared.join(0, node=3, part=8, fits=False)  # alone: joins, room or not
    assert shared.join(0, node=5, part=2, fits=True)
    assert shared.join(0, node=5, part=2, fits=False)  # already holds
    assert shared.scale(0, base=100) == 110
    assert shared.holders(0) == [3, 5]
    assert shared.leave(0, node=3) == []
    assert shared.scale(0, base=100) == 102
    assert shared.leave(0, node=5) == []
    assert shared.holders(0) == [] and shared.scale(0, base=100) == 100


def test_joining_on_room_waits_in_order_until_a_part_leaves() -> None:
    shared = SharedSurges()
    assert shared.join(0, node=1, part=8, fits=False)  # alone: the lock's surge
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


def test_the_gate_counts_the_available_pods_less_the_one_to_evict() -> None:
    assert SharedSurges.may_evict(11, base=10, serving=True)
    assert not SharedSurges.may_evict(10, base=10, serving=True)
    assert SharedSurges.may_evict(10, base=10, serving=False)  # a pod not serving
    assert not SharedSurges.may_evict(9, base=10, serving=False)


def test_first_fit_takes_room_only_when_every_pod_fits() -> None:
    free = [1, 0, 2]
    assert not first_fit(free, [0, 1, 2], gpus=1, pods=4)
    assert free == [1, 0, 2]
    assert first_fit(free, [2, 0], gpus=1, pods=3)
    assert free == [0, 0, 0]


@st.composite
def interleavings(draw: st.DrawFn) -> tuple[list[int], list[tuple[str, int, bool]]]:
    pods = draw(st.lists(st.integers(0, 4), min_size=2, max_size=6))
    steps = draw(st.lists(st.tuples(st.sampled_from(["drain", "ready", "evict"]),
                                    st.integers(0, len(pods) - 1), st.booleans()),
                          max_size=60))
    return pods, steps


@settings(max_examples=300, deadline=None)
@given(interleavings())
def test_no_interleaving_of_joins_readies_and_evictions_drops_below_base(
        world: tuple[list[int], list[tuple[str, int, bool]]]) -> None:
    """A workload's base pods spread over nodes; nodes join its shared surge on room (each
    part a new pod per old pod there), new pods turn Ready one by one, holders evict old
    pods one decision at a time through the counting gate once base pods are Ready off
    their node, and a part leaves with its last eviction. Ready pods never fall below
    base, whatever the order."""
    old_ready, steps = world
    old_ready = list(old_ready)
    base = sum(old_ready)
    shared = SharedSurges()
    armed: set[int] = set()
    starting = ready_new = 0
    for action, node, fits in steps:
        if action == "drain" and not shared.holds(0, node) and old_ready[node]:
            others = shared.holders(0)
            if shared.join(0, node, old_ready[node], fits):
                starting += old_ready[node]
                assert not (others and not fits)  # beside others only with room
        elif action == "ready" and starting:
            starting -= 1
            ready_new += 1
        elif action == "evict" and shared.holds(0, node) and old_ready[node]:
            ready = ready_new + sum(old_ready)
            if node in armed or ready - old_ready[node] >= base:
                armed.add(node)
                if shared.may_evict(ready, base, serving=True):
                    old_ready[node] -= 1
                    if not old_ready[node]:
                        armed.discard(node)
                        for again in shared.leave(0, node):
                            if shared.join(0, again, old_ready[again], fits):
                                starting += old_ready[again]
        assert sum(old_ready) + ready_new >= base


# ------------------------------------------------------------------ in the simulator


def run(data: dict[str, Any]) -> Result:
    r = simulate(parse_scenario(data))
    assert r.finished, r.lifecycle.wedged
    return r


def two_nodes(sharing: str | None, maintenance: bool = False) -> Result:
    """One Deployment, two pods on each of nodes 0 and 1, both drained at once; room for
    all four new pods on nodes 2 and 3 (test_sim_surgelock's layout)."""
    return run(fleet("drainsafe", nodes=4, gpus=2, drain=[0, 1], maintenance=maintenance,
                     workloads=[{"name": "llm", "replicas": 4, "gpus": 1}],
                     sharing=sharing))


@pytest.mark.parametrize("maintenance", [False, True], ids=["fleet", "maintenance"])
def test_a_shared_surge_lets_both_nodes_surge_at_once(maintenance: bool) -> None:
    lc = two_nodes(None, maintenance).lifecycle
    locked = two_nodes("lock", maintenance).lifecycle
    # With the lock node 1 surges only once node 0's old pods are gone; shared (the
    # default), both surge at once, their old pods go after one start-up, and they empty
    # together.
    assert locked.node_empty[1] >= locked.node_empty[0] + STARTUP
    assert abs(lc.node_empty[1] - lc.node_empty[0]) < STARTUP
    assert np.sort(lc.deleted_at)[-1] < 5.0 + 2 * STARTUP
    assert lc.deferrals == 0  # a Deployment another node surges is no reason to defer


def test_a_node_short_of_room_waits_to_join_and_never_wedges() -> None:
    """One-GPU nodes: a Deployment's pods on nodes 0 and 1, node 2 free, both drained at
    once: room for one new pod, not two. Node 1 does not join beside node 0 (joining would
    wedge: each holder's evictions waiting on the other's unplaced pod); it joins once node
    0's part left, and the run is the lock's."""
    def short(sharing: str | None) -> Result:
        return run(fleet("drainsafe", nodes=3, gpus=1, drain=[0, 1], sharing=sharing,
                         workloads=[{"name": "llm", "replicas": 2, "gpus": 1}]))
    joined, locked = short(None), short("lock")
    assert joined.min_ready()["llm"] == 2
    lc = joined.lifecycle
    assert lc.node_empty[1] >= lc.node_empty[0] + STARTUP
    assert joined.upgrade_time == pytest.approx(locked.upgrade_time)


def maintained_or_fleet(maintenance: bool, **changes: Any) -> dict[str, Any]:
    data = small(**{"upgrade.strategy": "drainsafe", "upgrade.parallelism": 3,
                    "upgrade.surge_nodes": 1, **changes})
    if maintenance:
        data["upgrade"]["maintenance"] = {"max_parallel_nodes": data["upgrade"].pop(
            "parallelism")}
    return data


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(3, 8), replicas=st.integers(1, 12), parallel=st.integers(1, 6),
       surge=st.integers(0, 2), maintenance=st.booleans(),
       startup=st.sampled_from([10, {"p50": 10, "p99": 40}]), seed=st.integers(0, 50),
       budget=st.sampled_from([{"maxUnavailable": 1}, {"maxUnavailable": "50%"}, None]))
def test_a_shared_surge_never_takes_a_workload_below_desired(
        nodes: int, replicas: int, parallel: int, surge: int, maintenance: bool,
        startup: Any, seed: int, budget: dict[str, Any] | None) -> None:
    """Random small fleets under the default (two Deployments; start-ups that differ, so
    holders' new pods turn Ready out of order), fleet drain or NodeMaintenance: Ready
    never below desired for either, and the run ends, finished or with a wedge named."""
    data = maintained_or_fleet(maintenance, **{
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


def test_shared_is_the_default_and_the_lock_a_what_if() -> None:
    """No field is surge_sharing: shared, figure for figure; lock is another run."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "sim_golden", Path(__file__).resolve().parents[2] / "bench" / "sim_golden.py")
    assert spec is not None and spec.loader is not None
    golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(golden)
    data = small(**{"upgrade.strategy": "drainsafe", "upgrade.parallelism": 3})
    plain = golden.digest(simulate(parse_scenario(data)))
    data["upgrade"]["surge_sharing"] = "shared"
    shared = golden.digest(simulate(parse_scenario(data)))
    assert json.dumps(shared, sort_keys=True) == json.dumps(plain, sort_keys=True)
    data["upgrade"]["surge_sharing"] = "lock"
    lock = golden.digest(simulate(parse_scenario(data)))
    assert lock["lifecycle_sha256"] != plain["lifecycle_sha256"]


@pytest.mark.parametrize(("changes", "path", "words"), [
    ({"upgrade.shared_surge": True}, "upgrade.shared_surge", "removed"),
    ({"upgrade.shared_join_room": False}, "upgrade.shared_join_room", "removed"),
    ({"upgrade.surge_sharing": "plain"}, "upgrade.surge_sharing", "shared"),
    ({"upgrade.surge_sharing": "lock", "upgrade.strategy": "kubectl"},
     "upgrade.surge_sharing", "only the drainsafe strategy"),
])
def test_bad_surge_sharing_fields_are_named(changes: dict[str, Any], path: str,
                                            words: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(small(**{"upgrade.strategy": "drainsafe", **changes}))
    assert caught.value.path == path
    assert words in str(caught.value)


def test_the_cli_refuses_a_removed_field_and_runs_the_lock(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the real entry point, a scenario file: the removed what-if is refused with
    its path (exit 2); surge_sharing: lock runs, slower than the default here."""
    import yaml

    from drainsafe.cli import main

    data = fleet("drainsafe", nodes=4, gpus=2, drain=[0, 1],
                 workloads=[{"name": "llm", "replicas": 4, "gpus": 1}])
    path = tmp_path / "shared.yaml"
    data["upgrade"]["shared_surge"] = True
    path.write_text(yaml.safe_dump(data))
    assert main(["simulate", str(path)]) == 2
    assert "upgrade.shared_surge: removed" in capsys.readouterr().err
    took = {}
    for sharing in ("lock", "shared"):
        data["upgrade"].pop("shared_surge", None)
        data["upgrade"]["surge_sharing"] = sharing
        path.write_text(yaml.safe_dump(data))
        main(["simulate", str(path), "-o", "json"])  # 1 when any request failed
        out = json.loads(capsys.readouterr().out)
        assert out["finished"] and out["min_ready"]["llm"] == 4
        took[sharing] = out["upgrade_seconds"]
    assert took["shared"] < took["lock"]


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
