"""One surge of a workload at a time: the drain engine's lock per workload, as plain data.

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
