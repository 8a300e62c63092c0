"""Which nodes of a NodeMaintenance start next, under maxParallelNodes and maxUnavailable.

- maxParallelNodes bounds the nodes in progress (progress.in_progress: cordoned and not yet
  done or failed), as the NVIDIA GPU operator's maxParallelUpgrades bounds the nodes in an
  upgrade state (k8s-operator-libs, pkg/upgrade) and the maintenance-operator's
  maxParallelOperations the nodes it processes.
- maxUnavailable bounds the selected nodes that are unavailable at once: not Ready
  (kube.objects.is_node_ready) or unschedulable, *counting nodes already unavailable* (a
  node down for another reason uses budget), as the Deployment controller counts
  unavailable replicas against its maxUnavailable (pkg/controller/deployment/rolling.go
  reconcileOldReplicaSets). A percent is of the selected nodes, rounded up: apimachinery
  pkg/util/intstr/intstr.go GetScaledValueFromIntOrPercent(roundUp=true), via
  pdb.scaled_value, as a DaemonSet's rollingUpdate.maxUnavailable (apps/v1 API docs:
  "calculated from percentage by rounding up"); so 1 % of a small pool is 1 node, not 0.
- A Pending node already unavailable costs no budget to start (draining it removes no
  capacity that is there), so such nodes go first; the rest keep the order given.
- Only Pending nodes ever start: a node is never started twice.
- A node whose drain was refused for what the other nodes in progress hold (no room for
  its workloads to surge, or a workload they are surging; issue 30: "the nodes whose
  workloads cannot surge are scheduled last and said so") is Pending again (`later`): it
  starts after the other Pending nodes, and only when no other node is in progress, so
  nothing of this operation holds its room then; two deferred nodes started together would
  refuse each other again (each cordoned, each other's room). `not_now`: deferred nodes
  the reconciler holds back a while longer (its backoff). A waiting node holds no slot.
- Room and budgets (`room`, maintenance.roomwaves.WaveRoom.admit): a node joins the wave
  only when the stand-ins of the nodes in progress, of the wave so far and its own fit at
  once, and no budget is taken by more nodes of the wave than it allows; else it waits,
  holding no slot and no budget, and the next Pending node is tried. Why each waits is
  `Wave.waiting`. Nodes that could not surge even with nothing of the operation in progress
  (`last`: the reconciler's CannotSurge, judged again on each snapshot by
  roomwaves.WaveRoom.still_cannot_surge) start after every other Pending node, alone, as
  deferred ones do, and only once they fit.

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from drainsafe.maintenance.progress import NodeState, in_progress
from drainsafe.maintenance.roomwaves import Hold
from drainsafe.maintenance.spec import Uncordon

# why a Pending node did not start
Held = Literal["parallel", "unavailable", "deferred", "room"]
# May this node join the wave so far (beside the nodes in progress)? None: yes.
Admit = Callable[[Sequence[str], str], Hold | None]


@dataclass(frozen=True)
class NodeFacts:
    name: str
    ready: bool
    unschedulable: bool

    @property
    def unavailable(self) -> bool:
        return not self.ready or self.unschedulable


@dataclass(frozen=True)
class Wave:
    start: tuple[str, ...]
    held: Held | None  # why Pending nodes remain unstarted; None: none remain
    waiting: Mapping[str, Hold] = field(default_factory=dict)  # held for room or budget


def unavailable_count(nodes: Sequence[NodeFacts], states: Mapping[str, NodeState],
                      uncordon: Uncordon) -> int:
    return sum(n.unavailable or in_progress(states.get(n.name, "Pending"), uncordon)
               for n in nodes)


def next_wave(nodes: Sequence[NodeFacts], states: Mapping[str, NodeState], *,
              max_parallel: int, unavailable_budget: int | None,
              uncordon: Uncordon, later: Collection[str] = (),
              not_now: Collection[str] = (), last: Collection[str] = (),
              room: Admit | None = None) -> Wave:
    """The nodes to cordon and drain now (in order), and why the other Pending ones wait.
    `later`: Pending nodes deferred before (refused for what others held), started last
    and alone; `not_now`: those of them that may not start yet; `last`: nodes that could
    not surge, started after the others, alone; `room`: whether a node fits beside the
    wave so far (None: not checked)."""
    active = sum(in_progress(states.get(n.name, "Pending"), uncordon) for n in nodes)
    unavailable = unavailable_count(nodes, states, uncordon)
    pending = [n for n in nodes if states.get(n.name, "Pending") == "Pending"]
    # stable: free ones first, deferred ones last, else as given
    alone = set(later) | set(last)
    pending.sort(key=lambda n: (n.name in later, n.name in last, not n.unavailable))
    start: list[str] = []
    held: Held | None = None
    waiting: dict[str, Hold] = {}
    for n in pending:
        if n.name in alone and (active or n.name in not_now
                                or any(w not in alone for w in waiting)):
            # alone: nothing in progress or starting, and no other node waiting for room
            held = held or "deferred"
            continue
        if active >= max_parallel:
            held = "parallel"
            break
        cost = 0 if n.unavailable else 1
        if cost and unavailable_budget is not None and unavailable + cost > unavailable_budget:
            held = "unavailable"
            break
        hold = room(start, n.name) if room is not None else None
        if hold is not None:
            waiting[n.name] = hold
            held = held or "room"
            continue
        start.append(n.name)
        active += 1
        unavailable += cost
    return Wave(start=tuple(start), held=held, waiting=waiting)
