"""An upgrade run as a NodeMaintenance (drainsafe.io/v1alpha1) runs it: the nodes that start
next are chosen by the controller's own wave planner, drainsafe.maintenance.waves.next_wave
(pure), under maxParallelNodes (the scenario's `upgrade.parallelism`) and maxUnavailable;
so `drainsafe simulate` predicts what the resource will do on a fleet.

The simulator's node life in the resource's terms (drainsafe.maintenance.progress): not
started: Pending; from its cordon until it is back: in progress (Cordoned, Draining, then
AwaitingMaintenance for `upgrade.node_upgrade`, the time until its maintenance is marked
done, uncordon: WhenMaintained; a node_upgrade of 0 is uncordon: Immediately); back:
Uncordoned. A node in progress is unavailable (cordoned or down), so maxUnavailable bounds
it with maxParallelNodes, counting nodes down for another reason (none in the simulator:
every node starts Ready).

The planner sees a window of the fleet: the nodes in progress and the first
`parallelism` Pending ones, in order. That is exact, not an approximation: a node done
(Uncordoned, Ready) counts for neither budget, no more than `parallelism` nodes can start
in one wave, and every Pending node is available, so none is moved ahead of the others
(next_wave puts unavailable ones first). It keeps each call O(parallelism), not O(fleet).

A node the controller defers (controller.maintenance, Deferred: drainsafe's preflight
refused it for what the nodes in progress hold, room or a workload one of them surges;
the engine decides that, drainsafe.simulate.lifecycle) is Pending again: the planner gets
it as `later`, and as `not_now` until its backoff is over (RETRY_MIN_SECONDS doubled at
each refusal, up to RETRY_MAX_SECONDS: `defer` returns when); so it starts last and alone.
The window then holds the deferred nodes too (they are Pending and available).

With `room_waves` (the controller's waves by room, drain.roomwaves, its no-room hold: the
engine decides the room, drainsafe.simulate.lifecycle room_for) a node that does not fit
beside the nodes in progress waits Pending, holding no slot, first in line at the next
call, and the planner looks at the nodes after it; at most `parallelism` nodes wait for
room at once (the window's bound; the controller looks at every Pending node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drainsafe.maintenance.progress import NodeState
from drainsafe.maintenance.waves import Admit, NodeFacts, next_wave
from drainsafe.pdb import scaled_value


@dataclass(frozen=True)
class Maintenance:
    """What a NodeMaintenance adds to the upgrade's parallelism: maxUnavailable."""

    max_unavailable: int | str | None = None  # nodes, or a percent of those drained (rounded up)
    room_waves: bool = False
    """The planner admits a node only when its surge fits beside what the nodes in
    progress still need (the controller's waves by room, drain.roomwaves; its no-room hold
    only); off: the earlier model, where the preflight defers a node short of room."""

    def budget(self, nodes: int) -> int | None:
        if self.max_unavailable is None:
            return None
        return scaled_value(self.max_unavailable, nodes, round_up=True)


def from_manifest(obj: Mapping[str, Any]) -> tuple[int, Maintenance]:
    """(maxParallelNodes, the Maintenance) of a NodeMaintenance object, read by the
    controller's own spec reader (drainsafe.maintenance.spec.parse_spec: its SpecError
    names what is wrong). Its node selection is the scenario's fleet."""
    from drainsafe.maintenance.spec import parse_spec

    spec = parse_spec(dict(obj))
    return spec.max_parallel_nodes, Maintenance(max_unavailable=spec.max_unavailable)


class Waves:
    """The wave planner over the nodes the upgrade drains (`order`: fleet node indices, in
    the order the controller lists them)."""

    def __init__(self, maintenance: Maintenance, order: Sequence[int], parallelism: int) -> None:
        self.parallelism = parallelism
        self.order = tuple(order)
        self.nodes = len(self.order)
        self.budget = maintenance.budget(self.nodes)
        self.maintenance = maintenance
        self.next_pending = 0  # positions in `order` below it have started
        self.in_progress: dict[int, None] = {}  # started, not yet back (in start order)
        self.held = ""  # why Pending nodes wait, when the last wave left some
        self.deferred: dict[int, float] = {}  # Pending again after a refusal: when
        # room_waves: started nodes' fresh neighbours passed over for room, still Pending
        # and first in line (in order).
        self.waiting_room: dict[int, None] = {}
        self.refusals: dict[int, int] = {}  # per node, refusals so far (never forgotten)

    def start(self, now: float = 0.0, room: Admit | None = None) -> list[int]:
        """The nodes to cordon and drain now (`room`: whether a node fits beside the wave
        so far; None: room is not the planner's business)."""
        fresh = [self.order[i] for i in range(
            self.next_pending, min(self.next_pending + self.parallelism, self.nodes))]
        window = list(self.in_progress) + list(self.waiting_room) + fresh + list(self.deferred)
        states: dict[str, NodeState] = {str(n): "Draining" for n in self.in_progress}
        facts = [NodeFacts(str(n), ready=True, unschedulable=n in self.in_progress)
                 for n in window]
        later = {str(n) for n in self.deferred}
        not_now = {str(n) for n, when in self.deferred.items()
                   if now < when + self.backoff(n)}
        wave = next_wave(facts, states, max_parallel=self.parallelism,
                         unavailable_budget=self.budget, uncordon="WhenMaintained",
                         later=later, not_now=not_now, room=room)
        started = [int(n) for n in wave.start]
        # Pending nodes are all available, so the planner keeps them in order; with room
        # it passes over those that do not fit (they wait, first in line next time).
        reached = [n for n in fresh if n in started or str(n) in wave.waiting]
        assert reached == fresh[:len(reached)]
        if room is None:
            assert [n for n in started if n not in self.deferred] == reached
        for n in reached:
            if n not in started:
                self.waiting_room[n] = None
        for n in started:
            self.deferred.pop(n, None)
            self.waiting_room.pop(n, None)
        self.next_pending += len(reached)
        self.in_progress.update(dict.fromkeys(started))
        self.held = wave.held or ""
        if (room is not None and fresh and reached == fresh
                and len(self.in_progress) < self.parallelism
                and len(self.waiting_room) < self.parallelism):
            # Slots left after passing nodes over for room: the planner looks further
            # (the controller's sees every Pending node; here at most `parallelism` wait
            # for room at once, which keeps each call O(parallelism)).
            started += self.start(now, room)
        return started

    def back(self, node: int, now: float = 0.0, room: Admit | None = None) -> list[int]:
        """`node` is Uncordoned: the nodes that start now."""
        self.in_progress.pop(node, None)
        return self.start(now, room)

    def backoff(self, node: int) -> float:
        """Seconds a deferred node waits after its last refusal (the controller's
        _not_now)."""
        from drainsafe.controller.maintenance import RETRY_MAX_SECONDS, RETRY_MIN_SECONDS

        return float(min(RETRY_MIN_SECONDS * 2 ** (self.refusals[node] - 1), RETRY_MAX_SECONDS))

    def defer(self, node: int, now: float) -> float:
        """`node` was refused for what others hold: Pending again. Returns when its
        backoff ends."""
        self.in_progress.pop(node, None)
        self.refusals[node] = self.refusals.get(node, 0) + 1
        self.deferred[node] = now
        return now + self.backoff(node)

    def wedge_reason(self) -> str | None:
        if (self.next_pending < self.nodes or self.deferred or self.waiting_room) \
                and not self.in_progress \
                and self.held and self.held not in ("deferred", "room"):
            return (f"maxUnavailable {self.maintenance.max_unavailable} allows no node of "
                    f"{self.nodes} to start ({self.budget} unavailable at most)")
        return None
