"""Waves by surge room and budgets (maintenance.roomwaves with waves.next_wave), on plain
API objects: the stand-ins of a wave fit at once (GPU and MIG), a budget is not taken by
two nodes of a wave at once, a node that cannot surge is said so and starts last."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from drain.factory import deployment, node, pdb, pod, serving
from drainsafe.drain.filters import DrainOptions
from drainsafe.drain.plan import plan_drain
from drainsafe.drain.workloads import ClusterState
from drainsafe.maintenance.progress import NodeState
from drainsafe.maintenance.roomwaves import Hold, WaveRoom
from drainsafe.maintenance.waves import NodeFacts, next_wave

Obj = dict[str, Any]
OPTIONS = DrainOptions()


def _facts(names: list[str]) -> list[NodeFacts]:
    return [NodeFacts(n, ready=True, unschedulable=False) for n in names]


def _state(nodes: list[Obj], pods: list[Obj], controllers: dict[str, Obj],
           pdbs: list[Obj] | None = None) -> ClusterState:
    return ClusterState(nodes=nodes, pods=pods, pdbs=pdbs or [], controllers=controllers)


def _four_one_gpu_workloads(spare_gpus: int) -> ClusterState:
    pods: list[Obj] = []
    controllers: dict[str, Obj] = {}
    for i, app in enumerate("abcd", 1):
        p, c = serving(app, [f"n{i}"])
        pods += p
        controllers |= c
    nodes = [node(f"n{i}") for i in range(1, 5)] + [node("spare", gpus=spare_gpus)]
    return _state(nodes, pods, controllers)


def test_a_wave_takes_only_as_many_nodes_as_their_stand_ins_fit() -> None:
    names = ["n1", "n2", "n3", "n4"]
    for spare, started in ((1, ("n1",)), (2, ("n1", "n2")), (3, ("n1", "n2"))):
        room = WaveRoom(_four_one_gpu_workloads(spare), OPTIONS, ())
        wave = next_wave(_facts(names), {}, max_parallel=2, unavailable_budget=None,
                         uncordon="Immediately", room=room.admit)
        assert wave.start == started, (spare, wave)
        if spare == 1:
            # n2 is not started to be refused: it waits for the room n1's stand-in takes
            hold = wave.waiting["n2"]
            assert hold.code == "no-room" and "Deployment ml/b" in hold.message, hold
            assert "beside n1" in hold.message and wave.held == "room"
        else:
            assert wave.held == "parallel" and not wave.waiting


def test_nodes_in_progress_count_what_they_still_need() -> None:
    state = _four_one_gpu_workloads(1)
    # n1 in progress, its stand-in not yet made: the one free GPU is its
    room = WaveRoom(state, OPTIONS, ("n1",))
    wave = next_wave(_facts(["n1", "n2", "n3"]), {"n1": "Draining"}, max_parallel=3,
                     unavailable_budget=None, uncordon="Immediately", room=room.admit)
    assert wave.start == () and set(wave.waiting) == {"n2", "n3"}
    # its stand-in Ready on the spare: n1 needs no room any more, and none is left
    stand_in = pod("a-new", "spare", owner=("ReplicaSet", "a-rs"), labels={"app": "a"},
                   gpus=1)
    moved = _state(state.nodes, [*state.pods, stand_in], dict(state.controllers))
    wave = next_wave(_facts(["n1", "n2"]), {"n1": "Draining"}, max_parallel=3,
                     unavailable_budget=None, uncordon="Immediately",
                     room=WaveRoom(moved, OPTIONS, ("n1",)).admit)
    assert wave.start == () and wave.waiting["n2"].code == "no-room"
    # a second free GPU: n2 fits beside n1
    bigger = _state([*moved.nodes, node("spare2")], list(moved.pods), dict(moved.controllers))
    wave = next_wave(_facts(["n1", "n2"]), {"n1": "Draining"}, max_parallel=3,
                     unavailable_budget=None, uncordon="Immediately",
                     room=WaveRoom(bigger, OPTIONS, ("n1",)).admit)
    assert wave.start == ("n2",)


def test_a_node_that_cannot_surge_is_said_so_and_goes_last() -> None:
    pods, controllers = serving("big", ["n1"], gpus=2)
    small, more = serving("small", ["n2"])
    nodes = [node("n1", gpus=2), node("n2"), node("n3"), node("spare")]
    state = _state(nodes, pods + small, controllers | more)
    room = WaveRoom(state, OPTIONS, ())
    hold = room.admit((), "n1")
    assert hold == Hold("cannot-surge", hold.message if hold else "")
    assert hold is not None and hold.message.startswith(
        "cannot surge: no room for Deployment ml/big"), hold
    # the reconciler records it (CannotSurge) and passes it as `last`: n2 goes first
    facts = _facts(["n1", "n2", "n3"])
    wave = next_wave(facts, {}, max_parallel=2, unavailable_budget=None,
                     uncordon="Immediately", last={"n1"}, room=room.admit)
    assert wave.start == ("n2", "n3") and "n1" not in wave.waiting
    # the others done, nothing in progress: n1 is tried, alone, and still waits, said so
    done: dict[str, NodeState] = {"n2": "Uncordoned", "n3": "Uncordoned"}
    wave = next_wave(facts, done, max_parallel=2, unavailable_budget=None,
                     uncordon="Immediately", last={"n1"}, room=room.admit)
    assert wave.start == () and wave.waiting["n1"].code == "cannot-surge"


def test_a_stand_in_that_fits_anywhere_does_not_make_an_affinity_one_cannot_surge() -> None:
    """Two free GPUs, the H100 one first by name: aaa's stand-in (no affinity) placed
    first took it and bbb's (H100 only) had no room, so n1 was held CannotSurge."""
    aaa = pod("aaa-0", "n1", owner=("ReplicaSet", "aaa-rs"), labels={"app": "aaa"}, gpus=1)
    bbb = pod("bbb-0", "n1", owner=("ReplicaSet", "bbb-rs"), labels={"app": "bbb"}, gpus=1)
    bbb["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "accel", "operator": "In", "values": ["h100"]}]}]}}}
    nodes = [node("n1", gpus=2), node("n2", labels={"accel": "h100"}), node("n3")]
    state = _state(nodes, [aaa, bbb], deployment("aaa", 1) | deployment("bbb", 1))
    room = WaveRoom(state, OPTIONS, ())
    assert room.admit((), "n1") is None
    assert room.still_cannot_surge({"n1"}) == {}


def test_a_node_that_cannot_surge_is_judged_again_and_joins_an_ordinary_wave() -> None:
    """CannotSurge is re-decided on each snapshot, not remembered: a node said so during a
    shortage that fits alone once a spare GPU node joins starts beside the node in
    progress, in an ordinary wave; before, the reconciler passed every node its status
    said CannotSurge as `last`, so it waited for every other node to be done."""
    pods, controllers = serving("big", ["n1"], gpus=2)
    small, more = serving("small", ["n2"])
    nodes = [node("n1", gpus=2), node("n2"), node("n3")]
    state = _state(nodes, pods + small, controllers | more)
    facts = _facts(["n1", "n2"])
    wave = next_wave(facts, {}, max_parallel=2, unavailable_budget=None,
                     uncordon="Immediately", room=WaveRoom(state, OPTIONS, ()).admit)
    assert wave.start == ("n2",) and wave.waiting["n1"].code == "cannot-surge", wave
    # n2 draining, its stand-in Ready on n3
    stand_in = pod("small-new", "n3", owner=("ReplicaSet", "small-rs"),
                   labels={"app": "small"}, gpus=1)
    draining: dict[str, NodeState] = {"n2": "Draining"}
    short = _state(nodes, [*state.pods, stand_in], dict(state.controllers))
    room = WaveRoom(short, OPTIONS, ("n2",))
    still = room.still_cannot_surge({"n1"})
    assert set(still) == {"n1"} and still["n1"].message.startswith(
        "cannot surge: no room for Deployment ml/big"), still
    wave = next_wave(facts, draining, max_parallel=2, unavailable_budget=None,
                     uncordon="Immediately", last=set(still), room=room.admit)
    assert wave.start == () and not wave.waiting  # last and alone: n2 in progress
    # a spare node of 2 GPUs joins: n1 fits alone, so it is no longer held last, and its
    # stand-in fits beside what n2 still needs (nothing): it starts now, beside n2
    joined = _state([*nodes, node("spare", gpus=2)], list(short.pods),
                    dict(short.controllers))
    room = WaveRoom(joined, OPTIONS, ("n2",))
    still = room.still_cannot_surge({"n1"})
    assert still == {}, still
    wave = next_wave(facts, draining, max_parallel=2, unavailable_budget=None,
                     uncordon="Immediately", last=set(still), room=room.admit)
    assert wave.start == ("n1",), wave
    # as it was remembered before: held last while n2 is in progress
    before = next_wave(facts, draining, max_parallel=2, unavailable_budget=None,
                       uncordon="Immediately", last={"n1"}, room=room.admit)
    assert before.start == ()


def test_a_node_back_in_line_waits_for_room_like_any_other() -> None:
    """Said CannotSurge, it fits alone now but not beside the node in progress: it waits
    WaitingForRoom (no-room, naming what it waits beside), not last."""
    pods, controllers = serving("big", ["n1"], gpus=2)
    small, more = serving("small", ["n2"])
    nodes = [node("n1", gpus=2), node("n2"), node("spare", gpus=2)]
    state = _state(nodes, pods + small, controllers | more)
    # n2 in progress, its stand-in not yet made: it will take one of the spare's GPUs
    room = WaveRoom(state, OPTIONS, ("n2",))
    assert room.still_cannot_surge({"n1"}) == {}
    wave = next_wave(_facts(["n1", "n2"]), {"n2": "Draining"}, max_parallel=2,
                     unavailable_budget=None, uncordon="Immediately", last=set(),
                     room=room.admit)
    hold = wave.waiting["n1"]
    assert wave.start == () and hold.code == "no-room" and "beside n2" in hold.message, wave


def test_mig_slices_are_room_too() -> None:
    mig = "nvidia.com/mig-1g.10gb"

    def with_mig(obj: Obj, count: int) -> Obj:
        obj["status"]["allocatable"] = {**obj["status"]["allocatable"], mig: str(count),
                                        "nvidia.com/gpu": "0"}
        return obj

    pods, controllers = [], {}
    for i in (1, 2):
        p = pod(f"m{i}-0", f"n{i}", owner=("ReplicaSet", f"m{i}-rs"), labels={"app": f"m{i}"})
        p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", mig: "1"},
                                                   "limits": {mig: "1"}}
        pods.append(p)
        controllers |= deployment(f"m{i}", 1)
    nodes = [with_mig(node("n1"), 1), with_mig(node("n2"), 1), with_mig(node("spare"), 1)]
    room = WaveRoom(_state(nodes, pods, controllers), OPTIONS, ())
    wave = next_wave(_facts(["n1", "n2"]), {}, max_parallel=2, unavailable_budget=None,
                     uncordon="Immediately", room=room.admit)
    assert wave.start == ("n1",) and "Deployment ml/m2" in wave.waiting["n2"].message


def test_a_budget_is_not_taken_by_two_nodes_of_a_wave() -> None:
    # one budget over three Deployments' pods, one on each node
    pods: list[Obj] = []
    controllers: dict[str, Obj] = {}
    for i, app in enumerate("abc", 1):
        pods.append(pod(f"{app}-0", f"n{i}", owner=("ReplicaSet", f"{app}-rs"),
                        labels={"app": app, "tier": "web"}, gpus=1))
        controllers |= deployment(app, 1)
    nodes = [node("n1"), node("n2"), node("n3"), node("spare", gpus=4)]
    facts = _facts(["n1", "n2", "n3"])
    for allowed, started in ((1, ("n1",)), (2, ("n1", "n2"))):
        budget = pdb("web", {"tier": "web"}, max_unavailable=allowed, allowed=allowed)
        room = WaveRoom(_state(nodes, pods, controllers, [budget]), OPTIONS, ())
        wave = next_wave(facts, {}, max_parallel=3, unavailable_budget=None,
                         uncordon="Immediately", room=room.admit)
        assert wave.start == started, wave
        hold = wave.waiting["n3"]
        assert hold.code == "budget", hold
        assert f"PodDisruptionBudget ml/web allows {allowed} pod(s)" in hold.message, hold


def test_a_deployment_the_wave_surges_is_shared_and_only_room_holds_a_node_back() -> None:
    """A Deployment's surge is shared by the leader's drains (drain.sharedsurge): a node
    whose Deployment the wave surges starts beside it when both parts' stand-ins fit, and
    waits for room (not for the surge) when they do not."""
    pods, controllers = serving("web", ["n1", "n2"], replicas=2)
    room = WaveRoom(_state([node("n1"), node("n2"), node("spare", gpus=4)], pods,
                           controllers), OPTIONS, ("n1",))
    assert room.admit((), "n2") is None
    room = WaveRoom(_state([node("n1"), node("n2"), node("spare", gpus=1)], pods,
                           controllers), OPTIONS, ("n1",))
    hold = room.admit((), "n2")
    assert hold is not None and hold.code == "no-room", hold


# -- properties -------------------------------------------------------------------------

@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterState, list[str], list[str]]:
    """Selected nodes with one- or two-GPU pods of Deployments (some spread over nodes),
    some nodes in progress (cordoned), and spare nodes with free GPUs."""
    count = draw(st.integers(2, 6))
    selected = [f"n{i}" for i in range(count)]
    spares = [node(f"s{i}", gpus=draw(st.integers(0, 3))) for i in range(draw(st.integers(0, 3)))]
    busy = draw(st.lists(st.sampled_from(selected), unique=True, max_size=2))
    nodes, pods, controllers = [], [], {}
    apps = [f"w{i}" for i in range(draw(st.integers(1, 4)))]
    placed: dict[str, list[str]] = {}
    for name in selected:
        gpus = draw(st.integers(1, 2))
        nodes.append(node(name, gpus=gpus, unschedulable=name in busy))
        if draw(st.booleans()):
            placed.setdefault(draw(st.sampled_from(apps)), []).append(name)
    for app, on in placed.items():
        p, c = serving(app, on, gpus=draw(st.integers(1, 2)))
        pods += p
        controllers |= c
    return _state(nodes + spares, pods, controllers), selected, busy


@settings(max_examples=60, deadline=None)
@given(clusters(), st.integers(1, 4))
def test_a_waves_stand_ins_fit_in_the_room(
        cluster: tuple[ClusterState, list[str], list[str]], parallel: int) -> None:
    state, selected, busy = cluster
    states: dict[str, NodeState] = {n: "Draining" for n in busy}
    room = WaveRoom(state, OPTIONS, busy)
    wave = next_wave(_facts(selected), states, max_parallel=parallel,
                     unavailable_budget=None, uncordon="Immediately", room=room.admit)

    def no_room(nodes: list[str]) -> set[str]:
        return {b.object for b in plan_drain(state, nodes, OPTIONS).blockers
                if b.kind == "no-room"}

    # what the wave adds fits at once beside what the nodes in progress still need
    assert no_room([*busy, *wave.start]) <= no_room(busy)
    assert not set(wave.start) & set(wave.waiting)
    # a node waits for room only where it would not fit
    for name, hold in wave.waiting.items():
        if hold.code in ("no-room", "cannot-surge"):
            assert no_room([*busy, *wave.start, name]) - no_room([*busy, *wave.start])
        assert hold.code != "cannot-surge" or not busy


names = st.lists(st.sampled_from([f"n{i}" for i in range(8)]), unique=True, min_size=1)


@given(names, st.data())
def test_nodes_that_cannot_surge_start_only_after_every_surgeable_one(
        pending: list[str], data: st.DataObject) -> None:
    last = set(data.draw(st.lists(st.sampled_from(pending), unique=True)))
    busy = data.draw(st.booleans())
    blocked = set(data.draw(st.lists(st.sampled_from(pending), unique=True)))
    nodes = _facts([*pending, "x"])
    states: dict[str, NodeState] = {"x": "Draining" if busy else "Uncordoned"}

    def admit(_wave: Any, name: str) -> Hold | None:
        return Hold("no-room", "held") if name in blocked else None

    wave = next_wave(nodes, states, max_parallel=8, unavailable_budget=None,
                     uncordon="Immediately", last=last, room=admit)
    started_last = last & set(wave.start)
    if started_last:
        # alone: nothing in progress, nothing else starting, every surgeable one held
        assert not busy and len(wave.start) == 1
        assert all(n in wave.waiting for n in pending if n not in last)
    assert not blocked & set(wave.start)


def test_pods_not_yet_scheduled_hold_the_room_they_will_take() -> None:
    state = _four_one_gpu_workloads(2)
    # n1 in progress (its stand-in to come: one free GPU); a pod of another workload made
    # but not yet scheduled (a group recreated under its names, say) holds no room in the
    # snapshot, but will take the other free GPU
    recreated = pod("z-0", "", owner=("ReplicaSet", "z-rs"), labels={"app": "z"}, gpus=1,
                    phase="Pending", ready=False)
    del recreated["spec"]["nodeName"]
    controllers = {**state.controllers, **deployment("z", 1)}
    names = _facts(["n1", "n2"])
    alone = WaveRoom(_state(state.nodes, list(state.pods), controllers), OPTIONS, ("n1",))
    assert next_wave(names, {"n1": "Draining"}, max_parallel=3, unavailable_budget=None,
                     uncordon="Immediately", room=alone.admit).start == ("n2",)
    room = WaveRoom(_state(state.nodes, [*state.pods, recreated], controllers), OPTIONS,
                    ("n1",))
    wave = next_wave(names, {"n1": "Draining"}, max_parallel=3, unavailable_budget=None,
                     uncordon="Immediately", room=room.admit)
    assert wave.start == () and wave.waiting["n2"].code == "no-room", wave


def test_a_pod_coming_back_under_its_name_keeps_its_room() -> None:
    # n1 in progress: its StatefulSet pod db-0 is terminating; db-0 comes back under its
    # name once gone, and the only free GPU for it is n2's: cordoning n2 (which runs
    # nothing) would leave it Pending
    going = pod("db-0", "n1", owner=("StatefulSet", "db"), labels={"app": "db"}, gpus=1)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    ctrl = {"StatefulSet/ml/db": {"kind": "StatefulSet",
                                  "metadata": {"name": "db", "namespace": "ml"},
                                  "spec": {"replicas": 1}}}
    nodes = [node("n1"), node("n2"), node("spare", gpus=0)]
    room = WaveRoom(_state(nodes, [going], ctrl), OPTIONS, ("n1",))
    hold = room.admit((), "n2")
    assert hold == Hold("no-room", "no room left for ml/db-0, to be scheduled, "
                                   "beside n1"), hold
    # with room for it elsewhere, n2 may go
    roomy = WaveRoom(_state([*nodes, node("spare2")], [going], ctrl), OPTIONS, ("n1",))
    assert roomy.admit((), "n2") is None


def test_a_pod_coming_back_may_need_the_room_it_leaves_on_a_pending_node() -> None:
    # As measured on the acceptance lab: the node in progress (n1) evicted a group whose
    # other pod (here db-0) is terminating on a Pending node (n2); its recreation needs the
    # room db-0 leaves on n2, so n2 must not be cordoned now, though it has nothing to move
    going = pod("db-0", "n2", owner=("StatefulSet", "db"), labels={"app": "db"}, gpus=1)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    ctrl = {"StatefulSet/ml/db": {"kind": "StatefulSet",
                                  "metadata": {"name": "db", "namespace": "ml"},
                                  "spec": {"replicas": 1}}}
    room = WaveRoom(_state([node("n1"), node("n2")], [going], ctrl), OPTIONS, ("n1",))
    hold = room.admit((), "n2")
    assert hold is not None and hold.code == "no-room" and "ml/db-0" in hold.message, hold


def test_a_workload_below_its_floor_evict_first_makes_its_node_wait_as_cannot_surge() -> None:
    from drainsafe.drain.floors import CapacityFloors
    pods, controllers = serving("web", ["n1", "n2"])
    dep = controllers["Deployment/ml/web"]
    dep["metadata"]["generation"] = 2  # mid-rollout: it cannot surge
    dep["status"] = {"observedGeneration": 1}
    state = _state([node("n1"), node("n2"), node("spare", gpus=2)], pods, controllers)
    strict = WaveRoom(state, DrainOptions(floors=CapacityFloors()), ())
    hold = strict.admit((), "n1")
    assert hold is not None and hold.code == "cannot-surge", hold
    assert hold.message.startswith("cannot surge: Deployment ml/web cannot surge (mid-rollout")
    assert "below its capacity floor of 2" in hold.message
    # a floor of 1 allows evict-first: it may start
    lower = WaveRoom(state, DrainOptions(floors=CapacityFloors(default=1)), ())
    assert lower.admit((), "n1") is None
