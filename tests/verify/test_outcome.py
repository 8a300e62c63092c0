"""The classifier alone: a pure function of what was observed."""

from __future__ import annotations

import errno

from hypothesis import given
from hypothesis import strategies as st

from drainsafe.marker import sse_error_event
from drainsafe.verify.outcome import Kind, Observation, classify, error_facts
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
                      error_types=("RemoteProtocolError",), error_message="incomplete chunked read")
    assert classify(obs).kind is Kind.DRAIN_MARKER


def test_transport_errors_by_errno_and_by_type() -> None:
    refused = Observation(error_types=("ConnectError", "OSError", "ConnectionRefusedError"),
                          error_errno=errno.ECONNREFUSED)
    assert classify(refused).kind is Kind.REFUSED
    reset = Observation(error_types=("ReadError", "BrokenResourceError", "ConnectionResetError"),
                        error_errno=errno.ECONNRESET)
    assert classify(reset).kind is Kind.RESET
    assert "before a response" in classify(reset).detail
    mid = Observation(status=200, body_bytes=99, error_types=("ReadError",),
                      error_errno=errno.ECONNRESET)
    assert classify(mid).detail == "connection reset after 99 body bytes"
    assert classify(Observation(error_types=("ReadTimeout", "TimeoutError"))).label == "timeout"
    assert classify(Observation(error_types=("TimeoutError",))).label == "timeout"
    closed = Observation(error_types=("RemoteProtocolError",),
                         error_message="Server disconnected without sending a response.")
    assert classify(closed).kind is Kind.CLOSED


def test_truncation_reasons() -> None:
    def reason(message: str) -> str:
        obs = Observation(status=200, error_types=("RemoteProtocolError",), error_message=message)
        outcome = classify(obs)
        assert outcome.kind is Kind.TRUNCATED
        return outcome.detail

    assert reason("illegal chunk header: bytearray(b'zz')") == "broken chunked framing"
    assert "last chunk" in reason("peer closed connection without sending complete message "
                                  "body (incomplete chunked read)")
    assert "Content-Length" in reason("peer closed connection without sending complete message "
                                      "body (received 5 bytes, expected 100)")


def test_unknown_errors_keep_their_names() -> None:
    outcome = classify(Observation(error_types=("SSLError",), error_message="bad cert"))
    assert outcome.kind is Kind.ERROR and outcome.detail == "SSLError: bad cert"


@given(status=st.one_of(st.none(), st.integers(100, 599)), ctype=st.sampled_from(["", SSE]),
       end=st.booleans(), drain=st.booleans(),
       errors=st.lists(st.sampled_from(["ReadError", "ConnectError", "RemoteProtocolError",
                                        "ReadTimeout", "ConnectionResetError", "X"]), max_size=3),
       code=st.one_of(st.none(), st.sampled_from([errno.ECONNREFUSED, errno.ECONNRESET, 5])))
def test_every_observation_gets_exactly_one_outcome(status: int | None, ctype: str, end: bool,
                                                    drain: bool, errors: list[str],
                                                    code: int | None) -> None:
    obs = Observation(status=status, content_type=ctype, end_marker_seen=end,
                      drain_marker_seen=drain, error_types=tuple(errors), error_errno=code)
    outcome = classify(obs)
    # ok only when the server answered < 400, nothing failed, and a stream was complete
    if outcome.ok:
        assert status is not None and status < 400 and not errors and not drain
        assert end or ctype != SSE
    if drain:
        assert outcome.kind is Kind.DRAIN_MARKER


def test_error_facts_walk_the_cause_chain() -> None:
    try:
        try:
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
        except ConnectionResetError as inner:
            raise RuntimeError("read failed") from inner
    except RuntimeError as exc:
        names, code, message = error_facts(exc)
    assert names == ("RuntimeError", "ConnectionResetError")
    assert code == errno.ECONNRESET and message == "read failed"


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
