"""What happened to one request: a pure function of what the client observed.

The load generator writes down plain facts (status line, content type, bytes, which markers
went by, and, if the exchange failed, the `Failure` its exception chain shows) and `classify`
turns them into one outcome. Keeping this free of I/O lets every failure kind be tested on
its own, and lets a recorded run be re-classified later.

A failure is named by exception type (`failure_of`), along the chain httpx builds
(httpx <- httpcore <- the socket's OSError, each `raise ... from`). How httpx/httpcore/h11
report each failure (checked against httpx 0.29, httpcore 1.0, h11 0.16 with small socket
servers; see tests/verify/test_inject.py, which injects each one for real):

- refused:  httpx.ConnectError <- ... <- ConnectionRefusedError (errno 111)
- reset:    httpx.ReadError / WriteError <- ... <- ConnectionResetError (errno 104), or EPIPE
- closed:   httpx.RemoteProtocolError before any response ("Server disconnected without
            sending a response": FIN first, e.g. an idle keep-alive connection the server
            closed)
- truncated body: httpx.RemoteProtocolError after the status line. h11 raises that one type
            for "incomplete chunked read" (no terminating chunk), "illegal chunk header"
            (broken framing) and "received N bytes, expected M" (short Content-Length); its
            text only picks the words of the report's detail, never the outcome.
- timeout:  httpx.TimeoutException subclasses, or our own overall deadline (TimeoutError)
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import StrEnum

import httpcore
import httpx


class Kind(StrEnum):
    OK = "ok"
    HTTP = "http"
    """An HTTP error status (>= 400); the label carries the code, e.g. http_502."""
    REFUSED = "refused"
    RESET = "reset"
    CLOSED = "closed"
    """The server closed the connection (FIN) before sending any response."""
    TIMEOUT = "timeout"
    TRUNCATED = "truncated"
    DRAIN_MARKER = "drain_marker"
    """The stream ended with drainsafe's explicit shutdown-deadline error event."""
    ERROR = "error"
    """Any other client-side failure (kept with its exception names)."""


SSE_CONTENT_TYPE = "text/event-stream"
DEFAULT_END_MARKER = "[DONE]"

class Failure(StrEnum):
    """What a failed exchange's exception chain shows, by type (`failure_of`)."""

    REFUSED = "refused"
    RESET = "reset"
    TIMEOUT = "timeout"
    PROTOCOL = "protocol"
    """The server broke HTTP/1.1: closed before a response, or mid-body."""
    OTHER = "other"


_REFUSED_ERRNOS = frozenset({errno.ECONNREFUSED})
_RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})
_RESET_TYPES = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
_TIMEOUT_TYPES: tuple[type[BaseException], ...] = (httpx.TimeoutException,
                                                   httpcore.TimeoutException, TimeoutError)
_PROTOCOL_TYPES: tuple[type[BaseException], ...] = (httpx.RemoteProtocolError,
                                                    httpcore.RemoteProtocolError)


@dataclass(frozen=True)
class Observation:
    """Everything the client saw of one request, as plain data."""

    status: int | None = None
    """HTTP status, or None when no response head arrived."""
    content_type: str = ""
    body_bytes: int = 0
    end_marker_seen: bool = False
    drain_marker_seen: bool = False
    failure: Failure | None = None
    """What the exception chain showed (None: the exchange raised nothing)."""
    error_name: str = ""
    """For the report: the type name of the exception that showed the failure."""
    error_message: str = ""
    """For the report: the first message along the chain."""


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    status: int | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.kind is Kind.OK

    @property
    def label(self) -> str:
        """The name outcomes are counted under: 'ok', 'http_503', 'reset', ..."""
        if self.kind is Kind.HTTP:
            return f"http_{self.status}"
        return self.kind.value


def expects_end_marker(content_type: str, end_marker: str | None) -> bool:
    """A stream must end with the marker when it is SSE and a marker is configured."""
    media = content_type.split(";", 1)[0].strip().lower()
    return bool(end_marker) and media == SSE_CONTENT_TYPE


def classify(obs: Observation, *, end_marker: str | None = DEFAULT_END_MARKER,
             error_status: int = 400) -> Outcome:
    """The one outcome of a request. Order matters: the most specific evidence wins.

    1. The drain marker: the server said on purpose why the stream ended.
    2. An HTTP error status (>= error_status): the server answered, with an error. verify's
       probe passes 500: a 404 from the probe path still shows a live pod answered.
    3. A transport failure, by the type its exception chain showed (refused, reset...).
    4. A body that ended without its end marker (SSE), though the transport was clean.
    """
    if obs.drain_marker_seen:
        return Outcome(Kind.DRAIN_MARKER, obs.status, "stream ended by the shutdown deadline")
    if obs.status is not None and obs.status >= error_status:
        return Outcome(Kind.HTTP, obs.status, _first_line(obs.error_message))
    if obs.failure is not None:
        return _classify_failure(obs, obs.failure)
    if obs.status is None:
        return Outcome(Kind.ERROR, None, "no response and no error recorded")
    if expects_end_marker(obs.content_type, end_marker) and not obs.end_marker_seen:
        return Outcome(Kind.TRUNCATED, obs.status, f"stream ended without {end_marker}")
    return Outcome(Kind.OK, obs.status)


def _classify_failure(obs: Observation, failure: Failure) -> Outcome:
    message = _first_line(obs.error_message)
    started = obs.status is not None
    match failure:
        case Failure.REFUSED:
            return Outcome(Kind.REFUSED, obs.status, message or "connection refused")
        case Failure.RESET:
            where = f"after {obs.body_bytes} body bytes" if started else "before a response"
            return Outcome(Kind.RESET, obs.status, f"connection reset {where}")
        case Failure.TIMEOUT:
            return Outcome(Kind.TIMEOUT, obs.status, obs.error_name or "timeout")
        case Failure.PROTOCOL if not started:
            return Outcome(Kind.CLOSED, None, message or "server closed the connection")
        case Failure.PROTOCOL:
            return Outcome(Kind.TRUNCATED, obs.status, _truncation_reason(message))
        case Failure.OTHER:
            return Outcome(Kind.ERROR, obs.status,
                           f"{obs.error_name}: {message}".rstrip(": "))


def _truncation_reason(message: str) -> str:
    if "illegal chunk" in message or ("chunk" in message and "invalid" in message):
        return "broken chunked framing"
    if "incomplete chunked read" in message:
        return "chunked body ended without its last chunk"
    if "expected" in message:
        return "body shorter than Content-Length"
    return message or "body ended early"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:200] if text.strip() else ""


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and its causes, outermost first (each once: a context can loop)."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def failure_of(exc: BaseException) -> tuple[Failure, str]:
    """The failure an exception chain shows, and the type name of the exception showing it.

    The socket's own error decides first (refused, reset: by OSError subclass, or by the
    first errno along the chain), then a timeout, then httpx's protocol error."""
    chain = _chain(exc)
    code = next((c.errno for c in chain if isinstance(c, OSError) and c.errno is not None),
                None)
    for failure, types, errnos in ((Failure.REFUSED, (ConnectionRefusedError,), _REFUSED_ERRNOS),
                                   (Failure.RESET, _RESET_TYPES, _RESET_ERRNOS)):
        shown = next((c for c in chain if isinstance(c, types)), None)
        if shown is not None:
            return failure, type(shown).__name__
        if code in errnos:
            return failure, type(exc).__name__
    for failure, kinds in ((Failure.TIMEOUT, _TIMEOUT_TYPES),
                           (Failure.PROTOCOL, _PROTOCOL_TYPES)):
        found = next((c for c in chain if isinstance(c, kinds)), None)
        if found is not None:
            return failure, type(found).__name__
    return Failure.OTHER, type(exc).__name__


def error_message(exc: BaseException) -> str:
    """The first non-empty message along the chain, for the report."""
    return next((str(c) for c in _chain(exc) if str(c)), "")
