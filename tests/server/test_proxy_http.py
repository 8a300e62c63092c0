"""HTTP/1.1 details of the `drainsafe run` proxy, against a real uvicorn child."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_harness import DRAINSAFE, Replica, free_port, start_replica, wait_port


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replica]:
    replica = start_replica("run", tmp_path_factory.mktemp("proxy"))
    try:
        yield replica
    finally:
        replica.stop()


def _raw(address: str, payload: bytes, until: bytes, timeout: float = 5.0) -> bytes:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout) as sock:
        sock.sendall(payload)
        data = b""
        deadline = time.monotonic() + timeout
        while data.count(until) < 1 and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def test_pipelined_requests_are_answered_in_order(proxy: Replica) -> None:
    req = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
    # /readyz is the child's path like any other (the workload has none: its 404).
    ready = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"GET /nothing-here HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    data = _raw(proxy.address, req + ready + req + last, b"never", timeout=5)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", data)
    assert statuses == [b"200", b"404", b"200", b"404"], data
    assert data.count(b"pong") == 2 and b"drainsafe" not in data, data


def test_chunked_request_body_is_forwarded(proxy: Replica) -> None:
    body = b'{"max_tokens": 2, "token_interval": 0}'
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    data = _raw(proxy.address, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
                + chunked, b"completion_tokens")
    assert data.startswith(b"HTTP/1.1 200") and b" tok0 tok1" in data


def test_head_response_has_no_body_and_connection_stays_usable(proxy: Replica) -> None:
    data = _raw(proxy.address, b"HEAD /ping HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n", b"pong")
    assert data.count(b"HTTP/1.1 200") == 2 and data.endswith(b"pong")


def test_sse_passes_through_as_it_is_written(proxy: Replica) -> None:
    seen: list[float] = []
    with httpx.stream("POST", f"http://{proxy.address}/v1/completions", timeout=10,
                      json={"stream": True, "max_tokens": 5, "token_interval": 0.2}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for _ in r.iter_raw():
            seen.append(time.monotonic())
    # Unbuffered: chunks arrive spread over the generation, not all at the end.
    assert len(seen) >= 4 and seen[-1] - seen[0] >= 0.5


def test_http10_client_gets_connection_close(proxy: Replica) -> None:
    data = _raw(proxy.address, b"GET /ping HTTP/1.0\r\n\r\n", b"pong")
    assert b"connection: close" in data.lower() and data.endswith(b"pong")


def test_bad_request_gets_400(proxy: Replica) -> None:
    data = _raw(proxy.address, b"NOT HTTP AT ALL\r\n\r\n", b"}")
    assert data.startswith(b"HTTP/1.1 400")


def test_unreachable_child_gets_502_and_readiness_fails(tmp_path: Path) -> None:
    listen, upstream = free_port(), free_port()
    # The child never listens on --upstream.
    admin = free_port()
    proc = subprocess.Popen([DRAINSAFE, "run", "--listen", f"127.0.0.1:{listen}",
                             "--upstream", f"127.0.0.1:{upstream}", "--admin-host",
                             "127.0.0.1", "--admin-port", str(admin), "--", "sleep", "30"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port("127.0.0.1", listen, proc=proc)
        r = httpx.get(f"http://127.0.0.1:{listen}/ping", timeout=5)
        ready = httpx.get(f"http://127.0.0.1:{admin}/readyz", timeout=5)
    finally:
        proc.kill()
        proc.wait(10)
    assert r.status_code == 502 and "upstream not reachable" in r.text
    assert ready.status_code == 503


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_slow_reader_pauses_the_child_instead_of_filling_memory(proxy: Replica) -> None:
    # ~40 MB of SSE as fast as the child can write; the client reads nothing for 1.5 s
    # (the kernel's socket buffers hold a few MB of it).
    body = b'{"stream": true, "max_tokens": 250000, "token_interval": 0}'
    host, port = proxy.address.rsplit(":", 1)
    before = _rss_kb(proxy.proc.pid)
    with socket.socket() as sock:
        sock.connect((host, int(port)))
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-type: "
                     b"application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        sock.recv(1024)
        time.sleep(1.5)
        grown = _rss_kb(proxy.proc.pid) - before
        sock.settimeout(30)
        tail = b""
        while not tail.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            tail = (tail + chunk)[-64:]
    assert grown < 8 * 1024, f"proxy grew by {grown} kB while the client did not read"
    assert tail.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")


def test_expect_100_continue_is_passed_through(proxy: Replica) -> None:
    body = b'{"max_tokens": 2, "token_interval": 0}'
    host, port = proxy.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), 5) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     b"content-type: application/json\r\ncontent-length: %d\r\n\r\n"
                     % len(body))
        interim = sock.recv(1024)
        sock.sendall(body)
        rest = b""
        while b"completion_tokens" not in rest:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
    assert interim.startswith(b"HTTP/1.1 100 "), interim
    assert b"HTTP/1.1 200" in rest and b" tok0 tok1" in rest
