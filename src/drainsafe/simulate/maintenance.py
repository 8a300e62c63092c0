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

Off the drainsafe engine (strategies kubectl and surge: other drainers under the
resource's budgets) the planner sees a window of the fleet: the nodes in progress and the
first `parallelism` Pending ones, in order. That is exact, not an approximation: a node done
(Uncordoned, Ready) counts for neither budget, no more than `parallelism` nodes can start
in one wave, and every Pending node is available, so none is moved ahead of the others
(next_wave puts unavailable ones first). It keeps each call O(parallelism), not O(fleet).

A node the controller defers (controller.maintenance, Deferred: drainsafe's preflight
refused it for what the nodes in progress hold, room or a workload one of them surges;
the engine decides that, drainsafe.simulate.lifecycle) is Pending again: the planner gets
it as `later`, and as `not_now` until its backoff is over (RETRY_MIN_SECONDS doubled at
each refusal, up to RETRY_MAX_SECONDS: `defer` returns when); so it starts last and alone.
The window then holds the deferred nodes too (they are Pending and available).
The drainsafe engine's run has deferrals too, for what the planner's holds (below) do not
see.

Under the drainsafe strategy (the controller's engine) the planner also chooses each wave
as the controller does since its waves by room (maintenance.roomwaves WaveRoom.admit, merge
b62e978; the engine answers it, drainsafe.simulate.lifecycle `room_check`): a Pending node
joins the wave only when no workload of it is surged for a node in progress or of the wave
(WaitingForSurge: one surge of a workload at a time), and its stand-ins fit beside what
theirs still need (WaitingForRoom); else it waits, uncordoned, holding no slot, and the
next Pending node is tried. A node that does not fit with nothing of the operation in
progress or starting is CannotSurge: started last, alone, once it fits (`last`), as a
deferred node (`later`). Then the window is every node not started, in order, since the
controller looks at every Pending node (a node waiting on a surge is passed over, and a
later one whose workloads are free may start). No budget hold: each of the simulator's
budgets covers one workload, so the surging hold comes first (WaitingForBudget would need
two nodes of one workload in a wave, which that hold forbids).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from drainsafe.maintenance.progress import NodeState
from drainsafe.maintenance.roomwaves import HoldCode
from drainsafe.maintenance.waves import Admit, NodeFacts, next_wave
from drainsafe.pdb import scaled_value


@dataclass(frozen=True)
class Maintenance:
    """What a NodeMaintenance adds to the upgrade's parallelism: maxUnavailable."""

    max_unavailable: int | str | None = None  # nodes, or a percent of those drained (rounded up)

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


# Why a node not started waits: deferred (refused by the preflight), or held by the planner.
Why = Literal["deferred"] | HoldCode


class Waves:
    """The wave planner over the nodes the upgrade drains (`order`: fleet node indices, in
    the order the controller lists them); `by_room`: the controller's holds (above), with
    the room and surges the engine answers through `start`'s `room`."""

    def __init__(self, maintenance: Maintenance, order: Sequence[int], parallelism: int,
                 by_room: bool = False) -> None:
        self.parallelism = parallelism
        self.order = tuple(order)
        self.nodes = len(self.order)
        self.budget = maintenance.budget(self.nodes)
        self.maintenance = maintenance
        self.by_room = by_room
        self.next_pending = 0  # positions in `order` below it have started (not by_room)
        self.in_progress: dict[int, None] = {}  # started, not yet back (in start order)
        self.held = ""  # why Pending nodes wait, when the last wave left some
        self.deferred: dict[int, float] = {}  # Pending again after a refusal: when
        self.refusals: dict[int, int] = {}  # per node, refusals so far (never forgotten)
        # by_room: every node not started, in order, and why each waits (its status
        # reason: a deferred node is `later`, a CannotSurge one `last`); the nodes ever
        # held per hold, and the last hold's message per node.
        self.pending: list[int] = list(self.order)
        self.position = {n: i for i, n in enumerate(self.order)}
        self.why: dict[int, Why] = {}
        self.holds: dict[HoldCode, set[int]] = {}
        self.said: dict[int, str] = {}
        self._facts = {n: (NodeFacts(str(n), ready=True, unschedulable=False),
                           NodeFacts(str(n), ready=True, unschedulable=True))
                       for n in self.order}

    def start(self, now: float = 0.0, room: Admit | None = None) -> list[int]:
        """The nodes to cordon and drain now (`room`: may a node join the wave so far;
        by_room only)."""
        if self.by_room:
            assert room is not None
            return self._start_by_room(now, room)
        fresh = [self.order[i] for i in range(
            self.next_pending, min(self.next_pending + self.parallelism, self.nodes))]
        window = list(self.in_progress) + fresh + list(self.deferred)
        states: dict[str, NodeState] = {str(n): "Draining" for n in self.in_progress}
        facts = [NodeFacts(str(n), ready=True, unschedulable=n in self.in_progress)
                 for n in window]
        later = {str(n) for n in self.deferred}
        not_now = {str(n) for n, when in self.deferred.items()
                   if now < when + self.backoff(n)}
        wave = next_wave(facts, states, max_parallel=self.parallelism,
                         unavailable_budget=self.budget, uncordon="WhenMaintained",
                         later=later, not_now=not_now)
        started = [int(n) for n in wave.start]
        new = [n for n in started if n not in self.deferred]
        # Pending nodes are all available, so the planner keeps them in order.
        assert new == fresh[:len(new)]
        for n in started:
            self.deferred.pop(n, None)
        self.next_pending += len(new)
        self.in_progress.update(dict.fromkeys(started))
        self.held = wave.held or ""
        return started

    def _start_by_room(self, now: float, room: Admit) -> list[int]:
        if len(self.in_progress) >= self.parallelism:
            # next_wave would stop at the first Pending node (deferred and CannotSurge ones
            # are sorted after it); the controller does not even read the cluster then.
            self.held = "parallel" if self.pending else ""
            return []
        window = [*self.in_progress, *self.pending]
        states: dict[str, NodeState] = {str(n): "Draining" for n in self.in_progress}
        facts = [self._facts[n][n in self.in_progress] for n in window]
        later = {str(n) for n in self.pending if self.why.get(n) == "deferred"}
        not_now = {name for name in later if now < self.deferred[int(name)]
                   + self.backoff(int(name))}
        last = {str(n) for n in self.pending if self.why.get(n) == "cannot-surge"}
        wave = next_wave(facts, states, max_parallel=self.parallelism,
                         unavailable_budget=self.budget, uncordon="WhenMaintained",
                         later=later, not_now=not_now, last=last, room=room)
        for name, hold in wave.waiting.items():  # its status reason, as the controller's
            n = int(name)
            self.why[n] = hold.code
            self.holds.setdefault(hold.code, set()).add(n)
            self.said[n] = hold.message
        started = [int(n) for n in wave.start]
        for n in started:
            self.pending.remove(n)
            self.why.pop(n, None)
            self.deferred.pop(n, None)
        self.in_progress.update(dict.fromkeys(started))
        self.held = wave.held or ""
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
        if self.by_room:
            bisect.insort(self.pending, node, key=self.position.__getitem__)
            self.why[node] = "deferred"
        return now + self.backoff(node)

    def wedge_reason(self) -> str | None:
        if self.in_progress:
            return None
        budget = (f"maxUnavailable {self.maintenance.max_unavailable} allows no node of "
                  f"{self.nodes} to start ({self.budget} unavailable at most)")
        if not self.by_room:
            if (self.next_pending < self.nodes or self.deferred) \
                    and self.held and self.held != "deferred":
                return budget
            return None
        if self.pending and self.held == "unavailable":
            return budget
        cannot = [n for n in self.pending if self.why.get(n) == "cannot-surge"]
        if cannot:
            return (f"{len(cannot)} node(s) cannot surge even with nothing of the operation "
                    f"in progress (CannotSurge), node {cannot[0]}: {self.said[cannot[0]]}")
        return None
