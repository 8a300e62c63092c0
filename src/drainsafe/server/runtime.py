"""The drain runtime: lifecycle state, in-flight tracking, figures, metrics and phase logs.

One `DrainRuntime` per server process. The ASGI middleware (drainsafe.asgi), the uvicorn
shell (drainsafe.server.serve) and the proxy (drainsafe.server.proxy) all register each
request as a `Tracked` and feed signals and clock ticks in; the pure lifecycle
(drainsafe.server.lifecycle) decides what happens next.

The hot path (`track`/`finish`) only touches plain attributes; Prometheus figures are read
from them at scrape time by a custom collector, so serving costs no metric locks.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from drainsafe.server import lifecycle
from drainsafe.server.lifecycle import Phase, Settings, State

logger = logging.getLogger("drainsafe.server")


class Tracked:
    """One request in flight. Subclasses know how to end it on purpose (`cut`)."""

    __slots__ = ("complete", "started", "was_cut")

    def __init__(self) -> None:
        self.started = False
        self.complete = False
        self.was_cut = False

    @property
    def stream(self) -> bool:
        """Whether this is a response body still being streamed (SSE or chunked)."""
        return False

    def cut(self) -> None:
        """End this request now, with the explicit marker where the response allows."""
        self.was_cut = True


@dataclass(frozen=True)
class Paths:
    """The runtime's own endpoints. The app's routes win over them (never shadowed)."""

    ready: str = "/readyz"
    live: str = "/livez"
    drain: str = "/drainsafe/drain"
    metrics: str = "/metrics"

    def all(self) -> frozenset[str]:
        return frozenset(p for p in (self.ready, self.live, self.drain, self.metrics) if p)


class DrainRuntime:
    def __init__(self, settings: Settings, *, paths: Paths | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.paths = paths or Paths()
        self.own_paths = self.paths.all()
        self.clock = clock
        self.wall = wall
        self.state = State()
        self.serving = True
        """Hot-path copy of `state.phase is SERVING`."""
        self.open: set[Tracked] = set()
        self.requests_total = 0
        self.received_after_drain = 0
        self.last_after_drain: float | None = None
        """Seconds from drain start to the last request received (the seed's figure)."""
        self.cut_count = 0
        self._phase_event = asyncio.Event()  # binds to a loop on first wait (3.10+)
        self.cutter: Callable[[], int] | None = None
        """Ends whatever is in flight elsewhere than `open` (drainsafe serve); returns how many."""
        self.probe: Callable[[], tuple[int, int]] | None = None
        """(in flight, streams in flight) from elsewhere than `open`: drainsafe serve reads
        them from uvicorn's own request cycles, which costs nothing per request."""
        self._listeners: list[Callable[[Phase], None]] = []

    # -- hot path -------------------------------------------------------------------
    def track(self, tracked: Tracked) -> None:
        self.open.add(tracked)
        self.requests_total += 1
        if not self.serving:
            self.note_late()

    def note_late(self) -> None:
        """A request arrived after the drain began."""
        self.received_after_drain += 1
        started = self.state.drain_started
        if started is not None:
            self.last_after_drain = self.clock() - started

    def finish(self, tracked: Tracked) -> None:
        self.open.discard(tracked)

    # -- events ---------------------------------------------------------------------
    @property
    def phase(self) -> Phase:
        return self.state.phase

    def on_phase(self, listener: Callable[[Phase], None]) -> None:
        self._listeners.append(listener)

    def signal(self, name: str) -> None:
        """A termination signal arrived (first: drain; second: force exit)."""
        self._apply(lifecycle.on_signal(self.state, self.clock(), name))
        self.tick()

    def request_drain(self, reason: str) -> None:
        """An explicit drain request (e.g. the preStop httpGet endpoint)."""
        self._apply(lifecycle.begin_drain(self.state, self.clock(), reason))

    def tick(self, in_flight: int | None = None) -> None:
        """Let time move the lifecycle on; cut open work when the deadline has come.

        `in_flight` overrides the tracked count (signal mode reads the child's metric)."""
        now = self.clock()
        count = self.in_flight() if in_flight is None else in_flight
        state = lifecycle.advance(self.state, now, self.settings, in_flight=count)
        if lifecycle.should_cut(state, now, self.settings) and self.in_flight():
            self.cut_all()
        self._apply(state)

    def cut_all(self) -> int:
        """End every request still open with the explicit marker; returns how many."""
        cut = self.cutter() if self.cutter is not None else 0
        for tracked in list(self.open):
            if tracked.complete or tracked.was_cut:
                continue
            tracked.cut()
            cut += 1
        self.cut_count += cut
        if cut:
            logger.warning("drainsafe: ended %d request(s) at the shutdown deadline", cut)
        return cut

    def exit_code(self) -> int:
        if self.probe is not None:
            left = self.probe()[0]
        else:
            left = sum(1 for t in self.open if not t.was_cut)
        return lifecycle.exit_code(self.state, cut=self.cut_count, in_flight=left)

    def in_flight(self) -> int:
        return self.probe()[0] if self.probe is not None else len(self.open)

    async def wait_phase(self, *phases: Phase, timeout: float | None = None) -> bool:
        """Wait until the lifecycle is in one of `phases` (False on timeout)."""
        deadline = None if timeout is None else self.clock() + timeout
        while self.state.phase not in phases:
            event = self._phase_event
            remaining = None if deadline is None else deadline - self.clock()
            if remaining is not None and remaining <= 0:
                return False
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return False
        return True

    # -- figures --------------------------------------------------------------------
    def streams_in_flight(self) -> int:
        if self.probe is not None:
            return self.probe()[1]
        return sum(1 for t in list(self.open) if t.stream and not t.complete)

    def figures(self) -> dict[str, object]:
        return {
            "reason": self.state.drain_reason or None,
            "in_flight": self.in_flight(),
            "streams_in_flight": self.streams_in_flight(),
            "requests_after_drain": self.received_after_drain,
            "last_request_after_drain_s": None if self.last_after_drain is None
            else round(self.last_after_drain, 3),
            "cut_at_deadline": self.cut_count,
            "drain_delay_s": self.settings.drain_delay,
            "shutdown_timeout_s": self.settings.shutdown_timeout,
        }

    def registry(self) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_RuntimeCollector(self))
        return registry

    # -- internals ------------------------------------------------------------------
    def _apply(self, state: State) -> None:
        changed = state.phase is not self.state.phase
        self.state = state
        self.serving = state.phase is Phase.SERVING
        if not changed:
            return
        figures = self.figures()
        if state.phase is Phase.EXIT:
            figures["exit_code"] = self.exit_code()
            figures["forced"] = state.forced
        logger.info("%s", lifecycle.phase_log_line(state.phase, self.wall(), **figures))
        self._phase_event.set()
        self._phase_event = asyncio.Event()
        for listener in self._listeners:
            listener(state.phase)


class _RuntimeCollector(Collector):
    def __init__(self, runtime: DrainRuntime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        rt = self.runtime
        phase = GaugeMetricFamily("drainsafe_phase", "Lifecycle phase (1 = current)",
                                  labels=["phase"])
        for p in Phase:
            phase.add_metric([p.value], 1.0 if rt.phase is p else 0.0)
        yield phase
        yield GaugeMetricFamily("drainsafe_in_flight_requests",
                                "Requests received and not yet answered", value=rt.in_flight())
        yield GaugeMetricFamily("drainsafe_in_flight_streams",
                                "Streamed responses (SSE, chunked) still being written",
                                value=rt.streams_in_flight())
        yield CounterMetricFamily("drainsafe_requests", "Requests received",
                                  value=rt.requests_total)
        yield CounterMetricFamily("drainsafe_requests_after_drain",
                                  "Requests received after the drain began",
                                  value=rt.received_after_drain)
        yield GaugeMetricFamily(
            "drainsafe_last_request_after_drain_seconds",
            "Seconds from drain start to the last request received (NaN: none)",
            value=math.nan if rt.last_after_drain is None else rt.last_after_drain)
        yield CounterMetricFamily("drainsafe_streams_cut",
                                  "Requests and streams ended at the shutdown deadline",
                                  value=rt.cut_count)
        yield GaugeMetricFamily("drainsafe_drain_delay_seconds", "Configured drain delay",
                                value=rt.settings.drain_delay)
        yield GaugeMetricFamily("drainsafe_shutdown_timeout_seconds",
                                "Configured shutdown deadline", value=rt.settings.shutdown_timeout)
