"""The drain runtime: lifecycle state, in-flight tracking, figures, metrics and phase logs.

One `DrainRuntime` per server process. The ASGI middleware (drainsafe.asgi), the uvicorn
shell (drainsafe.server.serve) and the proxy (drainsafe.server.proxy) all register each
request as a `Tracked` and feed signals and clock ticks in; the pure lifecycle
(drainsafe.server.lifecycle) decides what happens next.

The hot path (`track`/`finish`, `DurationHistogram.observe`) only touches plain attributes;
Prometheus figures are read from them at scrape time by a custom collector, so serving costs
no metric locks.

Each response names the pod that served it (`x-drainsafe-pod`, from env POD_NAME or else
HOSTNAME), so `drainsafe verify` can place every request on its pod; request durations go
into `drainsafe_request_duration_seconds`, which `drainsafe tune` reads for the shutdown
deadline.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from drainsafe.server import lifecycle
from drainsafe.server.config import Paths, Settings
from drainsafe.server.lifecycle import Phase, State

logger = logging.getLogger("drainsafe.server")

POD_HEADER = "x-drainsafe-pod"
"""Response header naming the pod that served the request. drainsafe verify reads it
(drainsafe.verify.load.DEFAULT_POD_HEADER) to place each request on its pod."""
POD_ENV = ("POD_NAME", "HOSTNAME")
"""Where the pod name comes from, first set wins: POD_NAME from the downward API
(`fieldRef: {fieldPath: metadata.name}`), else HOSTNAME, which the kubelet sets to the pod
name unless `spec.hostname` overrides it (kubernetes.io/docs/concepts/services-networking/
dns-pod-service/#pod-hostname-and-subdomain-field)."""
_HEADER_VALUE = re.compile(r"[\x21-\x7e]+")

DURATION_METRIC = "drainsafe_request_duration_seconds"
"""drainsafe tune reads any `*_request_duration_seconds` histogram (drainsafe.verify.tune
DURATION_SUFFIX) at p99, as the upper bound of its bucket, for the shutdown deadline."""
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0,
                    45.0, 60.0, 75.0, 90.0, 105.0, 120.0)
"""From a quick API call to a 90 s generation and beyond. tune recommends the deadline from
a bucket's upper bound, so long requests get bounds at most 15 s apart."""


def pod_name(environ: Mapping[str, str]) -> str | None:
    """The pod's name for the response header, or None (then no header is sent)."""
    for key in POD_ENV:
        value = environ.get(key, "").strip()
        if not value:
            continue
        if _HEADER_VALUE.fullmatch(value):
            return value
        logger.warning("drainsafe: %s=%r is not a valid header value; responses will not "
                       "carry %s", key, value, POD_HEADER)
        return None
    return None


class DurationHistogram:
    """Request durations in Prometheus histogram buckets, exported at scrape time.

    Observed only on the event loop's thread, like every figure of the runtime, so one
    bisect and two increments suffice (~0.4 µs; drainsafe serve records on its tick
    instead, drainsafe.server.ticktimer). prometheus_client's `Histogram.observe` takes a
    lock per bucket and sum update (~2 µs), which serve's goal (>= 0.97x bare uvicorn)
    cannot pay.
    """

    __slots__ = ("bounds", "counts", "help", "sum")

    def __init__(self, bounds: tuple[float, ...] = DURATION_BUCKETS) -> None:
        self.bounds = bounds
        self.help = "Seconds from request received to response sent in full"
        """The metric's HELP: says how the durations were taken."""
        self.counts = [0] * (len(bounds) + 1)
        """Per bucket, not cumulative; the last one is +Inf."""
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        # bisect_left: the first bound >= seconds, as Prometheus's `le` is inclusive.
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def observe_many(self, seconds: float, n: int) -> None:
        """`n` requests that took `seconds` each."""
        self.counts[bisect_left(self.bounds, seconds)] += n
        self.sum += seconds * n

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, cumulative count) rows in exposition order, ending with +Inf."""
        rows: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip((*self.bounds, math.inf), self.counts, strict=True):
            total += n
            # `le` as prometheus_client writes it: 1.0, 0.05, +Inf
            rows.append(("+Inf" if bound == math.inf else repr(float(bound)), float(total)))
        return rows


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


class DrainRuntime:
    def __init__(self, settings: Settings, *, paths: Paths | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.paths = paths or Paths()
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
        self.durations = DurationHistogram()
        """Durations of requests whose response was sent in full (not probes or scrapes;
        not requests ended at the deadline: those are in `cut_count`)."""
        self.pod = pod_name(os.environ if environ is None else environ)
        self.pod_header: tuple[bytes, bytes] | None = None if self.pod is None \
            else (POD_HEADER.encode(), self.pod.encode())
        self._phase_event = asyncio.Event()  # binds to a loop on first wait (3.10+)
        self.cutter: Callable[[], int] | None = None
        """Ends whatever is in flight elsewhere than `open` (drainsafe serve); returns how many."""
        self.probe: Callable[[], tuple[int, int]] | None = None
        """(in flight, streams in flight) from elsewhere than `open`: drainsafe serve reads
        them from uvicorn's own request cycles, which costs nothing per request."""
        self.refresh: Callable[[], object] | None = None
        """Brings `durations` and `requests_total` up to date before a scrape reads them
        (drainsafe serve counts and times requests on its looks at uvicorn's cycles:
        drainsafe.server.ticktimer)."""
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

    def tick(self, in_flight: int | None = None, newest_idle: float | None = None) -> None:
        """Let time move the lifecycle on; cut open work when the deadline has come.

        `in_flight` overrides the tracked count (signal mode reads the child's metric);
        `newest_idle` is when the most recently idle open connection went idle."""
        now = self.clock()
        count = self.in_flight() if in_flight is None else in_flight
        state = lifecycle.advance(self.state, now, self.settings, in_flight=count,
                                  newest_idle=newest_idle)
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
                async with asyncio.timeout(remaining):
                    await event.wait()
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
        if rt.refresh is not None:
            rt.refresh()
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
        yield HistogramMetricFamily(
            DURATION_METRIC, rt.durations.help, buckets=rt.durations.cumulative(),
            sum_value=rt.durations.sum)
        yield GaugeMetricFamily("drainsafe_drain_delay_seconds", "Configured drain delay",
                                value=rt.settings.drain_delay)
        yield GaugeMetricFamily("drainsafe_shutdown_timeout_seconds",
                                "Configured shutdown deadline", value=rt.settings.shutdown_timeout)
