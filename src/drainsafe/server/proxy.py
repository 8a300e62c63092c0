"""The data path of `drainsafe run` (proxy mode): an HTTP/1.1 proxy in front of the child.

Each client connection gets its own upstream connection to the child, opened on the first
request and kept alive with it (pipelined requests are forwarded in order and answered in
order). httptools (llhttp, installed with uvicorn[standard]) parses both directions; bodies
are forwarded as they arrive, one write per read, with back-pressure both ways (a client
that reads slowly pauses reading from the child, and the other way round), so SSE and
chunked streams pass through unbuffered.

What the proxy adds is the drain: every request is tracked by the DrainRuntime; while
draining, each response head carries `Connection: close` and the client connection is
closed after it; at the deadline, open responses are ended on purpose (SSE: the
drainsafe.marker error event, then the terminating chunk; other started bodies: the
connection is closed without a terminating chunk, so clients see an incomplete body;
unanswered requests: 503). An upstream abort mid-stream becomes the same marker for SSE.
Every path is the child's: readiness, liveness, the drain trigger and metrics are on the
admin port (drainsafe.server.admin), so the child's own `/metrics` or `/health` is reached
through the pod's port as it is.

Every response the proxy writes names the pod (`x-drainsafe-pod`, when the runtime knows
it; the child's own such header is replaced, as the proxy is the pod's front), and each
proxied response sent in full is timed into the runtime's duration histogram.

Client connections keep drainsafe.server.http1's limits (head size, head and keep-alive
timeouts, requests parsed ahead of their answers). What cannot be parsed is never half
forwarded: requests parsed in the same read as a malformed one, an upgrade or a head past
the limits are dropped before anything of them reaches the child, and the refusal is
written after the answers to the requests sent before (nginx answers a pipelined request,
then the 400 for what follows it). An upstream answer followed by bytes that are not HTTP
is delivered, and the child's connection is retired (requests still waiting on it: 502).

Hop-by-hop headers (Connection, Keep-Alive, Proxy-Connection) are not forwarded (RFC 9110
§7.6.1). Upgrades (WebSocket, CONNECT) are not proxied: they get 501.
"""

from __future__ import annotations

import asyncio
import collections
from typing import cast

import httptools

from drainsafe.marker import sse_error_event
from drainsafe.server import lifecycle
from drainsafe.server.config import DEFAULT_LIMITS, Limits
from drainsafe.server.http1 import (
    Http1Connection,
    Refusal,
    error_response,
    sweep,
)
from drainsafe.server.runtime import POD_HEADER, DrainRuntime, Tracked

_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection"})


def _final_chunk(event: bytes) -> bytes:
    """An SSE event as the last chunk of a chunked body, then the terminating chunk."""
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event)


_DEADLINE_CHUNK = _final_chunk(sse_error_event())
_ABORT_CHUNK = _final_chunk(sse_error_event(
    "stream ended by drainsafe run: the upstream server closed it mid-stream"))
_LAST_CHUNK = b"0\r\n\r\n"

UPSTREAM_IDLE_REUSE = 1.0
"""An upstream connection idle longer than this is not reused: it stays below the usual
server keep-alive timeouts (uvicorn 5 s, gunicorn 2 s), so the child never closes a
connection the proxy is about to send on."""

BAD_GATEWAY_UNREACHABLE = Refusal(502, b"Bad Gateway", b"upstream not reachable")
BAD_GATEWAY_CLOSED = Refusal(502, b"Bad Gateway", b"upstream closed the connection")
BAD_GATEWAY_GARBAGE = Refusal(502, b"Bad Gateway", b"upstream sent an invalid response")
UNANSWERED = Refusal(503, b"Service Unavailable", b"server shut down before answering")


class ProxyRequest(Tracked):
    __slots__ = ("chunked", "close_after", "conn", "head_sent", "keep_alive", "method",
                 "out", "sse", "t0")

    def __init__(self, conn: ClientConnection, method: bytes, keep_alive: bool) -> None:
        super().__init__()
        self.t0 = conn.runtime.clock()
        self.conn = conn
        self.method = method
        self.keep_alive = keep_alive
        self.head_sent = False
        self.close_after = False
        """The response head said `Connection: close`; only then is closing race-free."""
        self.chunked = False
        self.sse = False
        self.out: list[bytes] = []
        """Response bytes waiting for the requests before this one to be answered."""

    @property
    def stream(self) -> bool:
        return self.head_sent and not self.complete and (self.chunked or self.sse)

    def cut(self) -> None:
        super().cut()
        self.conn.cut(self)


class Proxy:
    """Listener plus the set of client connections, driven by a DrainRuntime."""

    def __init__(self, runtime: DrainRuntime, upstream: tuple[str, int], *,
                 limits: Limits = DEFAULT_LIMITS) -> None:
        self.runtime = runtime
        self.upstream = upstream
        self.limits = limits
        self.connections: set[ClientConnection] = set()
        self.server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.upstream_aborts = 0
        pod = runtime.pod_header
        self.pod_line = b"" if pod is None else b"%s: %s\r\n" % pod
        """The pod header as a header line, added to every response head (b"": none)."""
        self.drop = _HOP if pod is None else _HOP | {POD_HEADER.encode()}
        """Response headers of the child not passed on."""

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: ClientConnection(self), host, port,
                                               backlog=2048)
        self._sweeper = loop.create_task(sweep(lambda: list(self.connections),
                                               self.runtime.clock))
        sock = self.server.sockets[0].getsockname()
        return sock[0], sock[1]

    def close_listener(self) -> None:
        if self.server is not None:
            self.server.close()

    def sweep_idle(self, *, everything: bool = False) -> bool:
        """Close connections whose idle grace is over (lifecycle.idle_grace_over), or all
        of them; True while any is busy."""
        rt = self.runtime
        now = rt.clock()
        busy = False
        for conn in list(self.connections):
            if conn.queue:
                busy = True
            elif everything or (conn.idle_since is not None and lifecycle.idle_grace_over(
                    rt.state, now, rt.settings, conn.idle_since)):
                conn.close()
        return busy

    def newest_idle(self) -> float | None:
        """When the most recently idle open connection went idle (None: none is idle)."""
        return max((conn.idle_since for conn in self.connections
                    if not conn.queue and conn.idle_since is not None), default=None)

    def close_all(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self.connections):
            conn.close()


class ClientConnection(Http1Connection):
    def __init__(self, proxy: Proxy) -> None:
        super().__init__(proxy.limits, proxy.runtime.clock)
        self.proxy = proxy
        self.runtime = proxy.runtime
        self.queue: collections.deque[ProxyRequest] = collections.deque()
        self.awaiting: collections.deque[ProxyRequest] = collections.deque()
        """Proxied requests whose response has not begun, in upstream order."""
        self.fresh: list[ProxyRequest] = []
        """Requests parsed from the current read: nothing of them has gone upstream yet."""
        self.upstream: UpstreamConnection | None = None
        self.connecting = False
        self.to_upstream: list[bytes] = []
        self.out: list[bytes] = []
        self.last_idle: float | None = None
        self.closing = False
        self.closed = False
        self.upstream_full = False
        self.refusal_after: bytes | None = None
        """A refusal written once the requests before it are answered, then close."""
        self._req: ProxyRequest | None = None
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._req_chunked = False
        # Requests after a HEAD are held back until its answer is in: a HEAD answer has
        # framing headers but no body, and llhttp cannot be told so mid-stream.
        self.holding = False
        self.held: collections.deque[tuple[list[bytes], bool]] = collections.deque()
        self._held_before = 0

    # -- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.proxy.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.idle_since is not None:
            self.last_idle = self.idle_since
        super().data_received(data)

    def feed(self) -> None:
        # What is held behind a HEAD now came from earlier reads: see `refuse`.
        self._held_before = len(self.held)
        super().feed()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.proxy.connections.discard(self)
        for req in self.queue:
            self.runtime.finish(req)
        self.queue.clear()
        self.awaiting.clear()
        if self.upstream is not None:
            self.upstream.close()

    def pause_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()

    # -- limits (drainsafe.server.http1) ---------------------------------------------
    def pending(self) -> int:
        return len(self.queue)

    def may_read(self) -> bool:
        return not self.upstream_full

    def upstream_paused(self) -> None:
        self.upstream_full = True
        self.pause_reading()

    def upstream_resumed(self) -> None:
        self.upstream_full = False
        if not self.unparsed:
            self.resume_reading()

    def fed(self) -> None:
        self._flush()
        self.fresh.clear()

    def refuse(self, refusal: Refusal) -> None:
        """A request could not be parsed or broke a limit: none of this read goes up."""
        response = error_response(refusal, self.proxy.pod_line)
        partly_sent = (self._req is not None and self.in_body and self._req not in self.fresh)
        if partly_sent or self._held_before:
            # Part of it already reached the child (a body cut off by a bad chunk, or
            # requests held behind a HEAD): the child's connection goes, so does ours.
            self.to_upstream.clear()
            self.held.clear()
            if self.upstream is not None:
                self.upstream.close()
            answer = not any(r not in self.fresh for r in self.queue)
            self._drop_fresh()
            self._flush()
            if answer:
                self.linger(response)
            else:
                self.close()
            return
        self.to_upstream.clear()
        self.held.clear()
        if self.holding and not any(r.method == b"HEAD" for r in self.awaiting
                                    if r not in self.fresh):
            self.holding = False
        self._drop_fresh()
        if self.queue:
            self.refusal_after = response
        else:
            self._flush()
            self.linger(response)

    def _drop_fresh(self) -> None:
        fresh = set(self.fresh)
        for req in self.fresh:
            self.runtime.finish(req)
        self.queue = collections.deque(r for r in self.queue if r not in fresh)
        self.awaiting = collections.deque(r for r in self.awaiting if r not in fresh)
        self.fresh.clear()
        self._req = None

    # -- httptools request callbacks -------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._url = b""
        self._headers = []

    def url(self, url: bytes) -> None:
        self._url += url

    def header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done()
        parser = self.parser
        req = ProxyRequest(self, parser.get_method(), parser.should_keep_alive())
        self._req = req
        self.queue.append(req)
        self.fresh.append(req)
        self.runtime.track(req)
        idle_since, self.last_idle = self.last_idle, None
        if not self.awaiting and idle_since is not None and self.upstream is not None \
                and self.runtime.clock() - idle_since > UPSTREAM_IDLE_REUSE:
            # The child may be closing this idle connection right now (uvicorn's keep-alive
            # timeout is 5 s): a request sent into that close would be lost. Use a new one.
            self.upstream.close()
            self.upstream = None
        self.awaiting.append(req)
        is_head = req.method == b"HEAD"
        if self.holding:
            self.held.append(([], is_head))
        head = [req.method, b" ", self._url, b" HTTP/1.1\r\n"]
        chunked = False
        for name, value in self._headers:
            low = name.lower()
            if low in _HOP:
                continue
            if low == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            head += (name, b": ", value, b"\r\n")
        head.append(b"\r\n")
        self._req_chunked = chunked
        self._up(b"".join(head))
        if is_head and not self.holding:
            self.holding = True

    def on_body(self, body: bytes) -> None:
        if self._req is None:
            return
        if self._req_chunked:
            self._up(b"%x\r\n%s\r\n" % (len(body), body))
        else:
            self._up(body)

    def on_message_complete(self) -> None:
        self.message_done()
        if self._req is not None and self._req_chunked:
            self._up(_LAST_CHUNK)

    def _up(self, data: bytes) -> None:
        if self.holding and self.held:
            self.held[-1][0].append(data)
        else:
            self.to_upstream.append(data)

    def release_after_head(self) -> None:
        """The HEAD answer is in: send what was held, up to the next HEAD."""
        while self.held:
            segments, is_head = self.held.popleft()
            self.to_upstream += segments
            if is_head:
                return
        self.holding = False

    # -- writing ---------------------------------------------------------------------
    def _flush(self) -> None:
        if self.to_upstream:
            up = self.upstream
            if up is not None and up.transport is not None and not up.transport.is_closing():
                up.transport.write(b"".join(self.to_upstream))
                self.to_upstream.clear()
            elif up is not None and up.transport is not None:
                self.upstream_lost(up)  # closing under us: what waited on it gets its 502
            if not self.closed and self.upstream is None and not self.connecting \
                    and self.to_upstream and self.transport is not None \
                    and not self.transport.is_closing():
                self.connecting = True
                asyncio.get_running_loop().create_task(self._connect())
        if self.out:
            if self.transport is not None and not self.transport.is_closing():
                self.transport.write(b"".join(self.out))
            self.out.clear()

    def write_for(self, req: ProxyRequest, data: bytes) -> None:
        """Queue response bytes for `req`, in request order (pipelining)."""
        if self.queue and self.queue[0] is req:
            self.out.append(data)
        else:
            req.out.append(data)

    def response_done(self, req: ProxyRequest) -> None:
        rt = self.runtime
        if not req.complete:
            rt.durations.observe(rt.clock() - req.t0)
        req.complete = True
        rt.finish(req)
        # A response that went out without `Connection: close` (it began before the drain)
        # leaves the connection open: the client may already be sending its next request,
        # which is answered with `Connection: close`. Closing now would reset that request.
        if req.close_after:
            self.closing = True
        if self.queue and self.queue[0] is req:
            self.queue.popleft()
            # The next requests may already have their whole answer waiting.
            while self.queue:
                nxt = self.queue[0]
                if nxt.out:
                    self.out += nxt.out
                    nxt.out.clear()
                if not nxt.complete:
                    break
                self.queue.popleft()
        if not self.queue:
            if self.refusal_after is not None:
                self._flush()
                self.linger(self.refusal_after)
                return
            if self.closing:
                self._flush()
                self.close()
                return
        self.answered()

    def head_for(self, req: ProxyRequest, status: int, reason: bytes,
                 headers: list[tuple[bytes, bytes]]) -> bytes:
        head = [b"HTTP/1.1 %d %s\r\n" % (status, reason)]
        drop = self.proxy.drop
        for name, value in headers:
            low = name.lower()
            if low in drop:
                continue
            if low == b"transfer-encoding" and b"chunked" in value.lower():
                req.chunked = True
            elif low == b"content-type" and value.lower().startswith(b"text/event-stream"):
                req.sse = True
            head += (name, b": ", value, b"\r\n")
        if self.proxy.pod_line:
            head.append(self.proxy.pod_line)
        if not req.keep_alive or not self.runtime.serving:
            head.append(b"connection: close\r\n")
            req.close_after = True
        head.append(b"\r\n")
        req.head_sent = True
        return b"".join(head)

    # -- upstream --------------------------------------------------------------------
    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.proxy.upstream
        try:
            _, upstream = await loop.create_connection(lambda: UpstreamConnection(self),
                                                       host, port)
        except OSError:
            self.connecting = False
            self._fail(error_response(BAD_GATEWAY_UNREACHABLE, self.proxy.pod_line))
            return
        self.connecting = False
        if self.closed:
            upstream.close()
            return
        self.upstream = upstream
        self._flush()

    def upstream_lost(self, upstream: UpstreamConnection,
                      refusal: Refusal = BAD_GATEWAY_CLOSED) -> None:
        if self.upstream is not upstream:
            return  # one we retired ourselves
        self.upstream = None
        if self.closed or (not self.awaiting and not any(
                r.head_sent and not r.complete for r in self.queue)):
            return
        # The child closed the connection with work pending: answer what can be answered.
        front = next((r for r in self.queue if not r.complete), None)
        if front is not None and front.head_sent:
            self.proxy.upstream_aborts += 1
            if front.sse and front.chunked:
                self.write_for(front, _ABORT_CHUNK)
        elif front is not None:
            self.write_for(front, error_response(refusal, self.proxy.pod_line))
        self._flush()
        self.close()

    # -- the end ---------------------------------------------------------------------
    def cut(self, req: ProxyRequest) -> None:
        """The deadline came with `req` open: end it visibly, then close the connection."""
        if self.closed:
            return
        front = self.queue[0] if self.queue else None
        if front is not None and front.head_sent and not front.complete:
            if front.sse and front.chunked:
                self.out.append(_DEADLINE_CHUNK)
        elif front is not None and not front.head_sent:
            self.out.append(error_response(UNANSWERED, self.proxy.pod_line))
        self._flush()
        self.close()

    def _fail(self, response: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.out.append(response)
            self._flush()
        self.close()

    def close(self) -> None:
        self.refused = True  # nothing more is parsed on a connection being closed
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        if self.upstream is not None:
            self.upstream.close()


class UpstreamConnection(asyncio.Protocol):
    def __init__(self, client: ClientConnection) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self._req: ProxyRequest | None = None
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._renew_parser = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            # What was parsed before the bad bytes is delivered; this connection is
            # retired at once (a request sent on it now would be lost), and a request still
            # waiting on it gets a 502.
            self.client._flush()
            self.close()
            self.client.upstream_lost(self, BAD_GATEWAY_GARBAGE)
            return
        if self._renew_parser:
            self._renew_parser = False
            self.parser = httptools.HttpResponseParser(self)
        self.client._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.upstream_lost(self)

    def pause_writing(self) -> None:
        self.client.upstream_paused()

    def resume_writing(self) -> None:
        self.client.upstream_resumed()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # -- httptools response callbacks ------------------------------------------------
    def on_message_begin(self) -> None:
        self._reason = b""
        self._headers = []

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        client = self.client
        status = self.parser.get_status_code()
        if status < 200:
            # An interim answer (100 Continue): pass it on; the final one follows.
            if client.awaiting and status != 101:
                client.write_for(client.awaiting[0], b"HTTP/1.1 %d %s\r\n\r\n"
                                 % (status, self._reason or b"Continue"))
            return
        req = client.awaiting.popleft() if client.awaiting else None
        self._req = req
        if req is None:
            return
        client.write_for(req, client.head_for(req, status, self._reason or b"OK",
                                              self._headers))
        if req.method == b"HEAD":
            # No body follows though the headers may announce one; llhttp cannot be told,
            # so a fresh parser takes the next answer (nothing more was sent upstream).
            self._renew_parser = True
            self._req = None
            client.response_done(req)
            client.release_after_head()

    def on_body(self, body: bytes) -> None:
        req = self._req
        if req is None:
            return
        if req.chunked:
            self.client.write_for(req, b"%x\r\n%s\r\n" % (len(body), body))
        else:
            self.client.write_for(req, body)

    def on_message_complete(self) -> None:
        req, self._req = self._req, None
        if req is None:
            return
        if req.chunked:
            self.client.write_for(req, _LAST_CHUNK)
        self.client.response_done(req)
