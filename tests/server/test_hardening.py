"""What probing `drainsafe run` found (issue 12), each reproduced against real processes.

The proxy (run) and the admin port (serve, run, the middleware) share drainsafe.server.http1;
each finding is checked where it was found: the proxy for data-path ones, the admin port for
the runtime's own answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_harness import (
    APPS_DIR,
    DRAINSAFE,
    PY,
    Replica,
    free_port,
    start_replica,
    wait_exit,
    wait_port,
    wait_ready,
)

from drainsafe.server.childmetrics import UnreadableMetrics, in_flight

CATCH_ALL = "server_apps:catch_all"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replica]:
    replica = start_replica("run", tmp_path_factory.mktemp("hardening"), app=CATCH_ALL,
                            extra=("--header-timeout", "1", "--keep-alive-timeout", "0.5"))
    try:
        yield replica
    finally:
        replica.stop()


def _count(replica: Replica) -> int:
    """Requests the child application has received (its /count does not count itself)."""
    return int(httpx.get(f"http://{replica.address}/count", timeout=5).text)


def _send_and_read(port: int, payload: bytes, timeout: float = 5.0,
                   sock: socket.socket | None = None) -> bytes:
    """Send, then read until the server closes; a reset after an answer keeps the answer."""
    own = sock is None
    if sock is None:
        sock = socket.create_connection(("127.0.0.1", port), timeout)
    sock.settimeout(timeout)
    data = b""
    try:
        with contextlib.suppress(OSError):
            sock.sendall(payload)
        while True:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            data += chunk
    finally:
        if own:
            sock.close()
    return data


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# -- request heads ------------------------------------------------------------------------

HUGE_HEADER = b"GET /a HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
MANY_HEADERS = (b"GET /a HTTP/1.1\r\nHost: x\r\n"
                + b"".join(b"X-H%d: v\r\n" % i for i in range(10_000)) + b"\r\n")
LONG_LINE = b"GET /" + b"a" * 1_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize(("payload", "status"), [(HUGE_HEADER, b"431"),
                                                 (MANY_HEADERS, b"431"),
                                                 (LONG_LINE, b"414")],
                         ids=["100KB-header", "10000-headers", "1MB-request-line"])
def test_request_heads_past_the_limits_are_refused_and_not_forwarded(
        run: Replica, payload: bytes, status: bytes) -> None:
    before = _count(run)
    answer = _send_and_read(run.port, payload)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert _count(run) == before, "the refused request reached the application"


def test_admin_port_refuses_huge_heads_too(run: Replica) -> None:
    assert _send_and_read(run.admin_port, HUGE_HEADER).startswith(b"HTTP/1.1 431")
    assert _send_and_read(run.admin_port, LONG_LINE).startswith(b"HTTP/1.1 414")


def test_a_huge_header_does_not_starve_other_clients(run: Replica) -> None:
    # Before: a 94 MB header was accepted and took the event loop: /livez took 6.7 s.
    huge = b"GET /a HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (64 << 20)

    def slowest_livez() -> float:
        slowest = 0.0
        for _ in range(5):
            started = time.monotonic()
            assert httpx.get(f"{run.admin}/livez", timeout=5).status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.1)
        return slowest

    usual = slowest_livez()  # what the machine's load costs a /livez right now
    answers: list[bytes] = []
    sender = threading.Thread(target=lambda: answers.append(
        _send_and_read(run.port, huge, timeout=20)))
    sender.start()
    try:
        time.sleep(0.2)
        slowest = slowest_livez()
    finally:
        sender.join(30)
    assert answers and answers[0].startswith(b"HTTP/1.1 431"), answers[:1]
    assert slowest < 0.5 + usual, \
        f"/livez took {slowest:.2f}s during the huge header, {usual:.2f}s before it"


# -- timeouts -----------------------------------------------------------------------------

def _closed_after(sock: socket.socket, limit: float) -> float:
    """Seconds until the server closed `sock` (reading and dropping what it sends)."""
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return float("inf")
    except ConnectionResetError:
        pass
    return time.monotonic() - started


@pytest.mark.parametrize("port_of", ["proxy", "admin"])
def test_silent_idle_and_slowloris_connections_are_closed(run: Replica, port_of: str) -> None:
    port = run.port if port_of == "proxy" else run.admin_port
    path = b"/x" if port_of == "proxy" else b"/livez"
    silent = socket.create_connection(("127.0.0.1", port), 5)
    idle = socket.create_connection(("127.0.0.1", port), 5)
    idle.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert idle.recv(65536).startswith(b"HTTP/1.1 200")
    slow = socket.create_connection(("127.0.0.1", port), 5)
    loris_done = threading.Event()

    def loris() -> None:
        # One byte every 0.1 s, for ever: the head never completes.
        for byte in (b"GET " + path + b" HTTP/1.1\r\nX-A: " + b"a" * 1000):
            if loris_done.is_set():
                return
            try:
                slow.send(bytes([byte]))
            except OSError:
                return
            time.sleep(0.1)

    sender = threading.Thread(target=loris)
    sender.start()
    try:
        # keep-alive timeout 0.5 s, header timeout 1 s; the sweep runs every 0.5 s.
        assert _closed_after(silent, 5) < 2.5
        assert _closed_after(idle, 5) < 2.5
        assert _closed_after(slow, 5) < 3.5
    finally:
        loris_done.set()
        sender.join(5)
        for s in (silent, idle, slow):
            s.close()


def test_held_connections_do_not_take_readiness_down(tmp_path: Path) -> None:
    # Before: with a 512-descriptor limit, 600 silent connections made /readyz fail for as
    # long as they were held. Here: 256 descriptors, 300 connections.
    if subprocess.run(["prlimit", "--version"], capture_output=True,
                      check=False).returncode != 0:
        pytest.skip("needs prlimit")
    listen, upstream, admin = free_port(), free_port(), free_port()
    proc = subprocess.Popen(
        ["prlimit", "--nofile=256:256", DRAINSAFE, "run", "--listen", f"127.0.0.1:{listen}",
         "--upstream", f"127.0.0.1:{upstream}", "--admin-host", "127.0.0.1",
         "--admin-port", str(admin), "--keep-alive-timeout", "0.5", "--header-timeout", "1",
         "--", PY, "-m", "uvicorn", CATCH_ALL, "--port", str(upstream), "--app-dir",
         APPS_DIR, "--log-level", "warning"],
        stdout=open(tmp_path / "run.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    held: list[socket.socket] = []
    try:
        wait_port("127.0.0.1", listen, proc=proc)
        wait_ready(admin)
        for _ in range(300):
            try:
                held.append(socket.create_connection(("127.0.0.1", listen), 2))
            except OSError:
                break
        time.sleep(0.3)
        deadline = time.monotonic() + 6
        ready = None
        while time.monotonic() < deadline:
            try:
                ready = httpx.get(f"http://127.0.0.1:{admin}/readyz", timeout=1).status_code
            except httpx.HTTPError:
                ready = None
            if ready == 200:
                break
            time.sleep(0.2)
        assert ready == 200, (tmp_path / "run.log").read_text()[-2000:]
    finally:
        for s in held:
            s.close()
        proc.kill()
        proc.wait(10)


# -- pipelining without reading ----------------------------------------------------------

def _pipeline_without_reading(port: int, request: bytes, seconds: float) -> int:
    """Pipeline `request` for `seconds` and never read; returns the bytes sent."""
    sock = socket.create_connection(("127.0.0.1", port), 5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(0.05)
    batch = request * 2000
    sent = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            try:
                sent += sock.send(batch)
            except TimeoutError:
                continue
    finally:
        _HELD.append(sock)
    return sent


_HELD: list[socket.socket] = []


@pytest.mark.parametrize(("kind", "path"), [("serve", b"/metrics"), ("run", b"/livez"),
                                            ("run", b"/metrics")])
async def test_a_client_that_pipelines_and_never_reads_costs_a_bounded_amount(
        kind: str, path: bytes, tmp_path: Path) -> None:
    # Before: `run` grew from 28 MB to 700-900 MB in seconds, liveness timed out and two
    # SIGTERMs were ignored. serve: the admin port's own answers; run: the proxy's data
    # path (its /livez and /metrics are the application's now).
    replica = start_replica(kind, tmp_path, app=CATCH_ALL, drain_delay=0.2,
                            shutdown_timeout=0.5)
    port = replica.admin_port if kind == "serve" else replica.port
    before = _rss_kb(replica.proc.pid)
    try:
        await asyncio.to_thread(_pipeline_without_reading, port,
                                b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n", 2.0)
        grown = _rss_kb(replica.proc.pid) - before
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=5) as client:
            live = await client.get(f"{replica.admin}/livez")
        took = time.monotonic() - started
        replica.signal()
        code = await wait_exit(replica.proc, 10)
    finally:
        for sock in _HELD:
            sock.close()
        _HELD.clear()
        replica.stop()
    assert grown < 20 * 1024, f"{kind} grew by {grown} kB"
    assert live.status_code == 200 and took < 1.0, took
    assert code is not None, "SIGTERM did not end the process"


# -- what is refused is never executed ---------------------------------------------------

SMUGGLING = {
    "cl-and-te": b"POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "duplicate-cl": b"POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                    b"Content-Length: 2\r\n\r\nab",
    "obs-fold": b"GET /s HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
    "bad-chunk-size": b"POST /s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"zz\r\nab\r\n0\r\n\r\n",
    "bare-cr": b"GET /s HTTP/1.1\rHost: x\r\n\r\n",
    "nul": b"GET /s HTTP/1.1\r\nHost: x\x00y\r\n\r\n",
}


@pytest.mark.parametrize("name", list(SMUGGLING))
def test_smuggling_attempts_get_400_and_are_never_forwarded(run: Replica, name: str) -> None:
    before = _count(run)
    answer = _send_and_read(run.port, SMUGGLING[name])
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert _count(run) == before


@pytest.mark.parametrize(("follow", "status"), [
    (b"\x01\x02 not http\r\n\r\n", b"400"),
    (b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
     b"501"),
    (b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", b"501"),
], ids=["garbage", "upgrade", "connect"])
def test_on_a_warm_connection_nothing_refused_is_executed(run: Replica, follow: bytes,
                                                          status: bytes) -> None:
    # Before: the request was executed upstream while the client was told 400 or 501.
    with socket.create_connection(("127.0.0.1", run.port), 5) as sock:
        sock.sendall(b"GET /warm HTTP/1.1\r\nHost: x\r\n\r\n")
        warm = b""
        while b"app: GET /warm" not in warm:
            chunk = sock.recv(65536)
            assert chunk, warm
            warm += chunk
        before = _count(run)
        request = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n" if status == b"400" else b""
        answer = _send_and_read(run.port, request + follow, sock=sock)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:300]
    assert b"app:" not in answer
    assert _count(run) == before, "a refused request reached the application"


def test_http2_preface_on_the_proxy_gets_a_clean_answer(run: Replica) -> None:
    answer = _send_and_read(run.port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 505 ") and b"Pause" not in answer, answer


# -- upstream answers followed by garbage ------------------------------------------------

@pytest.fixture(scope="module")
def broken_child(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replica]:
    listen, upstream, admin = free_port(), free_port(), free_port()
    log = tmp_path_factory.mktemp("broken") / "run.log"
    proc = subprocess.Popen(
        [DRAINSAFE, "run", "--listen", f"127.0.0.1:{listen}", "--upstream",
         f"127.0.0.1:{upstream}", "--admin-host", "127.0.0.1", "--admin-port", str(admin),
         "--", PY, str(Path(APPS_DIR) / "raw_child.py"), str(upstream)],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    replica = Replica("run", listen, proc, log, admin)
    try:
        wait_port("127.0.0.1", listen, proc=proc)
        wait_ready(admin)
        yield replica
    finally:
        replica.stop()


def test_an_answer_followed_by_garbage_is_delivered(broken_child: Replica) -> None:
    # Before: the answer was never delivered and the client hung, with no 502.
    with socket.create_connection(("127.0.0.1", broken_child.port), 5) as sock:
        sock.settimeout(5)
        sock.sendall(b"GET /garbage-after HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while not first.endswith(b"ok"):
            chunk = sock.recv(65536)
            assert chunk, first
            first += chunk
        # The child's connection was retired; the next request gets a new one.
        sock.sendall(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        second = b""
        while not second.endswith(b"fine"):
            chunk = sock.recv(65536)
            assert chunk, second
            second += chunk
    assert first.startswith(b"HTTP/1.1 200") and b"not http" not in first
    assert second.startswith(b"HTTP/1.1 200")


def test_garbage_instead_of_an_answer_is_a_502(broken_child: Replica) -> None:
    answer = _send_and_read(broken_child.port,
                            b"GET /garbage-only HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 502") and b"invalid response" in answer, answer


# -- signal mode with metrics it cannot read ---------------------------------------------

@pytest.mark.parametrize("text", [
    "<html><body>metrics are elsewhere</body></html>", '{"num_requests_running": 0}',
    "in_flight NaN\n", "in_flight +Inf\n", "other_metric 1\n", "in_flight -1\n"])
def test_unreadable_metrics_are_a_typed_error(text: str) -> None:
    with pytest.raises(UnreadableMetrics):
        in_flight(text, ["in_flight"])


def test_readable_metrics_sum_their_samples() -> None:
    text = "# TYPE a gauge\na 2\n# TYPE b gauge\nb{x=\"1\"} 1.5\nb{x=\"2\"} 1\n"
    assert in_flight(text, ["a", "b"]) == 5


@pytest.mark.parametrize("app", ["html_metrics", "json_metrics", "nan_metrics",
                                 "inf_metrics"])
async def test_signal_mode_survives_metrics_it_cannot_read(app: str, tmp_path: Path) -> None:
    # Before: a traceback and exit 1; the child never got SIGTERM and was SIGKILLed.
    admin, child = free_port(), free_port()
    log = tmp_path / "signal.log"
    proc = subprocess.Popen(
        [DRAINSAFE, "run", "--mode", "signal", "--admin-host", "127.0.0.1",
         "--admin-port", str(admin), "--upstream", f"127.0.0.1:{child}",
         "--drain-delay", "0.3", "--shutdown-timeout", "5", "--in-flight-metric",
         "in_flight", "--", PY, "-m", "uvicorn", f"server_apps:{app}", "--port", str(child),
         "--app-dir", APPS_DIR, "--log-level", "info"],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_port("127.0.0.1", child, proc=proc)
        wait_ready(admin)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = await wait_exit(proc, 15)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text, text
    assert "falling back to the drain delay and the deadline" in text, text
    # SIGTERM reached the child right after the drain delay: it shut down on its own.
    assert "Shutting down" in text or "Finished server process" in text, text
    # Before the deadline: the fallback sent SIGTERM after the drain delay, not at the end.
    assert took < 0.3 + 5, f"{took:.1f}s\n{text}"
