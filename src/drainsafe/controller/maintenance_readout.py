"""The reconciler's readout of a NodeMaintenance: the node table, conditions and Events with
every status write, and the lowest capacity its drains read.

- Every status write of the reconciler goes through `complete` (maintenance.readout
  with_readout: the node table and the conditions) and, once written, `written`, which
  records the Events of that change (maintenance.readout transition_events) on the object
  through the guard's recorder (controller.events, as client-go's EventRecorder: in the
  background, best effort). An Event follows a status change the API server accepted, so
  a conflict retried or a write lost gives none, and a new leader gives the Events of
  what it writes.
- Each node's drain reports every capacity reading it takes (drain.capacity, through
  drain.execute.NodeDrainer on_capacity). A reading lower than the lowest this process
  knows for the operation (seeded from status.lowestCapacity, so a new leader keeps the
  minimum already written) is written to status by one flush at a time per operation,
  merged there with what the status holds (maintenance.capacity.lowest): the value only
  ever goes down, and a burst of readings costs one write.
- `deleting` records the Deleting Event once per object in this process.
- A graceful stop (SIGTERM) or the lead lost waits a bounded while (controller.events
  FLUSH_SECONDS, as for the Events) for the lowest-capacity writes still on their way, so
  a low reading taken just before it is written, and its CapacityBelowDesired Event given
  to the recorder; a stop then cancels what is left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from drainsafe.controller.events import (
    FLUSH_SECONDS,
    EventRecorder,
    await_writes,
    finish_writes,
)
from drainsafe.drain.capacity import CapacityReading
from drainsafe.kube.objects import meta, rfc3339
from drainsafe.maintenance.capacity import LowestCapacity, from_status, lowest
from drainsafe.maintenance.maintained import marks_text
from drainsafe.maintenance.progress import read_nodes, to_give_back
from drainsafe.maintenance.readout import transition_events, with_readout
from drainsafe.maintenance.spec import (
    UNCORDON,
    MaintainedWhen,
    SpecError,
    Uncordon,
    parse_spec,
)

Obj = dict[str, Any]
# writes a status: (name, decide(obj) -> new status or None) -> written
PutStatus = Callable[[str, Callable[[Obj], Obj | None]], Awaitable[bool]]


class MaintenanceReadout:
    def __init__(self, events: EventRecorder, *, clock: Callable[[], float]) -> None:
        self.events, self.clock = events, clock
        self._lowest: dict[str, LowestCapacity] = {}
        self._flushes: dict[str, asyncio.Task[None]] = {}
        self._deleting: set[str] = set()

    # -- every status write ------------------------------------------------------------

    def complete(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> Obj:
        return with_readout(status, name=str(meta(obj).get("name")),
                            uncordon=_uncordon(obj), mark=_marks(obj),
                            now=rfc3339(self.clock()),
                            generation=int(meta(obj).get("generation") or 0))

    def written(self, obj: Mapping[str, Any], old: Mapping[str, Any],
                new: Mapping[str, Any]) -> None:
        for e in transition_events(old, new, name=str(meta(obj).get("name")),
                                   uncordon=_uncordon(obj), mark=_marks(obj)):
            self.events.emit(obj, "NodeMaintenance", e.reason, e.message, e.type)

    def deleting(self, obj: Mapping[str, Any]) -> None:
        uid = str(meta(obj).get("uid"))
        if uid in self._deleting:
            return
        self._deleting.add(uid)
        raw = _uncordon(obj)
        mode: Uncordon = next((u for u in UNCORDON if u == raw), "Immediately")
        held = [n for n, p in read_nodes(obj.get("status") or {}).items()
                if to_give_back(p.state, mode)]
        self.events.emit(obj, "NodeMaintenance", "Deleting",
                         "deleted: node tasks stopped; giving back the cordons and surges of "
                         + (", ".join(held) if held else "no node") + ", then the finalizer")

    # -- lowest capacity -----------------------------------------------------------------

    def reading(self, obj: Mapping[str, Any] | None, name: str, node: str,
                r: CapacityReading, put_status: PutStatus) -> None:
        """A drain's reading (called from its watch's event hook: no await here)."""
        known = self._lowest.get(name)
        if known is None and obj is not None:
            known = from_status(obj.get("status") or {})
        seen = LowestCapacity.of(r, node=node, at=rfc3339(self.clock()))
        low = lowest(known, seen)
        if low is None or (known is not None and low == known):
            if known is not None:
                self._lowest[name] = known
            return
        self._lowest[name] = low
        if name not in self._flushes:
            self._flushes[name] = asyncio.create_task(self._flush(name, put_status),
                                                      name=f"lowest capacity {name}")

    async def _flush(self, name: str, put_status: PutStatus) -> None:
        def decide(obj: Obj) -> Obj | None:
            old = obj.get("status") or {}
            low = lowest(from_status(old), self._lowest.get(name))
            if low is None or low == from_status(old):
                return None
            self._lowest[name] = low
            return {**old, "lowestCapacity": low.as_status()}

        try:
            while True:  # again if a lower reading came while this write was on its way
                target = self._lowest.get(name)
                await put_status(name, decide)
                if self._lowest.get(name) == target:
                    return
        finally:
            self._flushes.pop(name, None)

    async def flush(self, bound: float = FLUSH_SECONDS) -> None:
        """Wait up to `bound` seconds for the lowest capacity still being written."""
        await await_writes(self._flushes.values(), bound)

    async def stop(self, bound: float = FLUSH_SECONDS) -> None:
        """Write the lowest capacity still on its way (up to `bound` seconds; its Events
        are then the recorder's to flush), then cancel the rest. Cancelled at once, a
        reading taken just before a SIGTERM was lost with its CapacityBelowDesired Event."""
        await finish_writes(self._flushes.values(), bound)


def _marks(obj: Mapping[str, Any]) -> str:
    """What marks this operation's nodes maintained (spec.maintainedWhen), in words; a spec
    the reconciler would refuse reads as the default mark."""
    name = str(meta(obj).get("name"))
    try:
        when = parse_spec(dict(obj)).maintained_when
    except SpecError:
        when = MaintainedWhen()
    return marks_text(when, name)


def _uncordon(obj: Mapping[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("uncordon") or "Immediately")
