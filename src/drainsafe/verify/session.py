"""One verify run: optional lifecycle watch, the load, the probe, and the record that joins them.

While verify watches pods it also sends a small probe load: one fresh connection per request
at a bounded rate, so that a proxy routes every probe afresh and tune can bound the
propagation lag (drainsafe.verify.propagation) whatever the user's load reuses. The probe is
recorded apart from the user's load. The terminating pods' drainsafe figures are read
through the API server's pod proxy (drainsafe.verify.podmetrics).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from drainsafe.verify.load import LoadRun, LoadSpec, ResultCallback, run_load
from drainsafe.verify.propagation import DEFAULT_PROBE_RATE
from drainsafe.verify.record import EventCallback, LifecycleEvent, PodMetrics, Record

PROBE_ERROR_STATUS = 500
"""Any answer below 500 from the probe path shows a live pod answered a fresh connection."""
PROBE_MAX_INFLIGHT = 100
WATCH_SYNC_SECONDS = 30.0
"""How long the pod and EndpointSlice watches get for their first list (the informers retry
meanwhile); past it verify stops with the API server's last error, before the load."""


@dataclass(frozen=True)
class ProbeSpec:
    rate: float = DEFAULT_PROBE_RATE
    """Fresh connections per second (0: no probe)."""
    path: str = "/"

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise ValueError(f"probe rate must be >= 0 requests/s (got {self.rate:g})")
        if not self.path.startswith("/"):
            raise ValueError(f"probe path must start with / (got {self.path!r})")

    def load(self, spec: LoadSpec, duration: float) -> LoadSpec:
        """GET PATH on the user's scheme, host and port, a new connection each."""
        parts = urlsplit(spec.url)
        path, _, query = self.path.partition("?")
        url = urlunsplit((parts.scheme, parts.netloc, path, query, ""))
        return dataclasses.replace(
            spec, url=url, duration=duration, rate=self.rate, method="GET", body=None,
            end_marker=None, keepalive=False, error_status=PROBE_ERROR_STATUS,
            max_inflight=PROBE_MAX_INFLIGHT, timeout=min(spec.timeout, 10.0))


@dataclass(frozen=True)
class WatchSpec:
    namespace: str
    selector: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    linger: float = 0.0
    """Seconds to keep watching after the load ends (to see late exits and deletions)."""
    probe: ProbeSpec = ProbeSpec()
    metrics_port: str | None = None
    """Where to read the pods' drainsafe metrics when they declare no `drainsafe-admin`
    port: a number or a declared port's name (None: not read)."""


async def verify(spec: LoadSpec, *, watch: WatchSpec | None = None,
                 on_result: ResultCallback | None = None,
                 on_event: EventCallback | None = None,
                 stop: asyncio.Event | None = None) -> Record:
    if watch is None:
        run = await run_load(spec, on_result=on_result, stop=stop)
        return Record.from_run(run)

    from drainsafe.kube.client import KubeClient
    from drainsafe.verify.podmetrics import PodMetricsReader
    from drainsafe.verify.watch import LifecycleWatch

    clock_zero = (time.monotonic(), time.time())
    events: list[LifecycleEvent] = []
    figures: list[PodMetrics] = []
    probe_run: LoadRun | None = None
    async with KubeClient.from_kubeconfig(watch.kubeconfig, watch.context) as client:
        reader = PodMetricsReader(client, watch.namespace, watch.metrics_port, clock_zero[0])
        watcher = LifecycleWatch(client, watch.namespace, watch.selector, clock_zero, on_event,
                                 metrics=reader)
        await watcher.start(sync_timeout=WATCH_SYNC_SECONDS)
        probing = asyncio.Event()
        probe_task = None
        if watch.probe.rate > 0:
            # Runs while verify watches (the load and the linger), stopped by `probing`.
            probe_spec = watch.probe.load(spec, spec.duration + watch.linger + 3600)
            probe_task = asyncio.ensure_future(
                run_load(probe_spec, stop=probing, clock_zero=clock_zero))
        try:
            run = await run_load(spec, on_result=on_result, stop=stop, clock_zero=clock_zero)
            if watch.linger > 0 and not (stop and stop.is_set()):
                await asyncio.sleep(watch.linger)
        finally:
            probing.set()
            if probe_task is not None:
                probe_run = await probe_task
            figures = await reader.stop()
            await watcher.stop()
            events = watcher.events
    return Record.from_run(run, events, probe=probe_run, pod_metrics=figures)
