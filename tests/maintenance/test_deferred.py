"""Which refusals a NodeMaintenance defers (the node Pending again, retried after the nodes
in progress beside it) rather than fails: drain.preflight.only_waiting_on."""

from __future__ import annotations

from drainsafe.drain.blockers import Blocker
from drainsafe.drain.plan import DrainPlan
from drainsafe.drain.preflight import only_waiting_on


def _plan(*blockers: Blocker) -> DrainPlan:
    return DrainPlan(nodes=("n1",), pods=(), budgets=(), workloads={}, queues=(),
                     blockers=blockers, warnings=())


ROOM = Blocker("no-room", "Pod default/llm-0", "no other schedulable node has room", "")
OWNED_BY_N2 = Blocker("surge-owned", "LeaderWorkerSet default/llm",
                      "is surged for an unfinished drain of node n2", "", node="n2")
UNMANAGED = Blocker("unmanaged", "Pod default/bare", "no controller", "")


def test_room_and_a_surge_of_a_node_in_progress_beside_it_wait() -> None:
    assert only_waiting_on(_plan(ROOM), ())
    assert only_waiting_on(_plan(ROOM, OWNED_BY_N2), ("n2", "n3"))


def test_a_surge_left_by_another_drain_or_any_other_blocker_fails() -> None:
    assert not only_waiting_on(_plan(OWNED_BY_N2), ("n3",))  # not this operation's
    assert not only_waiting_on(_plan(ROOM, UNMANAGED), ("n2",))
    assert not only_waiting_on(_plan(), ("n2",))  # not refused at all
