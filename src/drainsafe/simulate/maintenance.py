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

Not modelled: a node the controller defers because its workloads have no room to surge yet
(controller.maintenance, Deferred: cordon given back, retried last and alone after a
backoff); in the simulator the surge pods wait Pending for room instead, on a node that
stays cordoned. So where room is short the simulator's nodes hold their slot meanwhile
and the lab's do not, and the lab adds the backoff.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drainsafe.maintenance.progress import NodeState
from drainsafe.maintenance.waves import NodeFacts, next_wave
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

    def start(self) -> list[int]:
        """The nodes to cordon and drain now."""
        pending = [self.order[i] for i in range(
            self.next_pending, min(self.next_pending + self.parallelism, self.nodes))]
        window = list(self.in_progress) + pending
        states: dict[str, NodeState] = {str(n): "Draining" for n in self.in_progress}
        facts = [NodeFacts(str(n), ready=True, unschedulable=n in self.in_progress)
                 for n in window]
        wave = next_wave(facts, states, max_parallel=self.parallelism,
                         unavailable_budget=self.budget, uncordon="WhenMaintained")
        started = [int(n) for n in wave.start]
        # Pending nodes are all available, so the planner keeps them in order.
        assert started == pending[:len(started)]
        self.next_pending += len(started)
        self.in_progress.update(dict.fromkeys(started))
        self.held = wave.held or ""
        return started

    def back(self, node: int) -> list[int]:
        """`node` is Uncordoned: the nodes that start now."""
        self.in_progress.pop(node, None)
        return self.start()

    def wedge_reason(self) -> str | None:
        if self.next_pending < self.nodes and not self.in_progress and self.held:
            return (f"maxUnavailable {self.maintenance.max_unavailable} allows no node of "
                    f"{self.nodes} to start ({self.budget} unavailable at most)")
        return None
