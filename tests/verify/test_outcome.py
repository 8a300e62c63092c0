"""The classifier alone: a pure function of what was observed."""

from __future__ import annotations

import errno
import itertools
import socket

import httpcore
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainsafe.marker import sse_error_event
from drainsafe.verify.outcome import (
    Failure,
    Kind,
    Observation,
    classify,
    error_message,
    failure_of,
)
from drainsafe.verify.scan import MarkerScanner

SSE = "text/event-stream; charset=utf-8"


def test_ok_plain_and_sse() -> None:
    assert classify(Observation(status=200, content_type="application/json")).ok
    assert classify(Observation(status=200, content_type=SSE, end_marker_seen=True)).ok


def test_sse_without_end_marker_is_truncated_unless_disabled() -> None:
    obs = Observation(status=200, content_type=SSE, body_bytes=40)
    assert classify(obs).kind is Kind.TRUNCATED
    assert classify(obs, end_marker=None).ok


def test_http_errors_are_named_by_code() -> None:
    assert classify(Observation(status=502)).label == "http_502"
    assert classify(Observation(status=429)).label == "http_429"
    assert classify(Observation(status=302)).ok  # redirects are answers, not failures


def test_drain_marker_wins_over_truncation_and_framing() -> None:
    obs = Observation(status=200, content_type=SSE, drain_marker_seen=True,
                      failure=Failure.PROTOCOL, error_name="RemoteProtocolError",
                      error_message="incomplete chunked read")
    assert classify(obs).kind is Kind.DRAIN_MARKER


def test_transport_failures_become_outcomes() -> None:
    assert classify(Observation(failure=Failure.REFUSED)).kind is Kind.REFUSED
    reset = Observation(failure=Failure.RESET)
    assert classify(reset).kind is Kind.RESET
    assert "before a response" in classify(reset).detail
    mid = Observation(status=200, body_bytes=99, failure=Failure.RESET)
    assert classify(mid).detail == "connection reset after 99 body bytes"
    timeout = classify(Observation(failure=Failure.TIMEOUT, error_name="ReadTimeout"))
    assert timeout.label == "timeout" and timeout.detail == "ReadTimeout"
    closed = Observation(failure=Failure.PROTOCOL,
                         error_message="Server disconnected without sending a response.")
    assert classify(closed).kind is Kind.CLOSED
    # The same protocol error once the status line arrived is a truncated body.
    assert classify(Observation(status=200, failure=Failure.PROTOCOL)).kind is Kind.TRUNCATED


def _raised(exc: BaseException, *causes: BaseException) -> BaseException:
    """`exc` as httpx raises it: each exception `raise ... from` the next (root last)."""
    chain = [exc, *causes]
    for outer, inner in itertools.pairwise(chain):
        outer.__cause__ = inner
    return exc


class _PlainOSError(OSError):
    pass


# A narrow unit test of the error mapping: the chains httpx 0.29 / httpcore 1.0 build
# (tests/verify/test_inject.py makes each of them happen on a real socket).
@pytest.mark.parametrize(("exc", "failure", "name"), [
    (_raised(httpx.ConnectError("All connection attempts failed"),
             httpcore.ConnectError("All connection attempts failed"),
             ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")),
     Failure.REFUSED, "ConnectionRefusedError"),
    # OSError(ECONNREFUSED, ...) is constructed as a ConnectionRefusedError (PEP 3151).
    (_raised(httpx.ConnectError("x"), OSError(errno.ECONNREFUSED, "Connect call failed")),
     Failure.REFUSED, "ConnectionRefusedError"),
    # An OSError subclass is not mapped by errno: the errno itself still says reset.
    (_raised(httpx.ReadError(""), _PlainOSError(errno.ECONNRESET, "reset")),
     Failure.RESET, "ReadError"),
    (_raised(httpx.ReadError(""), httpcore.ReadError(""),
             ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")),
     Failure.RESET, "ConnectionResetError"),
    (_raised(httpx.WriteError(""), BrokenPipeError(errno.EPIPE, "Broken pipe")),
     Failure.RESET, "BrokenPipeError"),
    (_raised(httpx.ReadTimeout(""), httpcore.ReadTimeout("")), Failure.TIMEOUT, "ReadTimeout"),
    (_raised(httpx.ConnectTimeout("")), Failure.TIMEOUT, "ConnectTimeout"),
    (TimeoutError(), Failure.TIMEOUT, "TimeoutError"),  # verify's own per-request deadline
    (_raised(httpx.RemoteProtocolError("Server disconnected without sending a response."),
             httpcore.RemoteProtocolError("Server disconnected without sending a response.")),
     Failure.PROTOCOL, "RemoteProtocolError"),
    (_raised(httpx.ConnectError("[Errno -2] Name or service not known"),
             socket.gaierror(socket.EAI_NONAME, "Name or service not known")),
     Failure.OTHER, "ConnectError"),
    # Types decide, not words: these messages name other failures.
    (httpx.RemoteProtocolError("timed out: connection refused"), Failure.PROTOCOL,
     "RemoteProtocolError"),
    (httpx.ReadError("Connection reset by peer"), Failure.OTHER, "ReadError"),
])
def test_exception_types_map_to_failures(exc: BaseException, failure: Failure,
                                         name: str) -> None:
    assert failure_of(exc) == (failure, name)


def test_failure_mapping_keeps_the_report_wording() -> None:
    refused = _raised(httpx.ConnectError("All connection attempts failed"),
                      ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
    failure, name = failure_of(refused)
    outcome = classify(Observation(failure=failure, error_name=name,
                                   error_message=error_message(refused)))
    assert (outcome.label, outcome.detail) == ("refused", "All connection attempts failed")
    other = httpx.UnsupportedProtocol("Request URL is missing an 'http://' protocol.")
    failure, name = failure_of(other)
    outcome = classify(Observation(failure=failure, error_name=name,
                                   error_message=error_message(other)))
    assert outcome.detail == ("UnsupportedProtocol: Request URL is missing an 'http://' "
                              "protocol.")


def test_truncation_reasons() -> None:
    def reason(message: str) -> str:
        obs = Observation(status=200, failure=Failure.PROTOCOL, error_message=message)
        outcome = classify(obs)
        assert outcome.kind is Kind.TRUNCATED
        return outcome.detail

    assert reason("illegal chunk header: bytearray(b'zz')") == "broken chunked framing"
    assert "last chunk" in reason("peer closed connection without sending complete message "
                                  "body (incomplete chunked read)")
    assert "Content-Length" in reason("peer closed connection without sending complete message "
                                      "body (received 5 bytes, expected 100)")


def test_unknown_errors_keep_their_names() -> None:
    outcome = classify(Observation(failure=Failure.OTHER, error_name="SSLError",
                                   error_message="bad cert"))
    assert outcome.kind is Kind.ERROR and outcome.detail == "SSLError: bad cert"


@given(status=st.one_of(st.none(), st.integers(100, 599)), ctype=st.sampled_from(["", SSE]),
       end=st.booleans(), drain=st.booleans(),
       failure=st.one_of(st.none(), st.sampled_from(Failure)))
def test_every_observation_gets_exactly_one_outcome(status: int | None, ctype: str, end: bool,
                                                    drain: bool,
                                                    failure: Failure | None) -> None:
    obs = Observation(status=status, content_type=ctype, end_marker_seen=end,
                      drain_marker_seen=drain, failure=failure, error_name="X")
    outcome = classify(obs)
    # ok only when the server answered < 400, nothing failed, and a stream was complete
    if outcome.ok:
        assert status is not None and status < 400 and failure is None and not drain
        assert end or ctype != SSE
    if drain:
        assert outcome.kind is Kind.DRAIN_MARKER


def test_the_cause_chain_is_walked_as_python_links_it() -> None:
    try:
        try:
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
        except ConnectionResetError:
            raise RuntimeError("read failed")  # noqa: B904 - the implicit context is walked too
    except RuntimeError as exc:
        assert failure_of(exc) == (Failure.RESET, "ConnectionResetError")
        assert error_message(exc) == "read failed"


def test_scanner_finds_markers_split_across_chunks() -> None:
    body = b"data: {}\n\n" + sse_error_event() + b"data: [DONE]\n\n"
    for split in range(1, len(body)):
        scanner = MarkerScanner("[DONE]")
        scanner.feed(body[:split])
        scanner.feed(body[split:])
        assert scanner.end_marker_seen and scanner.drain_marker_seen
        assert scanner.bytes == len(body)
    plain = MarkerScanner("[DONE]")
    plain.feed(b"data: DONE\n\n" + b"x" * 5000)
    assert not plain.end_marker_seen and not plain.drain_marker_seen
