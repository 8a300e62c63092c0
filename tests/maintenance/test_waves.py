"""The wave planner: properties over random pools (hypothesis), and the cases that name
the rules (percent rounded up, nodes already down count, a node never starts twice)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drainsafe.maintenance.progress import NodeState, in_progress, is_done
from drainsafe.maintenance.spec import Uncordon
from drainsafe.maintenance.waves import NodeFacts, next_wave, unavailable_count
from drainsafe.pdb import scaled_value

pools = st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=12).map(
    lambda flags: [NodeFacts(f"n{i}", ready=r, unschedulable=u)
                   for i, (r, u) in enumerate(flags)])
budgets = st.one_of(st.none(), st.integers(0, 12),
                    st.integers(0, 100).map(lambda p: f"{p}%"))
uncordons = st.sampled_from(["Immediately", "Never", "WhenMaintained"])


def _finish(state: NodeState, uncordon: Uncordon) -> NodeState:
    return "Drained" if uncordon == "Never" else "Uncordoned"


@given(pools, st.integers(1, 5), budgets, uncordons, st.data())
def test_never_exceeds_the_budgets_and_never_starts_a_node_twice(
        nodes: list[NodeFacts], parallel: int, max_unavailable: int | str | None,
        uncordon: Uncordon, data: st.DataObject) -> None:
    budget = None if max_unavailable is None else scaled_value(
        max_unavailable, len(nodes), round_up=True)
    states: dict[str, NodeState] = {n.name: "Pending" for n in nodes}
    started: list[str] = []
    for _ in range(4 * len(nodes) + 4):
        before_unavailable = unavailable_count(nodes, states, uncordon)
        wave = next_wave(nodes, states, max_parallel=parallel, unavailable_budget=budget,
                         uncordon=uncordon)
        assert len(set(wave.start)) == len(wave.start)
        assert all(states[name] == "Pending" for name in wave.start)
        started += wave.start
        for name in wave.start:
            states[name] = "Cordoned"
        active = sum(in_progress(s, uncordon) for s in states.values())
        assert active <= parallel
        after = unavailable_count(nodes, states, uncordon)
        if budget is not None:
            # only a node already down may start past the budget, which adds nothing
            assert after <= max(budget, before_unavailable)
        # some nodes in progress finish, some fail
        for name, s in states.items():
            if in_progress(s, uncordon) and data.draw(st.booleans()):
                states[name] = data.draw(st.sampled_from([_finish(s, uncordon), "Failed"]))
    assert len(started) == len(set(started))


@given(pools, st.integers(1, 5), budgets, uncordons)
def test_finishes_when_every_started_node_comes_back(
        nodes: list[NodeFacts], parallel: int, max_unavailable: int | str | None,
        uncordon: Uncordon) -> None:
    total = len(nodes)
    budget = None if max_unavailable is None else scaled_value(
        max_unavailable, total, round_up=True)
    states: dict[str, NodeState] = {n.name: "Pending" for n in nodes}
    facts = {n.name: n for n in nodes}
    for _ in range(total + 1):
        wave = next_wave(list(facts.values()), states, max_parallel=parallel,
                         unavailable_budget=budget, uncordon=uncordon)
        if not wave.start:
            break
        for name in wave.start:
            states[name] = _finish("Pending", uncordon)
            # maintained: Ready again, and schedulable unless it stays cordoned on purpose
            facts[name] = NodeFacts(name, ready=True, unschedulable=uncordon == "Never")
    if uncordon != "Never" and (budget is None or budget >= 1):
        assert all(is_done(s, uncordon) for s in states.values()), states
    if budget is not None and budget == 0:
        # a zero budget starts only the nodes that are down already
        assert all(facts[n.name].unavailable or states[n.name] == "Pending"
                   for n in nodes if n.ready and not n.unschedulable)


def test_percent_rounds_up_as_intstr_does() -> None:
    nodes = [NodeFacts(f"n{i}", ready=True, unschedulable=False) for i in range(10)]
    budget = scaled_value("25%", len(nodes), round_up=True)  # 2.5 -> 3
    wave = next_wave(nodes, {}, max_parallel=10, unavailable_budget=budget,
                     uncordon="Immediately")
    assert wave.start == ("n0", "n1", "n2") and wave.held == "unavailable"


def test_nodes_already_down_use_budget_and_go_first() -> None:
    nodes = [NodeFacts("a", True, False), NodeFacts("b", True, False),
             NodeFacts("c", False, False), NodeFacts("x", True, True)]
    # c (NotReady) and x (cordoned by someone) are in the selection and already down
    wave = next_wave(nodes, {}, max_parallel=3, unavailable_budget=2,
                     uncordon="Immediately")
    assert wave.start == ("c", "x") and wave.held == "unavailable"


def test_parallel_counts_nodes_awaiting_maintenance_and_skips_done_ones() -> None:
    nodes = [NodeFacts(n, True, False) for n in "abcd"]
    states: dict[str, NodeState] = {"a": "AwaitingMaintenance", "b": "Uncordoned"}
    wave = next_wave(nodes, states, max_parallel=2, unavailable_budget=None,
                     uncordon="WhenMaintained")
    assert wave.start == ("c",) and wave.held == "parallel"
    # under uncordon: Never a Drained node is done, and frees its slot
    wave = next_wave(nodes, {"a": "Drained", "b": "Drained"}, max_parallel=1,
                     unavailable_budget=None, uncordon="Never")
    assert wave.start == ("c",)


def test_a_deletion_gives_back_every_started_node_but_those_done_as_specified() -> None:
    from drainsafe.maintenance.progress import NODE_STATES, to_give_back
    from drainsafe.maintenance.spec import UNCORDON
    for uncordon in UNCORDON:
        back = {s for s in NODE_STATES if to_give_back(s, uncordon)}
        # never started, or already uncordoned: nothing held
        assert not back & {"Pending", "Uncordoned"}
        # in progress, and a failed node (cordoned, perhaps with a surge): given back
        assert {"Cordoned", "Draining", "AwaitingMaintenance", "Failed"} <= back
        # Drained is done (and stays cordoned) only when the spec says Never
        assert ("Drained" in back) == (uncordon != "Never")


@given(pools, st.integers(1, 5), budgets, uncordons, st.data())
def test_deferred_nodes_go_last_and_not_now_ones_never_start(
        nodes: list[NodeFacts], parallel: int, max_unavailable: int | str | None,
        uncordon: Uncordon, data: st.DataObject) -> None:
    budget = None if max_unavailable is None else scaled_value(
        max_unavailable, len(nodes), round_up=True)
    names = [n.name for n in nodes]
    later = set(data.draw(st.lists(st.sampled_from(names), unique=True)))
    not_now = set(data.draw(st.lists(st.sampled_from(sorted(later)), unique=True))
                  ) if later else set()
    wave = next_wave(nodes, {}, max_parallel=parallel, unavailable_budget=budget,
                     uncordon=uncordon, later=later, not_now=not_now)
    assert not not_now & set(wave.start)
    # a deferred node starts only alone: nothing else in progress or starting
    assert not later & set(wave.start) or len(wave.start) == 1
    # every Pending node left is said to wait, and why
    assert (wave.held is None) == (len(wave.start) == len(nodes))


def test_a_deferred_node_starts_last_and_alone() -> None:
    nodes = [NodeFacts(n, True, False) for n in "abcd"]
    # a was refused for room while b drained: c goes first, a waits, said so
    wave = next_wave(nodes, {"b": "Draining"}, max_parallel=3, unavailable_budget=None,
                     uncordon="Immediately", later={"a"})
    assert wave.start == ("c", "d") and wave.held == "deferred"
    # still something in progress: a waits, with a free slot
    wave = next_wave(nodes, {"b": "Uncordoned", "c": "Draining", "d": "Uncordoned"},
                     max_parallel=3, unavailable_budget=None, uncordon="Immediately",
                     later={"a"})
    assert wave.start == () and wave.held == "deferred"
    # nothing in progress: one deferred node starts, the other waits for it (two together
    # would hold each other's room again); one in its backoff does not start at all
    done: dict[str, NodeState] = {"c": "Uncordoned", "d": "Uncordoned"}
    wave = next_wave(nodes, done, max_parallel=3, unavailable_budget=None,
                     uncordon="Immediately", later={"a", "b"})
    assert wave.start == ("a",) and wave.held == "deferred"
    wave = next_wave(nodes, done, max_parallel=3, unavailable_budget=None,
                     uncordon="Immediately", later={"a", "b"}, not_now={"a"})
    assert wave.start == ("b",) and wave.held == "deferred"
