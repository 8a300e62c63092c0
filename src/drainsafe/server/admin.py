"""The admin port: readiness, liveness, the drain trigger and metrics, off the application's.

The application's port is the one a Service and an ingress route to, so anything drainsafe
answered there would be open to every client (one anonymous `GET /drainsafe/drain` per pod
empties a Deployment) and would sit in the application's URL space (a catch-all route
answers `/readyz` 200 for ever, and readiness never fails). Sidecars keep these on a port no
Service routes to: Envoy's admin listener, Istio's 15021 `/healthz/ready`, Linkerd's 4191.
So does drainsafe: `drainsafe serve`, `drainsafe run` (both modes) and
`drainsafe.asgi.DrainMiddleware` answer them on the admin port only (default 8490, named
`drainsafe-admin` in manifests), and nothing on the application's port.

- `/readyz` (GET, HEAD): 200 serving; 503 from the drain's first instant, and while the
  app's start-up is not done (serve, the middleware) or the child is not ready (run);
- `/livez` (GET, HEAD): 200; 503 once the lifecycle is over and the process is still there;
- `/drainsafe/drain` (GET, as a preStop `httpGet` sends; POST, for scripts): starts the
  drain and answers when the drain delay is over (`?wait=0`: at once);
- `/metrics` (GET, HEAD): Prometheus text.

Other methods get 405 with `Allow`; HEAD gets the headers and no body. With a token
(`--admin-token-file`), the drain trigger also needs header `X-Drainsafe-Token: TOKEN`
(a preStop `httpGet` sends it through `httpHeaders`); without it or with another one the
answer is 403 and nothing changes. The connection limits are drainsafe.server.config.Limits,
enforced by drainsafe.server.http1.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from drainsafe.server.config import AdminSettings
from drainsafe.server.http1 import Http1Connection, sweep
from drainsafe.server.lifecycle import Phase, live
from drainsafe.server.runtime import DrainRuntime

logger = logging.getLogger("drainsafe.server")

TOKEN_HEADER = b"x-drainsafe-token"

ReadyCheck = Callable[[], Awaitable[bool]]


async def endpoint_response(
    rt: DrainRuntime, path: str, query: bytes, *, ready_check: ReadyCheck | None = None,
) -> tuple[int, bytes, bytes]:
    """(status, content type, body) of one of the runtime's endpoints; `ready_check` adds
    a condition to readiness (drainsafe run: the child's own readiness)."""
    paths = rt.paths
    if path == paths.ready:
        ok = rt.serving and (ready_check is None or await ready_check())
        return (200 if ok else 503, b"application/json",
                json.dumps({"ready": ok, "phase": rt.phase.value}).encode())
    if path == paths.live:
        up = live(rt.state, rt.clock(), rt.settings)
        return (200 if up else 503, b"application/json",
                json.dumps({"live": up, "phase": rt.phase.value}).encode())
    if path == paths.drain:
        rt.request_drain("drain endpoint")
        # Like a preStop sleep: answer when the drain delay is over, so the kubelet's
        # SIGTERM arrives when closing is due anyway (?wait=0 answers at once).
        if b"wait=0" not in query.split(b"&"):
            await rt.wait_phase(Phase.CLOSING, Phase.EXIT,
                                timeout=rt.settings.drain_delay + 1.0)
        return 200, b"application/json", json.dumps({"phase": rt.phase.value,
                                                     **rt.figures()}).encode()
    if path == paths.metrics:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return 200, CONTENT_TYPE_LATEST.encode(), generate_latest(rt.registry())
    return 404, b"application/json", b'{"error":"not found"}'


_REASONS = {200: b"OK", 403: b"Forbidden", 404: b"Not Found", 405: b"Method Not Allowed",
            503: b"Service Unavailable"}


@dataclass
class _Request:
    method: bytes
    path: str
    query: bytes
    token: bytes | None
    keep_alive: bool


class AdminConnection(Http1Connection):
    """Answers one request at a time, in order; reads no further ahead than the limits."""

    def __init__(self, admin: AdminServer) -> None:
        super().__init__(admin.limits, admin.runtime.clock)
        self.admin = admin
        self.queue: collections.deque[_Request] = collections.deque()
        self._url = b""
        self._token: bytes | None = None
        self._answering: asyncio.Task[None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()

    def pending(self) -> int:
        return len(self.queue)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.admin.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.admin.connections.discard(self)
        self.queue.clear()
        self._writable.set()
        if self._answering is not None:
            self._answering.cancel()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- parser callbacks ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._url = b""
        self._token = None

    def url(self, url: bytes) -> None:
        self._url += url

    def header(self, name: bytes, value: bytes) -> None:
        if name.lower() == TOKEN_HEADER:
            self._token = value

    def on_headers_complete(self) -> None:
        self.head_done()
        path, _, query = self._url.partition(b"?")
        self.queue.append(_Request(self.parser.get_method(), path.decode("latin-1"), query,
                                   self._token, self.parser.should_keep_alive()))

    def on_message_complete(self) -> None:
        self.message_done()
        if self._answering is None:
            self._answering = asyncio.get_running_loop().create_task(self._answer_all())

    # -- answers -------------------------------------------------------------------------
    async def _answer_all(self) -> None:
        try:
            while self.queue and self.transport is not None \
                    and not self.transport.is_closing():
                req = self.queue[0]
                response = await self.admin.answer(req)
                await self._writable.wait()
                if self.transport.is_closing():
                    return
                self.transport.write(response)
                self.queue.popleft()
                if not req.keep_alive:
                    self.transport.close()
                    return
                self.answered()
        finally:
            self._answering = None


class AdminServer:
    """The admin listener of one DrainRuntime."""

    def __init__(self, runtime: DrainRuntime, settings: AdminSettings, *,
                 ready_check: ReadyCheck | None = None) -> None:
        self.runtime = runtime
        self.settings = settings
        self.ready_check = ready_check
        self.limits = settings.limits
        self.connections: set[AdminConnection] = set()
        self.server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._token = None if settings.token is None else settings.token.encode()
        paths = runtime.paths
        self._reads = frozenset(p for p in (paths.ready, paths.live, paths.metrics) if p)

    async def start(self) -> tuple[str, int]:
        """Listen; returns the bound address. OSError when the port cannot be bound."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: AdminConnection(self),
                                               self.settings.host, self.settings.port)
        self._sweeper = loop.create_task(sweep(lambda: list(self.connections),
                                               self.runtime.clock))
        host, port = self.server.sockets[0].getsockname()[:2]
        logger.info("drainsafe: admin port on %s:%d (readiness %s, drain %s%s)", host, port,
                    self.runtime.paths.ready, self.runtime.paths.drain,
                    ", token required" if self._token is not None else "")
        return host, port

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()

    async def answer(self, req: _Request) -> bytes:
        """The full response to one admin request."""
        status, allow, ctype, body = await self._respond(req)
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Error")),
                b"content-type: %s\r\ncontent-length: %d\r\ncache-control: no-store\r\n"
                % (ctype, len(body))]
        if allow:
            head.append(b"allow: %s\r\n" % allow)
        if not req.keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        if req.method != b"HEAD":
            head.append(body)
        return b"".join(head)

    async def _respond(self, req: _Request) -> tuple[int, bytes, bytes, bytes]:
        rt = self.runtime
        json_type = b"application/json"
        if req.path == rt.paths.drain:
            if req.method not in (b"GET", b"POST"):
                return 405, b"GET, POST", json_type, b'{"error":"method not allowed"}'
            if self._token is not None and (
                    req.token is None or not hmac.compare_digest(req.token, self._token)):
                logger.warning("drainsafe: drain request on the admin port without the "
                               "token refused")
                return 403, b"", json_type, b'{"error":"drain token missing or wrong"}'
        elif req.path in self._reads and req.method not in (b"GET", b"HEAD"):
            return 405, b"GET, HEAD", json_type, b'{"error":"method not allowed"}'
        status, ctype, body = await endpoint_response(rt, req.path, req.query,
                                                      ready_check=self.ready_check)
        return status, b"", ctype, body
