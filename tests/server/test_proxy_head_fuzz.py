"""Fuzz: any request head sent to the `drainsafe run` proxy ends in an HTTP answer or a
closed connection, in bounded time, and the proxy keeps serving (issue 18).

Through the proxy's public face, a real `drainsafe run` process in front of a real uvicorn,
so that the test holds whatever parses heads inside.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_harness import Replica, start_replica

FUZZ = settings(max_examples=50, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EXCHANGE_SECONDS = 10.0


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replica]:
    replica = start_replica("run", tmp_path_factory.mktemp("proxy-fuzz"))
    try:
        yield replica
    finally:
        replica.stop()


token = st.text(st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=12)
methods = st.one_of(st.sampled_from(["GET", "POST", "HEAD", "PUT", "OPTIONS", "CONNECT",
                                     "PRI", "get", "G T", ""]), token)
targets = st.one_of(st.sampled_from(["/ping", "/readyz", "/drainsafe/drain", "*",
                                     "http://x/ping", "/%00", "//", "/" + "a" * 9000, ""]),
                    token)
versions = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9.9", "HTTP/1", "", "ICY"])
headers = st.lists(st.one_of(
    st.sampled_from([
        "Host: x", "Content-Length: 5", "Content-Length: -1", "Content-Length: abc",
        "Content-Length: 99999999999999999999", "Transfer-Encoding: chunked",
        "Transfer-Encoding: gzip, chunked", "Connection: close", "Connection: upgrade",
        "Upgrade: websocket", "Expect: 100-continue", " folded: value", "NoColon",
        ": empty-name", "X: " + "v" * 10000, "Content-Length: 1\r\nContent-Length: 2",
    ]),
    st.builds(lambda n, v: f"{n}: {v}", token, token)), max_size=6)
endings = st.sampled_from(["\r\n", "\n", "\r"])
bodies = st.one_of(st.just(b""), st.binary(max_size=64),
                   st.sampled_from([b"0\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\n"]))


def _exchange(address: str, payload: bytes) -> tuple[bytes, float]:
    """Send, half-close, read to the end; how long the proxy took to end the exchange."""
    host, port = address.rsplit(":", 1)
    started = time.monotonic()
    with socket.create_connection((host, int(port)), 5) as sock:
        sock.settimeout(EXCHANGE_SECONDS)
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return b"", time.monotonic() - started  # the proxy closed on us: an answer too
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                pytest.fail(f"the proxy neither answered nor closed in {EXCHANGE_SECONDS} s: "
                            f"{payload[:200]!r}")
            if not chunk:
                break
            data += chunk
    return data, time.monotonic() - started


def _assert_answered_and_alive(proxy: Replica, payload: bytes) -> None:
    data, _ = _exchange(proxy.address, payload)
    if data:
        assert re.match(rb"HTTP/1\.[01] [1-5]\d\d ", data), data[:200]
    assert proxy.proc.poll() is None, "the proxy process died"
    assert httpx.get(f"{proxy.admin}/readyz", timeout=5).status_code == 200


@FUZZ
@given(methods, targets, versions, headers, endings, bodies)
def test_any_head_is_answered_or_closed(proxy: Replica, method: str, target: str,
                                        version: str, lines: list[str], eol: str,
                                        body: bytes) -> None:
    head = eol.join([f"{method} {target} {version}", *lines]) + eol + eol
    _assert_answered_and_alive(proxy, head.encode("utf-8", "surrogatepass") + body)


@FUZZ
@given(st.binary(max_size=300))
def test_any_bytes_are_answered_or_closed(proxy: Replica, payload: bytes) -> None:
    _assert_answered_and_alive(proxy, payload)


def test_a_malformed_head_gets_a_400(proxy: Replica) -> None:
    data, _ = _exchange(proxy.address, b"GET /ping HTTP/1.1\r\nNoColon\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 400 ")
