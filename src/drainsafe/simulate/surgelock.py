"""Who may surge a workload, as plain data: the drain engine's lock per workload (one
surge of a workload at a time, SurgeLocks: StatefulSets and LeaderWorkerSets, and every
workload under `upgrade.surge_sharing: lock`, the engine before issue 30), and a
Deployment's shared surge (several nodes' parts of one surge at once, SharedSurges: the
engine's drain.sharedsurge, its rules drain.parts).

drainsafe's drainers of one fleet run (src/drainsafe/drain/fleet.py) and of the
NodeMaintenance controller (controller/maintenance.py, its `_surges`) share a dict of
asyncio.Lock keyed by workload; surgefirst.drain_workload and groupsurge.drain_groups hold
it for the whole surge of that workload for one node: record, scale up, wait for the new
pods, evict, wait until the evicted pods are gone (and, for groups, reloaded), restore.
asyncio.Lock wakes its waiters first come, first served (CPython asyncio/locks.py), so a
second node's surge of the workload waits in that order.

A surge recorded before a node's preflight is what the controller's preflight sees
(drain.preflight "surge-owned"): `owned_by_other` counts a holder from an earlier instant
only, since the preflights of nodes started in one wave run side by side, before either
records its surge.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from drainsafe.drain.parts import may_evict, may_join


@dataclass
class SurgeLocks:
    """Per workload index: the node whose surge holds it (and since when), and the nodes
    waiting, in order."""

    holder: dict[int, int] = field(default_factory=dict)
    since: dict[int, float] = field(default_factory=dict)
    waiting: dict[int, deque[int]] = field(default_factory=dict)

    def acquire(self, w: int, node: int, now: float) -> bool:
        """True: `node` holds workload w's lock (now, or already); False: it waits."""
        held = self.holder.get(w)
        if held is None:
            self.holder[w] = node
            self.since[w] = now
            return True
        if held == node:
            return True
        queue = self.waiting.setdefault(w, deque())
        if node not in queue:
            queue.append(node)
        return False

    def release(self, w: int, now: float) -> int | None:
        """The holder's surge is done: the next waiting node holds it now (returned)."""
        queue = self.waiting.get(w)
        if not queue:
            self.holder.pop(w, None)
            self.since.pop(w, None)
            return None
        node = queue.popleft()
        self.holder[w] = node
        self.since[w] = now
        return node

    def owned_by_other(self, w: int, node: int, now: float) -> bool:
        """Another node's surge of w was recorded before now."""
        held = self.holder.get(w)
        return held is not None and held != node and self.since[w] < now


def first_fit(free: list[int], open_nodes: Iterable[int], gpus: int, pods: int) -> bool:
    """Whether `pods` new pods of `gpus` GPUs each fit on the open nodes' free GPUs now,
    first fit in node order (the scheduler's placement in the simulator,
    drainsafe.simulate.pods); `free` is taken from when they do, left as it was when not."""
    order = list(open_nodes)
    taken: list[int] = []
    for _ in range(pods):
        for n in order:
            if free[n] >= gpus:
                free[n] -= gpus
                taken.append(n)
                break
        else:
            for n in taken:
                free[n] += gpus
            return False
    return True


@dataclass
class SharedSurges:
    """A Deployment's surge shared by the nodes that drain it, as drain.sharedsurge runs
    it (one decider per workload, the fleet run or the NodeMaintenance leader): each node
    holding a part has scaled the workload by its part (scale = base + parts).

    - Join on room (drain.parts.may_join): a node joins while others hold parts only if
      its new pods, with the holders' still unplaced ones, fit now; else it waits, first
      come first served, until a part leaves, and decides again. A node alone joins.
    - A holder waits until base pods are Available off its node (drain.surgefirst
      _wait_surge), then evicts its old pods one at a time through the counting gate
      (drain.parts.may_evict): the workload's Available pods minus that pod stay at or
      above base, whichever holder evicts.
    - A part comes down by one with each accepted eviction, so it leaves with its last
      old pod's eviction (not when that pod is gone).
    """

    parts: dict[int, dict[int, int]] = field(default_factory=dict)
    """Per workload index: node -> pods its part added to the scale, in join order."""
    waiting: dict[int, deque[int]] = field(default_factory=dict)
    """Per workload index: nodes waiting to join, in order."""

    def join(self, w: int, node: int, part: int, fits: bool) -> bool:
        """True: `node` holds a part of w's surge now (or already); False: it waits."""
        holders = self.parts.setdefault(w, {})
        if node in holders:
            return True
        if not may_join(len(holders), fits):
            queue = self.waiting.setdefault(w, deque())
            if node not in queue:
                queue.append(node)
            return False
        holders[node] = part
        return True

    def leave(self, w: int, node: int) -> list[int]:
        """`node`'s part is down to nothing (its old pods evicted): the nodes that may
        try to join again now, in order (each then calls `join`; one that still does not
        fit waits on)."""
        holders = self.parts.get(w, {})
        holders.pop(node, None)
        if not holders:
            self.parts.pop(w, None)
        queue = self.waiting.pop(w, None)
        return list(queue) if queue else []

    def holders(self, w: int) -> list[int]:
        return list(self.parts.get(w, ()))

    def holds(self, w: int, node: int) -> bool:
        return node in self.parts.get(w, ())

    def scale(self, w: int, base: int) -> int:
        """The workload's scale while shared: base plus every holder's part."""
        return base + sum(self.parts.get(w, {}).values())

    @staticmethod
    def may_evict(available: int, base: int, *, serving: bool) -> bool:
        """The counting gate (drain.parts.may_evict): evicting this old pod (`serving`:
        one of the `available`) leaves the workload at or above base."""
        return may_evict(available, base, serving=serving)
