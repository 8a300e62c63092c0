"""Grouped workloads (multi-node replicas) in the simulator: the rules, as plain functions.

A grouped workload is a LeaderWorkerSet (kubernetes-sigs/lws v0.10.0): each replica is a
group of one leader and size-1 workers, each pod on a node of its own (a group too big for
one node). What the simulator takes from lws, and where it comes from:

- A group is Ready, and serves, only while its leader and all size-1 workers are Ready
  (pkg/controllers/leaderworkerset_controller.go counts readyReplicas that way); traffic
  goes to the leader (the leader Service of vLLM's and SGLang's multi-node guides).
- restartPolicy RecreateGroupOnPodRestart, the default (api/leaderworkerset/v1/
  leaderworkerset_types.go), and RecreateGroupAfterStart: once any pod of a group has a
  deletionTimestamp, the LWS controller deletes the leader with foreground propagation,
  and the worker StatefulSet and every other pod of the group go with it
  (pkg/controllers/pod_controller.go handleRestartPolicy). That DELETE is no eviction: no
  PodDisruptionBudget holds it. The leader's in-flight requests end on its own
  termination timeline, as for any deleted pod. The group comes back under the same names
  (the leader StatefulSet's ordinal, the worker StatefulSet named after the leader), so
  its new pods start only once every old pod is gone (foreground deletion), and it serves
  again once all of them are Ready (model load).
- restartPolicy None (and the deprecated Default): lws recreates nothing itself; an evicted
  worker is recreated under its name by its worker StatefulSet once it is gone, and the
  group serves again when it is Ready. The leader stays Ready and an endpoint meanwhile
  (what a multi-node server answers without its worker is not modelled). An evicted
  leader takes its workers with it: their StatefulSet is owned by the leader pod
  (pod_controller.go setControllerReferenceWithStatefulSet), so the whole group goes.
- A PodDisruptionBudget over the set counts pods, not groups (its selector matches the
  leader and the workers alike).
- Scaling adds or removes whole groups from the highest index (the leader StatefulSet).

What the drain strategies do with a group (drainsafe.simulate.lifecycle):
- kubectl: evicts each pod on the node through the PDB (the Eviction API asks for one
  disruption); under a recreating policy the whole group goes and is recreated after it
  is gone, so the replica is lost for the old leader's exit plus the new group's start-up.
- drainsafe (src/drainsafe/drain/groupsurge.py, make before break): scales the set up by
  one stand-in group per group with a pod on the node, all of a workload's in one step;
  once every stand-in of the step is Ready, evicts the groups' pods on the node (one pod
  per group under a recreating policy, the leader when it is here), each group only when
  the budget lets `size` pods go (drainsafe.pdb reads a budget over groups in whole
  groups); waits until every moved group is Ready again, then scales down (the stand-ins,
  the highest indices, go: deletions like any other, traffic and all).
- surge (a generic make-before-break tool): the same, group by group, each eviction asking
  the budget for one disruption as the Eviction API does.

Placement is all or nothing per group (gang scheduling, as the lws docs recommend with a
gang scheduler): a group whose pods do not all fit holds no GPU while it waits.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


def place_group(open_nodes: Iterable[int], free: Sequence[int], gpus: int, size: int,
                avoid: Collection[int] = ()) -> list[int] | None:
    """Nodes for `size` pods of a group, `gpus` GPUs each: first fit in the given order,
    one pod per node and none on a node in `avoid` (its other pods'); None when they do
    not all fit."""
    chosen: list[int] = []
    for node in open_nodes:
        if free[node] >= gpus and node not in avoid:
            chosen.append(node)
            if len(chosen) == size:
                return chosen
    return None


def serves(ready_pods: int, size: int, deleting: bool) -> bool:
    """A group serves while all of its pods are Ready and none of them is going."""
    return ready_pods == size and not deleting


def disruptions_needed(size: int, takes_group: bool) -> int:
    """Disruptions drainsafe asks a budget for before it evicts one pod of a group: the
    whole group's pods when the eviction takes the group (drainsafe.pdb.group_disruptions
    reads budgets so), one otherwise."""
    return size if takes_group else 1


@dataclass
class GroupLog:
    """Serving spells of the grouped workloads' groups, one row per spell (a group serves
    from the moment all of its pods are Ready until one of them goes): plain arrays for
    tests and reports. `until` is NaN for a spell still going at the end."""

    workload: NDArray[np.int64]
    group: NDArray[np.int64]
    """One incarnation of a replica: all of its pods together (a recreated group is a new
    one; under restartPolicy None a group keeps its number through a worker's return)."""
    standin: NDArray[np.bool_]
    """A stand-in added by a make-before-break drain (removed again by its scale-down)."""
    serving_from: NDArray[np.float64]
    serving_until: NDArray[np.float64]

    @classmethod
    def empty(cls) -> GroupLog:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.bool_),
                   np.zeros(0), np.zeros(0))

    def serving_at(self, t: float, *, standin: bool | None = None) -> int:
        """Groups serving at time t (a spell counts from its start, not at its end)."""
        on = (self.serving_from <= t) & ~(self.serving_until <= t)
        if standin is not None:
            on &= self.standin == standin
        return int(on.sum())
