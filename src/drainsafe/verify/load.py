"""Constant load over a keep-alive connection pool, every request observed and classified.

Closed loop: N workers, each sends its next request when the previous one ends (like hey -c N).
Open loop: requests start at a fixed rate whatever the server does, so a slow server builds a
queue instead of slowing the load down; a cap on requests in flight keeps the client itself
bounded, and requests that could not start because of the cap are counted, not hidden.

Connections are kept alive and reused the way a real client pool (or a proxy's upstream pool)
reuses them; that is what exposes the keep-alive races at shutdown. httpx sends every request.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from drainsafe.verify.outcome import (
    DEFAULT_END_MARKER,
    Failure,
    Observation,
    Outcome,
    classify,
    error_message,
    failure_of,
)
from drainsafe.verify.scan import MarkerScanner

DEFAULT_TIMEOUT_SECONDS = 120.0
"""Per request, whole exchange: above the 90 s generations the project is about."""
now = time.monotonic

DEFAULT_POD_HEADER = "x-drainsafe-pod"
"""Response header naming the pod that served the request (set by drainsafe serve/run)."""


@dataclass(frozen=True)
class LoadSpec:
    url: str
    duration: float
    concurrency: int = 10
    rate: float | None = None
    """Requests per second (open loop); None means closed loop with `concurrency` workers."""
    method: str = "GET"
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    end_marker: str | None = DEFAULT_END_MARKER
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    pod_header: str | None = DEFAULT_POD_HEADER
    max_inflight: int = 1000
    """Open loop only: at most this many requests (and connections) at once."""
    keepalive: bool = True
    """False: a new connection per request, like many separate clients (hey
    -disable-keepalive); each request is then routed afresh by an L4 proxy."""
    error_status: int = 400
    """Answers with this status or above are failures (verify's probe passes 500)."""

    def __post_init__(self) -> None:
        if self.duration <= 0:
            raise ValueError(f"duration must be > 0 (got {self.duration})")
        if self.rate is None and self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1 (got {self.concurrency})")
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"rate must be > 0 requests/s (got {self.rate})")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be > 0 (got {self.timeout})")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"URL must start with http:// or https:// (got {self.url!r})")

    @property
    def mode(self) -> str:
        return "open" if self.rate is not None else "closed"


@dataclass(frozen=True)
class RequestResult:
    """One request; times are seconds since the start of the run."""

    start: float
    end: float
    outcome: Outcome
    headers_at: float | None = None
    first_byte: float | None = None
    bytes: int = 0
    pod: str | None = None
    fresh: bool | None = None
    """The request opened a new connection (so a proxy routed it afresh); None: unknown
    (records written before this was kept)."""

    @property
    def total(self) -> float:
        return self.end - self.start

    @property
    def ttfb(self) -> float | None:
        return None if self.first_byte is None else self.first_byte - self.start


@dataclass
class LoadRun:
    spec: LoadSpec
    started_at: float
    """Wall clock (Unix seconds) of time 0, to place Kubernetes timestamps on the same axis."""
    results: list[RequestResult] = field(default_factory=list)
    not_started: int = 0
    """Open loop: requests due while `max_inflight` were already running."""
    elapsed: float = 0.0


ResultCallback = Callable[[RequestResult], None]
_CONNECT_EVENT = "connection.connect_tcp.started"


async def run_load(
    spec: LoadSpec,
    *,
    on_result: ResultCallback | None = None,
    stop: asyncio.Event | None = None,
    clock_zero: tuple[float, float] | None = None,
) -> LoadRun:
    """Send load for spec.duration seconds, then wait for requests in flight to finish.

    clock_zero=(time.monotonic(), time.time()) shares time 0 with a watcher started earlier.
    Times come from time.monotonic(): uvloop's loop.time() is cached per loop iteration and
    has millisecond resolution, too coarse for time to first byte.
    """
    t0, wall0 = clock_zero if clock_zero is not None else (now(), time.time())
    run = LoadRun(spec=spec, started_at=wall0)
    stop = stop or asyncio.Event()

    def record(result: RequestResult) -> None:
        run.results.append(result)
        if on_result is not None:
            on_result(result)

    deadline = now() + spec.duration
    if spec.rate is None:
        await _closed_loop(spec, t0, deadline, stop, record)
    else:
        run.not_started = await _open_loop(spec, t0, deadline, stop, record)
    run.elapsed = now() - t0
    return run


@functools.cache
def _tls() -> ssl.SSLContext:
    """Loading the CA bundle costs ~15 ms: once per process, not once per connection."""
    return httpx.create_ssl_context()


def _client(spec: LoadSpec) -> httpx.AsyncClient:
    """One client per connection. httpcore's pool rescans every connection on each request
    (quadratic in pool size: at 50 connections that cost more CPU than the requests), so
    the pool of connections is kept here instead: a worker owns one (closed loop), or a
    request borrows an idle one (open loop)."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1 if spec.keepalive
                          else 0)
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(spec.timeout),
                             headers=dict(spec.headers), follow_redirects=False,
                             trust_env=False, verify=_tls())


async def _closed_loop(spec: LoadSpec, t0: float, deadline: float, stop: asyncio.Event,
                       record: ResultCallback) -> None:

    async def worker() -> None:
        async with _client(spec) as client:
            while now() < deadline and not stop.is_set():
                record(await send_one(client, spec, t0))

    async with asyncio.TaskGroup() as group:
        for _ in range(spec.concurrency):
            group.create_task(worker())


async def _open_loop(spec: LoadSpec, t0: float, deadline: float, stop: asyncio.Event,
                     record: ResultCallback) -> int:
    assert spec.rate is not None
    interval = 1.0 / spec.rate
    inflight: set[asyncio.Task[None]] = set()
    idle: list[httpx.AsyncClient] = []
    clients: list[httpx.AsyncClient] = []
    not_started = 0

    async def one(client: httpx.AsyncClient) -> None:
        try:
            record(await send_one(client, spec, t0))
        finally:
            idle.append(client)

    start = now()
    n = 0
    try:
        while not stop.is_set():
            due = start + n * interval
            if due >= deadline:
                break
            delay = due - now()
            if delay > 0:
                try:
                    async with asyncio.timeout(delay):
                        await stop.wait()
                    break
                except TimeoutError:
                    pass
            n += 1
            if len(inflight) >= spec.max_inflight:
                not_started += 1
                continue
            if not idle:
                clients.append(_client(spec))
                idle.append(clients[-1])
            task = asyncio.create_task(one(idle.pop()))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        if inflight:
            await asyncio.gather(*inflight)
    finally:
        for client in clients:
            await client.aclose()
    return not_started


async def send_one(client: httpx.AsyncClient, spec: LoadSpec, t0: float) -> RequestResult:
    """One request, read to the end; never raises for a failed exchange, it records it.

    Whether it opened a new connection comes from httpcore's `trace` request extension
    (the `connection.connect_tcp.started` event is sent only when a connection is opened):
    a proxy routes only new connections, so only those are routing evidence."""
    fresh = False

    async def trace(event: str, _info: object) -> None:
        nonlocal fresh
        if event == _CONNECT_EVENT:
            fresh = True

    start = now() - t0
    scanner = MarkerScanner(spec.end_marker)
    status: int | None = None
    content_type = ""
    pod: str | None = None
    headers_at: float | None = None
    first_byte: float | None = None
    failure: Failure | None = None
    error_name = message = ""
    try:
        async with asyncio.timeout(spec.timeout):
            request = client.build_request(spec.method, spec.url, content=spec.body,
                                           extensions={"trace": trace})
            response = await client.send(request, stream=True)
            try:
                headers_at = now() - t0
                status = response.status_code
                content_type = response.headers.get("content-type", "")
                if spec.pod_header:
                    pod = response.headers.get(spec.pod_header)
                async for chunk in response.aiter_bytes():
                    if first_byte is None:
                        first_byte = now() - t0
                    scanner.feed(chunk)
            finally:
                await response.aclose()
    except Exception as exc:  # every failure is a finding, recorded below
        failure, error_name = failure_of(exc)
        message = error_message(exc)
    observation = Observation(
        status=status, content_type=content_type, body_bytes=scanner.bytes,
        end_marker_seen=scanner.end_marker_seen, drain_marker_seen=scanner.drain_marker_seen,
        failure=failure, error_name=error_name, error_message=message,
    )
    return RequestResult(
        start=start, end=now() - t0,
        outcome=classify(observation, end_marker=spec.end_marker,
                         error_status=spec.error_status),
        headers_at=headers_at, first_byte=first_byte, bytes=scanner.bytes, pod=pod,
        fresh=fresh,
    )
