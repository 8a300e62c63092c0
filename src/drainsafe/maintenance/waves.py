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

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from drainsafe.maintenance.progress import NodeState, in_progress
from drainsafe.maintenance.spec import Uncordon

Held = Literal["parallel", "unavailable", "deferred"]  # why a Pending node did not start


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


def unavailable_count(nodes: Sequence[NodeFacts], states: Mapping[str, NodeState],
                      uncordon: Uncordon) -> int:
    return sum(n.unavailable or in_progress(states.get(n.name, "Pending"), uncordon)
               for n in nodes)


def next_wave(nodes: Sequence[NodeFacts], states: Mapping[str, NodeState], *,
              max_parallel: int, unavailable_budget: int | None,
              uncordon: Uncordon, later: Collection[str] = (),
              not_now: Collection[str] = ()) -> Wave:
    """The nodes to cordon and drain now (in order), and why the other Pending ones wait.
    `later`: Pending nodes deferred before (refused for what others held), started last
    and alone; `not_now`: those of them that may not start yet."""
    active = sum(in_progress(states.get(n.name, "Pending"), uncordon) for n in nodes)
    unavailable = unavailable_count(nodes, states, uncordon)
    pending = [n for n in nodes if states.get(n.name, "Pending") == "Pending"]
    # stable: free ones first, deferred ones last, else as given
    pending.sort(key=lambda n: (n.name in later, not n.unavailable))
    start: list[str] = []
    held: Held | None = None
    for n in pending:
        if n.name in later and (active or n.name in not_now):
            held = held or "deferred"
            continue
        if active >= max_parallel:
            held = "parallel"
            break
        cost = 0 if n.unavailable else 1
        if cost and unavailable_budget is not None and unavailable + cost > unavailable_budget:
            held = "unavailable"
            break
        start.append(n.name)
        active += 1
        unavailable += cost
    return Wave(start=tuple(start), held=held)
