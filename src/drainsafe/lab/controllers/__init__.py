"""The lab's in-process controllers: each reacts to store events, never to a poll.

A controller is level-triggered: any change to a resource it watches wakes it, and one
reconcile pass brings everything it owns to the desired state. Passes must be
idempotent (a pass with nothing to do writes nothing; the store drops no-op updates),
so a controller's own writes wake it at most once more. Time-based work (minReadySeconds,
disruptedPods expiry) asks for a timed wake-up instead of sleeping in a loop.

A test can hold one controller (`hold`, `release`; ControlPlane.holding) as a
kube-controller-manager that is down or between leaders: its resources keep changing
through the API server, it makes no pass until released, then one pass catches up, as a
new leader's first sync does. What a client sees meanwhile is what it would see in such a
gap (a Deployment's generation ahead of its observedGeneration, say), reproducibly rather
than in a window of milliseconds.
"""

from __future__ import annotations

import asyncio
import logging

from drainsafe.lab.apiserver.store import Event, Store

log = logging.getLogger(__name__)


class Controller:
    name = "controller"
    watches: frozenset[str] = frozenset()
    # A pass costs O(objects); waiting this long after a wake-up lets a burst of changes
    # (a kubelet starting 100 pods) land first, so one pass covers them, as the real
    # controllers' work queues batch keys.
    batch_seconds = 0.02

    def __init__(self, store: Store) -> None:
        self.store = store
        self._wake = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._released = asyncio.Event()
        self._released.set()
        self.passes = 0

    def hold(self) -> None:
        """No pass from now until `release` (a pass never runs half: reconcile is sync)."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def _on_event(self, ev: Event) -> None:
        if ev.resource in self.watches:
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def reconcile(self) -> float | None:
        """One pass; returns seconds until a timed re-run is needed, or None."""
        raise NotImplementedError

    def _schedule(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        at = loop.time() + max(delay, 0.05)
        if self._timer is not None and self._timer_at is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = None
        self._wake.set()

    async def run(self) -> None:
        unlisten = self.store.listen(self._on_event)
        self._wake.set()
        try:
            while True:
                await self._wake.wait()
                await asyncio.sleep(self.batch_seconds)
                await self._released.wait()
                self._wake.clear()
                self.passes += 1
                try:
                    delay = self.reconcile()
                except Exception:  # a bad object must not stop the controller
                    log.exception("%s: reconcile failed; retrying in 1 s", self.name)
                    delay = 1.0
                if delay is not None:
                    self._schedule(delay)
        finally:
            unlisten()
            if self._timer is not None:
                self._timer.cancel()
