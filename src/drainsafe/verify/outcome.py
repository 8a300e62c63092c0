"""What happened to one request: a pure function of what the client observed.

The load generator writes down plain facts (status line, content type, bytes, which markers
went by, and the chain of exception types if the exchange failed) and `classify` turns them
into one outcome. Keeping this free of I/O lets every failure kind be tested on its own, and
lets a recorded run be re-classified later.

How httpx/httpcore/h11 report each failure (checked against httpx 0.29, httpcore 1.0, h11 0.16
with small socket servers; see tests/verify/test_inject.py, which injects each one for real):

- refused:  httpx.ConnectError <- ... <- ConnectionRefusedError (errno 111)
- reset:    httpx.ReadError / WriteError <- ... <- ConnectionResetError (errno 104), or EPIPE
- closed:   httpx.RemoteProtocolError "Server disconnected without sending a response."
            (FIN before any response: e.g. an idle keep-alive connection closed by the server)
- truncated body: httpx.RemoteProtocolError after the status line; h11 says
            "incomplete chunked read" (no terminating chunk), "illegal chunk header"
            (broken framing) or "received N bytes, expected M" (short Content-Length)
- timeout:  httpx.TimeoutException subclasses, or our own overall deadline (TimeoutError)
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import StrEnum


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

_REFUSED_ERRNOS = frozenset({errno.ECONNREFUSED})
_RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})
_TIMEOUT_NAMES = frozenset({
    "TimeoutException", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout",
    "TimeoutError",
})


@dataclass(frozen=True)
class Observation:
    """Everything the client saw of one request, as plain data."""

    status: int | None = None
    """HTTP status, or None when no response head arrived."""
    content_type: str = ""
    body_bytes: int = 0
    end_marker_seen: bool = False
    drain_marker_seen: bool = False
    error_types: tuple[str, ...] = ()
    """Exception class names from the outermost to the root cause; empty if none."""
    error_errno: int | None = None
    """The first errno found along the exception chain."""
    error_message: str = ""


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
    3. A transport failure, named by errno or exception type (refused, reset, timeout...).
    4. A body that ended without its end marker (SSE), though the transport was clean.
    """
    if obs.drain_marker_seen:
        return Outcome(Kind.DRAIN_MARKER, obs.status, "stream ended by the shutdown deadline")
    if obs.status is not None and obs.status >= error_status:
        return Outcome(Kind.HTTP, obs.status, _first_line(obs.error_message))
    if obs.error_types:
        return _classify_error(obs)
    if obs.status is None:
        return Outcome(Kind.ERROR, None, "no response and no error recorded")
    if expects_end_marker(obs.content_type, end_marker) and not obs.end_marker_seen:
        return Outcome(Kind.TRUNCATED, obs.status, f"stream ended without {end_marker}")
    return Outcome(Kind.OK, obs.status)


def _classify_error(obs: Observation) -> Outcome:
    names = set(obs.error_types)
    message = _first_line(obs.error_message)
    started = obs.status is not None
    if obs.error_errno in _REFUSED_ERRNOS or "ConnectionRefusedError" in names:
        return Outcome(Kind.REFUSED, obs.status, message or "connection refused")
    if obs.error_errno in _RESET_ERRNOS or names & {
        "ConnectionResetError", "BrokenPipeError", "ConnectionAbortedError",
    }:
        where = f"after {obs.body_bytes} body bytes" if started else "before a response"
        return Outcome(Kind.RESET, obs.status, f"connection reset {where}")
    if names & _TIMEOUT_NAMES:
        name = next((n for n in obs.error_types if n in _TIMEOUT_NAMES), "timeout")
        return Outcome(Kind.TIMEOUT, obs.status, name)
    if "RemoteProtocolError" in names:
        if not started:
            return Outcome(Kind.CLOSED, None, message or "server closed the connection")
        return Outcome(Kind.TRUNCATED, obs.status, _truncation_reason(message))
    return Outcome(Kind.ERROR, obs.status, f"{obs.error_types[0]}: {message}".rstrip(": "))


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


def error_facts(exc: BaseException) -> tuple[tuple[str, ...], int | None, str]:
    """(exception type names outermost first, first errno, message) along the cause chain."""
    names: list[str] = []
    first_errno: int | None = None
    message = ""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names.append(type(current).__name__)
        code = getattr(current, "errno", None)
        if first_errno is None and isinstance(code, int):
            first_errno = code
        if not message and str(current):
            message = str(current)
        current = current.__cause__ or current.__context__
    return tuple(names), first_errno, message
