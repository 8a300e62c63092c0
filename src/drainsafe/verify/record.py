"""verify's record: every request and every pod lifecycle event of one run, as JSON.

The record is the contract between `verify` (writes it) and `tune` (reads it), and what a
person keeps next to a rollout to explain each failure. Times are seconds since the start of
the run; `started_at` (Unix seconds) places them on the wall clock, so Kubernetes timestamps
(deletionTimestamp etc.) can be compared.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from drainsafe.verify.load import LoadRun, RequestResult
from drainsafe.verify.outcome import Kind, Outcome

RECORD_FILE = "record.json"
RECORD_VERSION = 1


@dataclass(frozen=True)
class LifecycleEvent:
    """One observed change in a pod's life, placed on the run's time axis."""

    t: float
    """When verify observed it (seconds since the run started)."""
    kind: str
    pod: str
    detail: str = ""
    at: float | None = None
    """The Kubernetes timestamp of the change when the object carries one (e.g.
    deletionTimestamp), in the same seconds-since-start; second resolution."""


EventCallback = Callable[[LifecycleEvent], None]


@dataclass(frozen=True)
class PodMetrics:
    """A terminating pod's drainsafe figures, read through the API server's pod proxy: the
    last scrape that answered before the pod went (drainsafe_* lines of /metrics)."""

    pod: str
    t: float
    """When the scrape answered (seconds since the run started)."""
    port: int
    text: str
    scrapes: int = 1
    """Scrapes that answered while the pod terminated."""

# Event kinds, in the order a pod goes through them during a rollout or drain.
POD_ADDED = "pod_added"
POD_READY = "ready"
POD_NOT_READY = "not_ready"
POD_TERMINATING = "terminating"
"""deletionTimestamp set: termination has started (preStop, then SIGTERM)."""
ENDPOINT_NOT_READY = "endpoint_not_ready"
"""The pod's address is still in an EndpointSlice but no longer ready (proxies stop routing)."""
ENDPOINT_REMOVED = "endpoint_removed"
"""The pod's address has left every EndpointSlice of the service."""
POD_EXITED = "exited"
"""A container of the pod terminated (exit code in detail)."""
POD_DELETED = "deleted"
"""The pod object is gone from the API."""


@dataclass(frozen=True)
class Summary:
    total: int
    counts: dict[str, int]
    """Outcome label -> count; 'ok' first, then failures by count."""
    duration: float
    ttfb_p50: float | None
    ttfb_p99: float | None
    total_p50: float | None
    total_p99: float | None
    total_max: float | None

    @property
    def failed(self) -> int:
        return self.total - self.counts.get(Kind.OK.value, 0)

    @property
    def rate(self) -> float:
        return self.total / self.duration if self.duration > 0 else 0.0


@dataclass
class Record:
    url: str
    mode: str
    settings: dict[str, Any]
    started_at: float
    elapsed: float
    requests: list[RequestResult]
    events: list[LifecycleEvent] = field(default_factory=list)
    not_started: int = 0
    probes: list[RequestResult] = field(default_factory=list)
    """verify's probe load: one fresh connection per request, kept apart from the user's."""
    probe: dict[str, Any] | None = None
    """The probe's settings (URL, rate), None when no probe ran."""
    pod_metrics: list[PodMetrics] = field(default_factory=list)

    @classmethod
    def from_run(cls, run: LoadRun, events: Iterable[LifecycleEvent] = (), *,
                 probe: LoadRun | None = None,
                 pod_metrics: Iterable[PodMetrics] = ()) -> Record:
        spec = run.spec
        settings = {
            "duration": spec.duration, "concurrency": spec.concurrency, "rate": spec.rate,
            "method": spec.method, "end_marker": spec.end_marker, "timeout": spec.timeout,
            "pod_header": spec.pod_header, "max_inflight": spec.max_inflight,
            "keepalive": spec.keepalive,
        }
        probe_settings = None if probe is None else {
            "url": probe.spec.url, "rate": probe.spec.rate, "method": probe.spec.method,
            "error_status": probe.spec.error_status}
        return cls(url=spec.url, mode=spec.mode, settings=settings, started_at=run.started_at,
                   elapsed=run.elapsed, requests=sorted(run.results, key=lambda r: r.start),
                   events=sorted(events, key=lambda e: e.t), not_started=run.not_started,
                   probes=sorted(probe.results if probe else [], key=lambda r: r.start),
                   probe=probe_settings,
                   pod_metrics=sorted(pod_metrics, key=lambda m: m.pod))

    def summary(self) -> Summary:
        """The user's load only; the probe has its own (probe_summary)."""
        return summarize(self.requests, self.elapsed)

    def probe_summary(self) -> Summary | None:
        return None if self.probe is None else summarize(self.probes, self.elapsed)

    @property
    def failed(self) -> int:
        """Failed requests of the user's load and of the probe: either is a client that a
        rollout failed."""
        probe = self.probe_summary()
        return self.summary().failed + (probe.failed if probe else 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "url": self.url,
            "mode": self.mode,
            "settings": self.settings,
            "started_at": self.started_at,
            "elapsed": round(self.elapsed, 6),
            "not_started": self.not_started,
            "summary": _summary_json(self.summary()),
            "requests": [request_json(r) for r in self.requests],
            "events": [asdict(e) for e in self.events],
            "probe": self.probe,
            "probe_summary": (None if (p := self.probe_summary()) is None
                              else _summary_json(p)),
            "probes": [request_json(r) for r in self.probes],
            "pod_metrics": [asdict(m) for m in self.pod_metrics],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], *, source: str = "record") -> Record:
        try:
            if data.get("version") != RECORD_VERSION:
                raise ValueError(f"unsupported version {data.get('version')!r}")
            requests = [request_from_json(r) for r in data["requests"]]
            events = [LifecycleEvent(**e) for e in data.get("events", [])]
            return cls(url=data["url"], mode=data["mode"], settings=data.get("settings", {}),
                       started_at=float(data["started_at"]), elapsed=float(data["elapsed"]),
                       requests=requests, events=events,
                       not_started=int(data.get("not_started", 0)),
                       probes=[request_from_json(r) for r in data.get("probes") or []],
                       probe=data.get("probe"),
                       pod_metrics=[PodMetrics(**m) for m in data.get("pod_metrics") or []])
        except KeyError as exc:
            raise ValueError(f"{source}: not a drainsafe verify record (missing field {exc})"
                             ) from exc
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: not a drainsafe verify record ({exc})") from exc

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / RECORD_FILE
        path.write_text(json.dumps(self.to_json(), separators=(",", ":")) + "\n")
        return path

    @classmethod
    def read(cls, path: Path) -> Record:
        """Read record.json, or the record.json inside a directory."""
        if path.is_dir():
            path = path / RECORD_FILE
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise ValueError(f"{path}: cannot read ({exc.strerror})") from exc
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{path}: not a drainsafe verify record (top level is not an object)")
        return cls.from_json(data, source=str(path))


def summarize(requests: Sequence[RequestResult], duration: float) -> Summary:
    counts = Counter(r.outcome.label for r in requests)
    ordered = {Kind.OK.value: counts.pop(Kind.OK.value, 0)}
    ordered.update(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    ttfbs = sorted(t for r in requests if r.outcome.ok and (t := r.ttfb) is not None)
    totals = sorted(r.total for r in requests if r.outcome.ok)
    return Summary(
        total=len(requests), counts=ordered, duration=duration,
        ttfb_p50=percentile(ttfbs, 50), ttfb_p99=percentile(ttfbs, 99),
        total_p50=percentile(totals, 50), total_p99=percentile(totals, 99),
        total_max=totals[-1] if totals else None,
    )


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (a value that was observed, never interpolated)."""
    if not sorted_values:
        return None
    rank = max(math.ceil(p / 100 * len(sorted_values)), 1)
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _summary_json(summary: Summary) -> dict[str, Any]:
    return {
        "total": summary.total, "failed": summary.failed, "counts": summary.counts,
        "requests_per_second": round(summary.rate, 3),
        "ttfb_p50": summary.ttfb_p50, "ttfb_p99": summary.ttfb_p99,
        "total_p50": summary.total_p50, "total_p99": summary.total_p99,
        "total_max": summary.total_max,
    }


def request_json(r: RequestResult) -> dict[str, Any]:
    """One request as a JSON object (records, and the load process's stream)."""
    return {
        "start": round(r.start, 6), "end": round(r.end, 6),
        "headers": None if r.headers_at is None else round(r.headers_at, 6),
        "first_byte": None if r.first_byte is None else round(r.first_byte, 6),
        "outcome": r.outcome.label, "kind": r.outcome.kind.value, "status": r.outcome.status,
        "detail": r.outcome.detail, "bytes": r.bytes, "pod": r.pod, "fresh": r.fresh,
    }


def request_from_json(d: dict[str, Any]) -> RequestResult:
    outcome = Outcome(Kind(d["kind"]), d.get("status"), d.get("detail", ""))
    return RequestResult(start=float(d["start"]), end=float(d["end"]), outcome=outcome,
                         headers_at=d.get("headers"), first_byte=d.get("first_byte"),
                         bytes=int(d.get("bytes", 0)), pod=d.get("pod"),
                         fresh=d.get("fresh"))
