"""Grouped workloads (multi-node replicas) in the simulator: the rules, as plain functions.

A grouped workload is a LeaderWorkerSet (kubernetes-sigs/lws v0.10.0): each replica is a
group of one leader and size-1 workers, each pod on a node of its own (a group too big for
one node). What the simulator takes from lws, and where it comes from:

- A group is Ready, and serves, only while its leader and all size-1 workers are Ready
  (pkg/controllers/leaderworkerset_controller.go counts readyReplicas that way); traffic
  goes to the leader (the leader Service of vLLM's and SGLang's multi-node guides).
- restartPolicy RecreateGroupOnPodRestart, the default (api/leaderworkerset/v1/
  leaderworkerset_types.go): once any pod of a group has a deletionTimestamp, the LWS
  controller deletes the leader with foreground propagation, and the worker StatefulSet
  and every other pod of the group go with it (pkg/controllers/pod_controller.go). That
  DELETE is no eviction: no PodDisruptionBudget holds it. The leader's in-flight requests
  end on its own termination timeline, as for any deleted pod.
- The group comes back under the same names (the leader StatefulSet's ordinal, the worker
  StatefulSet named after the leader), so its new pods start only once every old pod is
  gone (foreground deletion), and it serves again once all of them are Ready (model load).
- A PodDisruptionBudget over the set counts pods, not groups (its selector matches the
  leader and the workers alike).
- Scaling adds or removes whole groups from the highest index (the leader StatefulSet).

What the drain strategies do with a group (drainsafe.simulate.lifecycle):
- kubectl: evicts the pod on the node through the PDB; the whole group goes and is
  recreated after it is gone, so the replica is lost for the old leader's exit plus the
  new group's start-up.
- drainsafe and surge (make before break, after issue 29's design for `drainsafe drain`):
  scale the set up by one stand-in group per group with a pod on the node (the stand-in
  needs `size` distinct nodes with room), once it is Ready evict the group's pod on the
  node, wait until the recreated group is Ready, then scale down again (the stand-in goes,
  a deletion like any other). drainsafe takes the groups of one workload on a node in one
  step; surge goes group by group.

Placement is all or nothing per group (gang scheduling, as the lws docs recommend with a
gang scheduler): a group whose pods do not all fit holds no GPU while it waits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


def place_group(open_nodes: Iterable[int], free: Sequence[int], gpus: int,
                size: int) -> list[int] | None:
    """Nodes for a group's `size` pods of `gpus` GPUs each: first fit in the given order,
    one pod per node; None when the group does not fit as a whole."""
    chosen: list[int] = []
    for node in open_nodes:
        if free[node] >= gpus:
            chosen.append(node)
            if len(chosen) == size:
                return chosen
    return None


def serves(ready_pods: int, size: int, deleting: bool) -> bool:
    """A group serves while all of its pods are Ready and none of them is going."""
    return ready_pods == size and not deleting


def pdb_pods(groups: int, size: int) -> int:
    """The pods a PodDisruptionBudget over a grouped workload counts for `groups` groups."""
    return groups * size


@dataclass
class GroupLog:
    """Per group (one incarnation of a replica) of the grouped workloads, what happened:
    plain arrays for tests and reports. Times are NaN when it never happened."""

    workload: NDArray[np.int64]
    standin: NDArray[np.bool_]
    """A stand-in added by a make-before-break drain (removed again by its scale-down)."""
    serving_from: NDArray[np.float64]
    serving_until: NDArray[np.float64]
    """The first of its pods deleted (or NaN while it still serves at the end)."""
    last_pod_ready: NDArray[np.float64]
    """When the last of its pods turned Ready."""
    first_pod_deleted: NDArray[np.float64]

    @classmethod
    def empty(cls) -> GroupLog:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.bool_), *(np.zeros(0) for _ in range(4)))
