"""Capacity floors (drain.floors, a NodeMaintenance's spec.capacityFloor): evict-first only
where Ready stays at or above the floor, in place of a surge that has no room; never a
way around a PodDisruptionBudget. Plain API objects."""

from __future__ import annotations

from drainsafe.drain.filters import DrainOptions
from drainsafe.drain.floors import CapacityFloors, FloorRule
from drainsafe.drain.plan import plan_drain
from drainsafe.drain.workloads import ClusterState
from drainsafe.kube.objects import WorkloadRef
from drainsafe.labels import from_label_selector

from .factory import node, pdb, serving
from .test_strategy import statefulset

DB = WorkloadRef("StatefulSet", "ml", "db")


def test_a_floor_is_a_count_or_a_percent_of_desired_rounded_up_and_the_first_rule_wins(
        ) -> None:
    floors = CapacityFloors(default="100%", rules=(
        FloorRule(floor=1, kind="StatefulSet", namespace="ml", name="db"),
        FloorRule(floor="50%", selector=from_label_selector({"matchLabels": {"t": "b"}})),
        FloorRule(floor=0, namespace="ml")))
    assert floors.floor(DB, {"t": "b"}, 3) == 1  # by name, before the selector
    chat = WorkloadRef("Deployment", "other", "chat")
    assert floors.floor(chat, {"t": "b"}, 3) == 2  # 1.5 rounded up, as minAvailable
    assert floors.floor(chat, {}, 3) == 3  # the default: desired
    assert floors.floor(WorkloadRef("Deployment", "ml", "x"), {}, 3) == 0
    assert CapacityFloors(default=9).floor(chat, {}, 3) == 3  # never above desired
    assert not CapacityFloors().allows_evict_first(chat, {}, 3)
    assert CapacityFloors(default="50%").allows_evict_first(chat, {}, 3)  # 2 >= 2
    assert CapacityFloors(default="50%").allows_evict_first(chat, {}, 2)  # 1 >= 1
    assert not CapacityFloors(default="51%").allows_evict_first(chat, {}, 2)  # 1 < 2


def test_by_default_a_workload_that_cannot_surge_is_refused_not_evicted_first() -> None:
    pods, ctrl = statefulset(["g1", "g2", "g3"], updateRevision="db-2")  # mid-update
    nodes = [node(f"g{i}") for i in range(1, 6)]
    state = ClusterState(nodes, pods, controllers=ctrl)
    # drainsafe drain (no floor): evict-first, 2/3 Ready while db-0 moves
    assert plan_drain(state, ["g1"]).ok
    refused = plan_drain(state, ["g1"], DrainOptions(floors=CapacityFloors()))
    [b] = refused.blockers
    assert b.kind == "below-floor" and b.object == "StatefulSet ml/db", b
    assert "2/3 Ready, below its capacity floor of 3" in b.message and "mid-update" in \
        b.message
    allowed = plan_drain(state, ["g1"], DrainOptions(floors=CapacityFloors(default="60%")))
    assert allowed.ok and allowed.workload_plans[0].floor == 2


def test_a_surge_without_room_goes_evict_first_only_within_the_floor() -> None:
    pods, ctrl = statefulset(["g1", "g2", "g3"])
    # one free GPU (g4): a StatefulSet surge needs two (stand-in and recreation)
    state = ClusterState([node(f"g{i}") for i in range(1, 5)], pods, controllers=ctrl)
    assert [b.kind for b in plan_drain(state, ["g1"]).blockers] == ["no-room"]
    strict = plan_drain(state, ["g1"], DrainOptions(floors=CapacityFloors()))
    assert [b.kind for b in strict.blockers] == ["no-room"]  # the floor allows no less
    low = plan_drain(state, ["g1"], DrainOptions(floors=CapacityFloors(rules=(
        FloorRule(floor=2, name="db"),))))
    assert low.ok, low.blockers
    [w] = low.workload_plans
    assert (w.strategy, w.floor) == ("evict", 2) and "capacity floor" in w.why
    assert [p.node for p in low.placements] == ["g4"]  # its recreation only
    # no room even for one replacement: evict-first does not help, still refused for room
    full = ClusterState([node(f"g{i}") for i in range(1, 4)], pods, controllers=ctrl)
    assert [b.kind for b in plan_drain(full, ["g1"], DrainOptions(
        floors=CapacityFloors(default=0))).blockers] == ["no-room"]


def test_the_floor_is_beside_the_budget_never_a_way_around_it() -> None:
    pods, ctrl = serving("web", ["g1", "g2"])
    ctrl["Deployment/ml/web"]["metadata"]["generation"] = 2  # mid-rollout: evict-first
    ctrl["Deployment/ml/web"]["status"] = {"observedGeneration": 1}
    nodes = [node("g1"), node("g2"), node("g3")]
    wedged = pdb("web", {"app": "web"}, min_available=2)
    plan = plan_drain(ClusterState(nodes, pods, pdbs=[wedged], controllers=ctrl), ["g1"],
                      DrainOptions(floors=CapacityFloors(default=0)))
    assert [b.kind for b in plan.blockers] == ["wedged-budget"]
