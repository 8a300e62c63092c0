"""Room for a LeaderWorkerSet with exclusive placement (drain.domains, through plan_drain):
whole free topology domains for stand-in groups and recreated groups, and the domains that
would trap a group (room for its leader only). Pure; objects as lws v0.10.0 makes them
(the group-key label, the exclusive-topology annotation; workers pinned to the leader's
domain by a nodeSelector)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from drainsafe.drain import domains
from drainsafe.drain.plan import DrainOptions, plan_drain
from drainsafe.drain.workloads import ClusterState
from drainsafe.kube.objects import LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION, LWS_GROUP_KEY_LABEL

from .factory import node
from .test_group_plan import group_pods, lws

Obj = dict[str, Any]


def exclusive_lws(name: str = "llm", replicas: int = 2) -> Obj:
    obj = lws(name, replicas=replicas)
    obj["metadata"]["annotations"] = {LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION: "rack"}
    return obj


def keyed(name: str, group: int, nodes: list[str], rack: str) -> list[Obj]:
    pods = group_pods(name, group, nodes)
    for p in pods:
        p["metadata"]["labels"][LWS_GROUP_KEY_LABEL] = f"key-{name}-{group}"
        if p["metadata"]["name"] != f"{name}-{group}":
            p["spec"]["nodeSelector"] = {"rack": rack}  # lws pins workers to the domain
    return pods


def racks(names: str, per_rack: int = 2, **cordoned: bool) -> list[Obj]:
    return [node(f"{r}-{i}", labels={"rack": r}, unschedulable=cordoned.get(f"{r}_{i}", False))
            for r in names for i in range(1, per_rack + 1)]


def cluster(rack_names: str, per_rack: int = 2, extra: list[Obj] | None = None,
            controllers: dict[str, Obj] | None = None) -> ClusterState:
    """Groups 0 and 1 of llm in racks a and b (leader on <rack>-1, worker on <rack>-2)."""
    pods = keyed("llm", 0, ["a-1", "a-2"], "a") + keyed("llm", 1, ["b-1", "b-2"], "b")
    return ClusterState(nodes=racks(rack_names, per_rack), pods=pods + (extra or []), pdbs=[],
                        controllers={"LeaderWorkerSet/ml/llm": exclusive_lws(),
                                     **(controllers or {})})


def test_a_node_whose_rack_mate_would_trap_the_recreated_leader_is_refused() -> None:
    # Draining a-2 alone: once group 0 is taken down, rack a has room for its recreated
    # leader (a-1) but not for its worker: the scheduler may put the leader there and lws
    # pins the worker to rack a, where it would stay Pending.
    plan = plan_drain(cluster("abcd"), ["a-2"])
    assert [b.kind for b in plan.blockers] == ["no-domain"], plan.blockers
    [b] = plan.blockers
    assert b.object == "Pod ml/llm-0-1"
    assert "rack=a has room for the leader of group 0's recreation" in b.message
    assert b.fix == "drain rack=a's nodes together: drainsafe drain a-1 a-2"


def test_a_whole_rack_drained_surges_into_one_free_rack_and_recreates_in_another() -> None:
    plan = plan_drain(cluster("abcd"), ["a-1", "a-2"])
    assert plan.ok, plan.blockers
    [w] = plan.workload_plans
    assert (w.strategy, w.surge, w.floor, w.groups) == ("surge", 1, 2, (0,))
    assert ("LeaderWorkerSet/ml/llm: exclusive rack: group 0: its stand-in group in rack=c, "
            "its recreation in rack=d") in plan.notes
    assert plan.placements == ()  # counted in domains, not node by node


def test_no_free_rack_for_the_recreation_names_the_group_and_its_floor() -> None:
    # Racks a, b, c: the stand-in takes c, nothing is left for group 0's recreation.
    plan = plan_drain(cluster("abc"), ["a-1", "a-2"])
    [b] = plan.blockers
    assert b.kind == "no-domain" and b.object == "Pod ml/llm-0"
    assert "beside its stand-in group (rack=c): group 0 cannot surge" in b.message
    assert "evict-first would leave 1/2 groups Ready while it reloads" in b.message
    assert "rack=a: no room on a schedulable node" in b.message
    assert "rack=b: holds another group's pods" in b.message
    # Evict-first needs the recreation's domain only: c, at a floor of 1 of 2 groups.
    evict = plan_drain(cluster("abc"), ["a-1", "a-2"], DrainOptions(strategy="evict"))
    assert evict.ok, evict.blockers
    [w] = evict.workload_plans
    assert (w.strategy, w.floor) == ("evict", 1)
    assert any("its recreation in rack=c" in n for n in evict.notes), evict.notes


def test_another_lws_group_in_a_rack_keeps_any_stand_in_out() -> None:
    # Racks c and d each hold one pod of another LWS's group: no domain is free at all.
    other = keyed("emb", 0, ["c-1"], "c") + keyed("emb", 1, ["d-1"], "d")
    plan = plan_drain(cluster("abcd", extra=other), ["a-1", "a-2"])
    [b] = plan.blockers
    assert b.kind == "no-domain"
    assert "no rack domain is free for a stand-in group of 2 pods" in b.message
    assert "group 0 cannot surge; evict-first would leave 1/2 groups Ready" in b.message
    assert "rack=c: holds another group's pods" in b.message


def test_a_rack_with_room_left_recreates_the_group_in_place() -> None:
    # Racks of 3: without a-2, rack a still has room for the whole group (a-1, a-3).
    plan = plan_drain(cluster("abc", per_rack=3), ["a-2"])
    assert plan.ok, plan.blockers
    assert any("stand-in group in rack=c, its recreation in rack=a" in n for n in plan.notes)


def test_a_plain_lws_is_still_counted_node_by_node() -> None:
    state = cluster("abcd")
    del state.controllers["LeaderWorkerSet/ml/llm"]["metadata"]["annotations"]
    for p in state.pods:
        p["spec"].pop("nodeSelector", None)  # no exclusive placement: no pin either
    plan = plan_drain(state, ["a-2"])
    assert plan.ok, plan.blockers
    assert len([p for p in plan.placements if p.node]) == 3


# ---- properties ------------------------------------------------------------------------

@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[Obj], list[Obj], list[str], list[tuple[int, str,
                                                                                    list[Obj]]]]:
    """Racks of 1-GPU nodes, some cordoned, some holding a pod of another group or a plain
    GPU pod; one group of 2 in rack r0, some of its nodes drained."""
    n_racks = draw(st.integers(2, 5))
    nodes: list[Obj] = []
    pods: list[Obj] = []
    for r in range(n_racks):
        for i in range(draw(st.integers(1, 3)) if r else 3):
            name = f"r{r}-{i}"
            nodes.append(node(name, labels={"rack": f"r{r}"},
                              unschedulable=bool(r) and draw(st.booleans())))
            if r and i == 0:
                kind = draw(st.sampled_from(["none", "group", "plain"]))
                if kind == "group":
                    pods += keyed("emb", r, [name], f"r{r}")
                elif kind == "plain":
                    pods += group_pods("plain", r, [name])
                    for p in pods[-1:]:
                        p["metadata"]["labels"] = {"app": "plain"}
    group = keyed("llm", 0, ["r0-0", "r0-1"], "r0")
    drained = ["r0-1"] + (["r0-2"] if draw(st.booleans()) else [])
    return nodes, pods + group, drained, [(0, "key-llm-0", group)]


def brute_whole(nodes: list[Obj], pods: list[Obj], rack: str, drained: list[str],
                key: str | None, claimed: set[str]) -> bool:
    """A rack takes a whole group of 2 one-GPU pods: not claimed, no other group's pod,
    two usable nodes without another pod's GPU."""
    if rack in claimed:
        return False
    names = [n["metadata"]["name"] for n in nodes if n["metadata"]["labels"]["rack"] == rack]
    on = [p for p in pods if p["spec"]["nodeName"] in names]
    if any(p["metadata"]["labels"].get(LWS_GROUP_KEY_LABEL, key) != key for p in on):
        return False
    busy = {p["spec"]["nodeName"] for p in on
            if p["metadata"]["labels"].get(LWS_GROUP_KEY_LABEL) != key or key is None}
    free = [n for n in nodes if n["metadata"]["name"] in names
            and n["metadata"]["name"] not in drained and n["metadata"]["name"] not in busy
            and not n["spec"]["unschedulable"]]
    return len(free) >= 2


@settings(max_examples=60, deadline=None)
@given(layouts(), st.integers(0, 1))
def test_claimed_domains_are_whole_distinct_and_none_is_missed(
        layout: tuple[list[Obj], list[Obj], list[str], list[tuple[int, str, list[Obj]]]],
        stand_ins: int) -> None:
    nodes, pods, drained, groups = layout
    [room] = domains.plan_domains(nodes, pods, "rack", groups, drained, stand_ins=stand_ins)
    all_racks = sorted({n["metadata"]["labels"]["rack"] for n in nodes})
    claimed: set[str] = set()
    if stand_ins:
        if room.stand_in is None:
            assert not any(brute_whole(nodes, pods, r, drained, None, claimed)
                           for r in all_racks)
        else:
            assert brute_whole(nodes, pods, room.stand_in, drained, None, claimed)
            claimed.add(room.stand_in)
    else:
        assert room.stand_in is None and not room.needs_stand_in
    if room.recreation is None:
        assert not any(brute_whole(nodes, pods, r, drained, "key-llm-0", claimed)
                       for r in all_racks)
    else:
        assert room.recreation != room.stand_in
        assert brute_whole(nodes, pods, room.recreation, drained, "key-llm-0", claimed)
    # A trap has room for one pod and not two; the group's own rack is one exactly when
    # a single usable node is left there.
    own_left = [n for n in ("r0-0", "r0-1", "r0-2") if n not in drained]
    assert (("r0", "recreation") in room.traps) == (len(own_left) == 1)
    assert all(t[0] not in {room.stand_in, room.recreation} for t in room.traps)
