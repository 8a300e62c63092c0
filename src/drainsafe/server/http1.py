"""HTTP/1.1 connection hygiene for the listeners drainsafe writes itself: `drainsafe run`'s
proxy (drainsafe.server.proxy) and the admin port (drainsafe.server.admin).

Both parse with httptools (llhttp), which has no limits of its own. What a client can make a
connection hold is bounded here, as nginx bounds it:

- the request head: a request line past 8 KB gets 414, a header line past 8 KB, more than
  100 header fields or a head past 32 KB get 431 (nginx `large_client_header_buffers 4 8k`
  answers 414 / 400 "Request Header Or Cookie Too Large"; RFC 6585 §5 gives 431 for it).
  The parser is fed in slices while a head is being read, so a 100 MB header is refused
  after its first 32 KB instead of being accumulated;
- time: a head must be complete within `header_timeout` (nginx `client_header_timeout`);
  a keep-alive connection idle for `keep_alive_timeout` is closed (uvicorn's
  `timeout_keep_alive` is 5 s, uvicorn/config.py), so silent and slowloris connections do
  not pile up until the process runs out of descriptors;
- pipelining: at most `pipelined` requests per connection are parsed ahead of their
  answers; past that the connection stops reading (the kernel's socket buffer then pushes
  back on the client), so a client that pipelines and never reads costs a bounded amount;
- the answers to what llhttp refuses are fixed texts: 400 for a malformed request (llhttp's
  internal error text is not sent), 501 for an upgrade (WebSocket, CONNECT), 505 for the
  HTTP/2 connection preface (RFC 9113 §3.4) on this HTTP/1.1 port. A refusal is followed
  by a lingering close, as nginx's `lingering_close`: the write side is shut after the
  answer and what the client still sends is read and dropped for up to `LINGER` seconds,
  so that closing with unread input (a TCP reset) does not destroy the answer before the
  client has read it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import httptools

from drainsafe.server.config import DEFAULT_LIMITS, Limits

H2_PREFACE = b"PRI * HTTP/2.0\r\n"
LINGER = 2.0
_HEAD_SLICE = 4096
_BODY_SLICE = 65536


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused before it was understood: the answer's status and text."""

    status: int
    reason: bytes
    message: bytes


URI_TOO_LONG = Refusal(414, b"URI Too Long", b"request line longer than 8 KB")
HEAD_TOO_LARGE = Refusal(431, b"Request Header Fields Too Large",
                         b"request header fields too large")
MALFORMED = Refusal(400, b"Bad Request", b"malformed HTTP/1.1 request")
UPGRADE = Refusal(501, b"Not Implemented", b"upgrade not supported")
HTTP2 = Refusal(505, b"HTTP Version Not Supported",
                b"HTTP/2 is not served on this port; use HTTP/1.1")


class Refused(Exception):
    """Raised from a parser callback to stop parsing a request that breaks a limit."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message.decode())
        self.refusal = refusal


def error_response(refusal: Refusal, extra: bytes = b"") -> bytes:
    """A complete response that closes the connection; `extra`: header lines."""
    body = b'{"error":"' + refusal.message + b'"}'
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"%sconnection: close\r\n\r\n%s"
            % (refusal.status, refusal.reason, len(body), extra, body))


class Http1Connection(asyncio.Protocol):
    """One client connection: feeds llhttp under the limits above.

    Subclasses receive the parser's callbacks (`on_url`/`on_header` are counted here and
    passed on as `url`/`header`), say how many requests are parsed and not yet answered
    (`pending`), call `answered()` when a response is written in full, and decide what a
    refusal does (`refuse`; the default writes the error and closes)."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.unparsed = b""
        self.in_head = False
        """A request head is being read (from its first byte to the end of its headers)."""
        self.in_body = False
        self.head_bytes = 0
        self.url_bytes = 0
        self.header_count = 0
        self.head_since: float | None = None
        self.idle_since: float | None = None
        self.reading_paused = False
        self.refused = False
        """Nothing more is parsed: what arrives is dropped."""
        self.linger_since: float | None = None
        self._refusal: Refusal | None = None

    # -- what subclasses provide ---------------------------------------------------------
    def pending(self) -> int:
        """Requests parsed whose response has not been written in full."""
        return 0

    def url(self, url: bytes) -> None:
        pass

    def header(self, name: bytes, value: bytes) -> None:
        pass

    def may_read(self) -> bool:
        """Whether reading may resume (the proxy: not while the child's side is full)."""
        return True

    def fed(self) -> None:
        """Called after each read was parsed (as far as the limits allow)."""

    def refuse(self, refusal: Refusal) -> None:
        self.linger(error_response(refusal))

    # -- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.idle_since = self.clock()

    def data_received(self, data: bytes) -> None:
        self.idle_since = None
        if self.refused:
            return
        self.unparsed = self.unparsed + data if self.unparsed else data
        self.feed()

    # -- parsing -------------------------------------------------------------------------
    def feed(self) -> None:
        """Parse what was read, a slice at a time, while the limits allow."""
        limits = self.limits
        while self.unparsed and not self.refused:
            if self.pending() >= limits.pipelined:
                self.pause_reading()
                break
            data = self.unparsed
            if self.in_body:
                n = _BODY_SLICE
            else:
                n = max(1, min(_HEAD_SLICE, limits.head + 1 - self.head_bytes))
                self.head_bytes += min(n, len(data))
            if n < len(data):
                chunk, self.unparsed = data[:n], data[n:]
            else:
                chunk, self.unparsed = data, b""
            try:
                self.parser.feed_data(chunk)
            except httptools.HttpParserUpgrade:
                self._refuse(UPGRADE)
                return
            except httptools.HttpParserError:
                if self._refusal is not None:
                    self._refuse(self._refusal)
                elif chunk.startswith(H2_PREFACE) or (not self.in_body and H2_PREFACE in chunk):
                    self._refuse(HTTP2)
                else:
                    self._refuse(MALFORMED)
                return
            if not self.in_body and self.head_bytes > limits.head:
                self._refuse(HEAD_TOO_LARGE)
                return
        else:
            self.resume_reading()
        self.fed()

    def _refuse(self, refusal: Refusal) -> None:
        # Keep reading (and dropping) what the client still sends: see `linger`.
        self.resume_reading()
        self.refused = True
        self.unparsed = b""
        self.refuse(refusal)

    def on_message_begin(self) -> None:
        self.in_head = True
        self.head_since = self.clock()
        self.url_bytes = 0
        self.header_count = 0

    def on_url(self, url: bytes) -> None:
        self.url_bytes += len(url)
        if self.url_bytes > self.limits.request_line:
            self._refusal = URI_TOO_LONG
            raise Refused(URI_TOO_LONG)
        self.url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        if self.header_count > self.limits.headers \
                or len(name) + len(value) > self.limits.header_line:
            self._refusal = HEAD_TOO_LARGE
            raise Refused(HEAD_TOO_LARGE)
        self.header(name, value)

    def head_done(self) -> None:
        """Subclasses call this first in `on_headers_complete`."""
        self.in_head = False
        self.in_body = True
        self.head_since = None
        self.head_bytes = 0

    def message_done(self) -> None:
        """Subclasses call this first in `on_message_complete`."""
        self.in_body = False

    # -- flow ----------------------------------------------------------------------------
    def pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.reading_paused and self.transport is not None and not self.refused \
                and self.may_read():
            self.reading_paused = False
            self.transport.resume_reading()

    def answered(self) -> None:
        """A response was written in full: parse what waits, or start the idle clock."""
        if self.unparsed and not self.refused:
            self.feed()
        elif not self.unparsed:
            self.resume_reading()
        if self.pending() == 0 and not self.in_head and not self.unparsed:
            self.idle_since = self.clock()

    def expired(self, now: float) -> bool:
        """Whether the head took too long, the connection stayed idle too long, or a
        lingering close is over."""
        limits = self.limits
        if self.linger_since is not None:
            return now - self.linger_since >= LINGER
        if self.in_head and self.head_since is not None:
            return now - self.head_since >= limits.header_timeout
        return self.idle_since is not None and now - self.idle_since >= \
            limits.keep_alive_timeout

    def linger(self, data: bytes) -> None:
        """Write `data` (a refusal), shut the write side, drop what still arrives, and
        close after LINGER seconds (the sweep) or when the client closes."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.refused = True
        transport.write(data)
        if transport.can_write_eof():
            transport.write_eof()
            self.linger_since = self.clock()
        else:
            transport.close()


async def sweep(connections: Callable[[], list[Http1Connection]],
                clock: Callable[[], float], every: float = 0.5) -> None:
    """Close connections whose head timed out or that stayed idle too long, forever."""
    while True:
        await asyncio.sleep(every)
        now = clock()
        for conn in connections():
            if conn.expired(now) and conn.transport is not None:
                conn.transport.close()
