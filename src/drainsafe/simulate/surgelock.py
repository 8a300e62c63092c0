"""Who may surge a workload, as plain data: the drain engine's lock per workload (one
surge of a workload at a time, SurgeLocks), and the shared surge the simulator predicts
before the engine has it (several nodes' parts of one surge at once, SharedSurges).

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
    """One surge of a workload shared by the nodes that need it: a what-if of the engine
    change issue 30 asks for (nothing of it is in the drain engine yet; the simulator
    predicts it first). Each node holding a part of workload w's surge has
    scaled w by its part: scale = base + the sum of the parts. A node's evictions of w may
    proceed only while w's serving pods off every node holding a part are at least base
    (`may_evict`): the holders' old pods all go sooner or later, so counting them as gone
    already is what keeps concurrent evictions by several holders from dropping w below
    desired. A holder's part leaves once its old pods are gone.

    Plain sharing lets every node join at once; when the parts' new pods outgrow the free
    room, some stay Pending, the gate never opens, and every holder waits for the others
    (a wedge). With `join_room` a node joins an existing shared surge only if its new pods
    fit on the free room now; otherwise it waits, first come first served, until a part
    leaves. The first holder always joins (with no part in place it is the lock's surge).
    """

    join_room: bool = False
    parts: dict[int, dict[int, int]] = field(default_factory=dict)
    """Per workload index: node -> pods its part added to the scale, in join order."""
    waiting: dict[int, deque[int]] = field(default_factory=dict)
    """Per workload index: nodes waiting to join (join_room only), in order."""

    def join(self, w: int, node: int, part: int, fits: bool) -> bool:
        """True: `node` holds a part of w's surge now (or already); False: it waits."""
        holders = self.parts.setdefault(w, {})
        if node in holders:
            return True
        if holders and self.join_room and not fits:
            queue = self.waiting.setdefault(w, deque())
            if node not in queue:
                queue.append(node)
            return False
        holders[node] = part
        return True

    def leave(self, w: int, node: int) -> list[int]:
        """`node`'s part is done (its old pods gone): the nodes that may try to join again
        now, in order (each then calls `join`; one that still does not fit waits on)."""
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
    def may_evict(serving_off_holders: int, base: int) -> bool:
        """The gate on every eviction of a holder's old pod: the pods serving on nodes
        that hold no part are enough on their own."""
        return serving_off_holders >= base
