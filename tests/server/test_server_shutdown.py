"""One replica, real processes: the deadline marker, exit codes, second signal, endpoints."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from server_harness import (
    DRAINSAFE,
    PY,
    collect_stream,
    free_port,
    start_replica,
    streaming,
    wait_exit,
    wait_port,
)

from drainsafe.marker import DRAIN_ERROR_TYPE, is_drain_error_event
from drainsafe.server.config import DEFAULT_IDLE_GRACE
from drainsafe.server.lifecycle import EXIT_CUT
from drainsafe.shell import EXIT_FORCED

LONG = {"stream": True, "duration": 6, "token_interval": 0.1}


@pytest.mark.parametrize("kind", ["serve", "run"])
async def test_stream_longer_than_deadline_ends_with_marker(kind: str, tmp_path: Path
                                                            ) -> None:
    replica = start_replica(kind, tmp_path, drain_delay=0.3, shutdown_timeout=0.7)
    try:
        url = f"http://{replica.address}/v1/completions"
        stream = await streaming(url, LONG)  # SIGTERM mid-stream, however slow the start
        replica.signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            status, body, error = await stream
        code = await wait_exit(replica.proc, 10)
    finally:
        replica.stop()
    assert error is None and status == 200
    assert body.count(b"data: {") >= 5, body[-300:]
    assert b"[DONE]" not in body
    assert is_drain_error_event(body.rsplit(b"\n\n", 2)[-2]), body[-300:]
    assert code == EXIT_CUT, replica.log_text()
    assert '"cut_at_deadline":1' in replica.log_text()


@pytest.mark.parametrize("kind", ["serve", "run"])
async def test_deadline_ends_other_work_visibly(kind: str, tmp_path: Path) -> None:
    # A request still unanswered gets 503; a started non-SSE chunked body ends without its
    # terminating chunk, which every HTTP client reports as an incomplete body.
    replica = start_replica(kind, tmp_path, drain_delay=0.3, shutdown_timeout=0.7,
                            app="server_apps:ndjson")
    slow = start_replica(kind, tmp_path, drain_delay=0.3, shutdown_timeout=0.7)
    try:
        unanswered = asyncio.create_task(collect_stream(
            f"http://{slow.address}/v1/completions", {"duration": 6, "token_interval": 0.1}))
        chunked = await streaming(f"http://{replica.address}/", {})
        await asyncio.sleep(0.5)  # no byte to wait for: the slow answer comes only at its end
        replica.signal(signal.SIGTERM)
        slow.signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            _, body, error = await chunked
        async with asyncio.timeout(10):
            status, answer, _ = await unanswered
        codes = (await wait_exit(replica.proc, 10), await wait_exit(slow.proc, 10))
    finally:
        replica.stop()
        slow.stop()
    assert error is not None and "RemoteProtocolError" in error, (error, body[-100:])
    assert body.count(b'{"i"') >= 5
    assert status == 503 and b"shut down before answering" in answer
    assert codes == (EXIT_CUT, EXIT_CUT)


@pytest.mark.parametrize("kind", ["serve", "run"])
async def test_stream_within_deadline_finishes_and_exit_is_clean(kind: str, tmp_path: Path
                                                                 ) -> None:
    replica = start_replica(kind, tmp_path, drain_delay=0.3, shutdown_timeout=3)
    try:
        url = f"http://{replica.address}/v1/completions"
        stream = await streaming(url, {"stream": True, "duration": 1.2, "token_interval": 0.1})
        replica.signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            status, body, error = await stream
        code = await wait_exit(replica.proc, 10)
    finally:
        replica.stop()
    assert error is None and status == 200 and body.endswith(b"data: [DONE]\n\n")
    assert code == 0, replica.log_text()


@pytest.mark.parametrize("kind", ["serve", "run"])
async def test_second_signal_forces_exit(kind: str, tmp_path: Path) -> None:
    replica = start_replica(kind, tmp_path, drain_delay=5, shutdown_timeout=20)
    try:
        url = f"http://{replica.address}/v1/completions"
        stream = await streaming(url, LONG)
        replica.signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        assert replica.proc.poll() is None, "exited on the first signal"
        started = time.monotonic()
        replica.signal(signal.SIGINT)
        code = await wait_exit(replica.proc, 5)
        took = time.monotonic() - started
        async with asyncio.timeout(10):
            _status, body, error = await stream
    finally:
        replica.stop()
    assert code == EXIT_FORCED, replica.log_text()
    # Forced: before the 5 s drain delay (signalled 0.3 s before SIGINT) could have ended.
    assert took < 5 - 0.3, f"forced exit took {took:.1f}s"
    # Even a forced exit does not cut silently.
    assert b"[DONE]" not in body and is_drain_error_event(body), (body[-200:], error)


async def test_readiness_fails_at_once_while_requests_are_still_served(tmp_path: Path
                                                                       ) -> None:
    replica = start_replica("serve", tmp_path, drain_delay=1.5, shutdown_timeout=1)
    base = f"http://{replica.address}"
    admin = replica.admin
    try:
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            assert (await client.get(f"{admin}/readyz")).status_code == 200
            keep = await client.get("/ping")
            assert keep.headers.get("connection") != "close"
            replica.signal(signal.SIGTERM)
            await asyncio.sleep(0.2)
            ready = await client.get(f"{admin}/readyz")
            live = await client.get(f"{admin}/livez")
            during = await client.get("/ping")
            metrics = (await client.get(f"{admin}/metrics")).text
        code = await wait_exit(replica.proc, 10)
    finally:
        replica.stop()
    assert ready.status_code == 503 and ready.json()["phase"] == "draining"
    assert live.status_code == 200
    assert during.status_code == 200 and during.text == "pong"
    assert during.headers["connection"] == "close"
    assert 'drainsafe_phase{phase="draining"} 1.0' in metrics
    assert re.search(r"drainsafe_requests_after_drain_total [1-9]", metrics), metrics
    assert "drainsafe_last_request_after_drain_seconds" in metrics
    assert code == 0


async def test_drain_endpoint_for_prestop_hook(tmp_path: Path) -> None:
    replica = start_replica("serve", tmp_path, drain_delay=0.6, shutdown_timeout=1)
    try:
        async with httpx.AsyncClient(base_url=replica.admin, timeout=5) as client:
            started = time.monotonic()
            hook = await client.get("/drainsafe/drain")
            waited = time.monotonic() - started
            assert hook.status_code == 200
            # Like a preStop sleep, the hook returned when the drain delay was over.
            assert waited >= 0.5, waited
        # The kubelet's SIGTERM after the hook is the first signal, not a forced exit.
        replica.signal(signal.SIGTERM)
        code = await wait_exit(replica.proc, 10)
    finally:
        replica.stop()
    assert code == 0, replica.log_text()


async def test_middleware_under_plain_uvicorn_delays_uvicorns_shutdown(tmp_path: Path
                                                                       ) -> None:
    # The user runs uvicorn; drainsafe.asgi holds uvicorn's SIGTERM for the drain delay.
    replica = start_replica("plain", tmp_path, app="server_apps:wrapped")
    base = f"http://{replica.address}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            replica.signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            ready = await client.get(f"{replica.admin}/readyz")
            during = await client.get("/ping")  # plain uvicorn would refuse this
        code = await wait_exit(replica.proc, 10)
    finally:
        replica.stop()
    assert ready.status_code == 503
    assert during.status_code == 200 and during.headers["connection"] == "close"
    assert code is not None


def test_grace_period_that_does_not_fit_is_reported(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [DRAINSAFE, "serve", "drainsafe.workload.streaming:app", "--port", str(port),
         "--admin-port", "0",
         "--drain-delay", "10", "--shutdown-timeout", "90", "--log-level", "warning"],
        env={"DRAINSAFE_GRACE_SECONDS": "60", "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_port("127.0.0.1", port, proc=proc)
    finally:
        proc.kill()
        out = proc.communicate(timeout=10)[0].decode()
    assert "10s + 90s + 5s = 105s > 60s" in out
    assert "DRAINSAFE_GRACE_SECONDS" in out


def test_bad_input_is_a_usage_error() -> None:
    bad = subprocess.run([DRAINSAFE, "serve", "x:y", "--drain-delay", "soon"],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "'soon' is not a number of seconds" in bad.stderr
    missing = subprocess.run([DRAINSAFE, "serve", "no_such_module_here:app"],
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and "cannot import no_such_module_here:app" in missing.stderr
    no_cmd = subprocess.run([DRAINSAFE, "run"], capture_output=True, text=True, check=False)
    assert no_cmd.returncode == 2 and "give the command after --" in no_cmd.stderr
    grace = subprocess.run([DRAINSAFE, "run", "--", "true"], capture_output=True, text=True,
                           check=False, env={"DRAINSAFE_GRACE_SECONDS": "half a minute"})
    assert grace.returncode == 2 and "DRAINSAFE_GRACE_SECONDS" in grace.stderr


async def test_hey_sees_no_errors_through_a_drain(tmp_path: Path) -> None:
    """hey (an independent Go load tool, keep-alive by default) against a draining server."""
    replica = start_replica("serve", tmp_path, drain_delay=1.5, shutdown_timeout=2)
    try:
        hey = await asyncio.create_subprocess_exec(
            "hey", "-z", "1.2s", "-c", "8", "-m", "POST", "-T", "application/json",
            "-d", json.dumps({"stream": True, "max_tokens": 5, "token_interval": 0.02}),
            f"http://{replica.address}/v1/completions",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        await asyncio.sleep(0.4)
        replica.signal(signal.SIGTERM)
        out = (await asyncio.wait_for(hey.communicate(), 20))[0].decode()
        code = await wait_exit(replica.proc, 10)
    finally:
        replica.stop()
    assert "Status code distribution:" in out, out
    assert re.search(r"\[200\]\s+\d+ responses", out), out
    assert "Error distribution" not in out, out
    assert not re.search(r"\[(4|5)\d\d\]", out), out
    assert code == 0


async def test_hey_sees_plain_uvicorn_refuse_connections(tmp_path: Path) -> None:
    """The same hey run against plain uvicorn: new connections fail once SIGTERM lands."""
    replica = start_replica("plain", tmp_path)
    try:
        hey = await asyncio.create_subprocess_exec(
            # -disable-keepalive: every request opens a connection, as clients do after a
            # pooled connection was closed.
            "hey", "-z", "1.2s", "-c", "8", "-disable-keepalive",
            f"http://{replica.address}/ping",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        await asyncio.sleep(0.4)
        replica.signal(signal.SIGTERM)
        out = (await asyncio.wait_for(hey.communicate(), 20))[0].decode()
    finally:
        replica.stop()
    assert "Error distribution" in out and "connection refused" in out, out


def test_run_reports_a_command_that_cannot_start() -> None:
    done = subprocess.run([DRAINSAFE, "run", "--listen", f"127.0.0.1:{free_port()}",
                           "--admin-port", "0", "--",
                           "/no/such/server"], capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 127 and "cannot start /no/such/server" in done.stderr


async def test_run_signal_mode_waits_for_the_childs_in_flight_metric(tmp_path: Path) -> None:
    # The child is any server exposing an in-flight gauge; here drainsafe serve itself
    # (drainsafe_in_flight_requests), with no drain delay of its own.
    # The child's readiness and metrics are on its own admin port: that is the upstream
    # drainsafe run reads them from.
    health, child_port, child_admin = free_port(), free_port(), free_port()
    log = tmp_path / "signal.log"
    proc = subprocess.Popen(
        [DRAINSAFE, "run", "--mode", "signal", "--admin-host", "127.0.0.1",
         "--admin-port", str(health),
         "--upstream", f"127.0.0.1:{child_admin}", "--drain-delay", "0.3",
         "--shutdown-timeout", "10", "--in-flight-metric", "drainsafe_in_flight_requests",
         "--child-ready-path", "/readyz", "--",
         DRAINSAFE, "serve", "drainsafe.workload.streaming:app", "--port", str(child_port),
         "--admin-host", "127.0.0.1", "--admin-port", str(child_admin),
         "--drain-delay", "0", "--shutdown-timeout", "5", "--no-access-log"],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    try:
        wait_port("127.0.0.1", child_port, proc=proc)
        wait_port("127.0.0.1", health, proc=proc)
        async with httpx.AsyncClient(timeout=5) as client:
            for _ in range(100):
                if (await client.get(f"http://127.0.0.1:{health}/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.05)
            stream = asyncio.create_task(collect_stream(
                f"http://127.0.0.1:{child_port}/v1/completions",
                {"stream": True, "duration": 2, "token_interval": 0.1}))
            await asyncio.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            await asyncio.sleep(0.1)
            ready = await client.get(f"http://127.0.0.1:{health}/readyz")
        async with asyncio.timeout(10):
            _, body, error = await stream
        code = await wait_exit(proc, 15)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert ready.status_code == 503
    # SIGTERM reached the child only after its stream finished: nothing was cut.
    assert error is None and body.endswith(b"data: [DONE]\n\n"), (error, body[-200:])
    assert code == 0, log.read_text()
    # ... and as soon as the metric read zero, not at the 10 s deadline after the delay.
    assert took < 0.3 + 10, f"{took:.1f}s\n{log.read_text()}"


async def test_run_turns_an_upstream_abort_into_the_marker(tmp_path: Path) -> None:
    replica = start_replica("run", tmp_path, drain_delay=1, shutdown_timeout=3)
    try:
        child = re.search(r"child pid (\d+)", replica.log_text())
        assert child, replica.log_text()
        body = b""
        began = asyncio.Event()

        async def read_stream() -> int:
            nonlocal body
            async with httpx.AsyncClient(timeout=20) as client, client.stream(
                    "POST", f"http://{replica.address}/v1/completions", json=LONG) as response:
                async for chunk in response.aiter_bytes():
                    body += chunk
                    began.set()
                return response.status_code

        stream = asyncio.create_task(read_stream())
        # The child dies mid-stream: once its first tokens are through, not after a fixed
        # 0.5 s that a busy machine may spend before the stream has even begun.
        async with asyncio.timeout(20):
            await began.wait()
        subprocess.run(["kill", "-KILL", child.group(1)], check=True)
        async with asyncio.timeout(10):
            status = await stream
        code = await wait_exit(replica.proc, 10)
    finally:
        replica.stop()
    assert status == 200 and b"[DONE]" not in body
    last = body.rsplit(b"\n\n", 2)[-2]
    assert is_drain_error_event(last) and b"upstream server closed it" in last, body[-300:]
    assert json.loads(last.split(b"data: ", 1)[1])["error"]["type"] == DRAIN_ERROR_TYPE
    assert code == 128 + signal.SIGKILL


def test_module_entry_point_serves(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([PY, "-m", "drainsafe.workload.streaming", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port("127.0.0.1", port, proc=proc)
        assert httpx.get(f"http://127.0.0.1:{port}/ping").text == "pong"
    finally:
        proc.kill()
        proc.wait(10)


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@pytest.mark.skipif(subprocess.run(["unshare", "--pid", "--fork", "true"], check=False,
                                   capture_output=True).returncode != 0,
                    reason="needs PID namespaces (unshare)")
def test_run_as_pid_1_reaps_orphans_and_exits_with_the_childs_code() -> None:
    listen = free_port()
    # In a new PID namespace drainsafe is PID 1; the shell's background sleep is orphaned
    # to it when the subshell exits, and must be reaped when it ends.
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", DRAINSAFE, "run",
         "--listen", f"127.0.0.1:{listen}", "--admin-port", "0", "--drain-delay", "0",
         "--shutdown-timeout", "1",
         "--", "sh", "-c", "(sleep 0.3 &); exec sleep 30"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port("127.0.0.1", listen, proc=proc)
        deadline = time.monotonic() + 10
        while not (kids := _children(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        init = kids[0]  # drainsafe, PID 1 inside the namespace
        time.sleep(1.0)  # the orphaned sleep has ended by now
        states = [_state(p) for p in _children(init)]
        assert states and "Z" not in states, states
        os.kill(init, signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_run_forwards_other_signals_to_the_child(tmp_path: Path) -> None:
    mark = tmp_path / "hup"
    listen = free_port()
    script = f"trap 'echo hup > {mark}' HUP; while :; do sleep 0.05; done"
    proc = subprocess.Popen([DRAINSAFE, "run", "--listen", f"127.0.0.1:{listen}",
                             "--admin-port", "0", "--drain-delay", "0",
                             "--shutdown-timeout", "1", "--",
                             "sh", "-c", script],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port("127.0.0.1", listen, proc=proc)
        time.sleep(0.3)
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mark.exists(), "SIGHUP did not reach the child"
        assert proc.poll() is None, "drainsafe itself must not stop on SIGHUP"
    finally:
        proc.kill()
        proc.wait(10)


def _read_response(sock: socket.socket, end: bytes, timeout: float = 10) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while not data.endswith(end):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.parametrize("kind", ["serve", "run"])
def test_idle_grace_counts_from_when_the_connection_went_idle(kind: str, tmp_path: Path
                                                              ) -> None:
    # A pre-drain stream ends well after CLOSING began (and after the idle grace counted
    # from CLOSING). The client sends its next request on that connection half an idle
    # grace later: the connection has been idle for less than --idle-grace, so it is
    # answered (docs/server.md), whatever the time since CLOSING began.
    drain_delay = 0.3
    replica = start_replica(kind, tmp_path, drain_delay=drain_delay, shutdown_timeout=5)
    # The stream outlasts drain delay + idle grace, so it ends past the grace counted
    # from the start of CLOSING.
    duration = 2 * (drain_delay + DEFAULT_IDLE_GRACE)
    body = b'{"stream": true, "duration": %g, "token_interval": 0.1}' % duration
    try:
        host, port = replica.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), 5) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-type: "
                         b"application/json\r\ncontent-length: %d\r\n\r\n%s"
                         % (len(body), body))
            first = _read_response(sock, b"\r\n\r\n")
            replica.signal(signal.SIGTERM)
            if not first.endswith(b"0\r\n\r\n"):
                first += _read_response(sock, b"0\r\n\r\n")
            ended = time.monotonic()
            assert first.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
            time.sleep(DEFAULT_IDLE_GRACE / 2)
            try:
                sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                sent = time.monotonic()
                second = _read_response(sock, b"pong", timeout=5)
            except OSError:
                sent, second = time.monotonic(), b""
        code = replica.wait(10)
    finally:
        replica.stop()
    # Only meaningful if the request left within the grace the connection had.
    assert sent - ended < DEFAULT_IDLE_GRACE, (sent - ended, DEFAULT_IDLE_GRACE)
    assert second.startswith(b"HTTP/1.1 200") and second.endswith(b"pong"), second
    assert b"connection: close" in second.lower()
    assert code == 0


@pytest.mark.parametrize("kind", ["serve", "run"])
def test_a_connection_idle_since_before_closing_keeps_its_idle_grace(kind: str,
                                                                      tmp_path: Path) -> None:
    # Idle for longer than --idle-grace when CLOSING begins: it is not closed the instant
    # the listener closes (docs/server.md); its grace counts from the start of CLOSING.
    replica = start_replica(kind, tmp_path, drain_delay=2 * DEFAULT_IDLE_GRACE,
                            shutdown_timeout=5)
    try:
        host, port = replica.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), 5) as sock:
            sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_response(sock, b"pong").endswith(b"pong")
            replica.signal(signal.SIGTERM)
            live = f"http://127.0.0.1:{replica.admin_port}/livez"
            while httpx.get(live, timeout=5).json()["phase"] != "closing":
                pass
            seen = time.monotonic()
            try:
                sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                sent = time.monotonic()
                second = _read_response(sock, b"pong", timeout=5)
            except OSError:
                sent, second = time.monotonic(), b""
        code = replica.wait(10)
    finally:
        replica.stop()
    assert sent - seen < DEFAULT_IDLE_GRACE, (sent - seen, DEFAULT_IDLE_GRACE)
    assert second.startswith(b"HTTP/1.1 200") and second.endswith(b"pong"), second
    assert b"connection: close" in second.lower()
    assert code == 0


@pytest.mark.parametrize("kind", ["serve", "run", "plain"])
def test_request_after_a_pre_drain_stream_on_the_same_connection(kind: str, tmp_path: Path
                                                                  ) -> None:
    # A stream that began before SIGTERM has no `Connection: close` header, so the client
    # may send its next request on that connection the moment the stream ends. drainsafe
    # answers it (listener already closed); plain uvicorn closes the connection instead.
    replica = start_replica(kind, tmp_path, drain_delay=0.3, shutdown_timeout=3)
    body = b'{"stream": true, "duration": 1.2, "token_interval": 0.1}'
    try:
        host, port = replica.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), 5) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-type: "
                         b"application/json\r\ncontent-length: %d\r\n\r\n%s"
                         % (len(body), body))
            # SIGTERM once the stream has begun (its head is here), not after a fixed
            # 0.3 s that a busy machine may spend before it has.
            sock.settimeout(10)
            first = b""
            while b"\r\n\r\n" not in first:
                chunk = sock.recv(65536)
                assert chunk, first
                first += chunk
            replica.signal(signal.SIGTERM)
            if not first.endswith(b"0\r\n\r\n"):
                first += _read_response(sock, b"0\r\n\r\n")
            assert first.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
            assert b"connection: close" not in first.lower()
            try:
                sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                second = _read_response(sock, b"pong", timeout=5)
            except OSError:
                second = b""
        code = replica.wait(10)
    finally:
        replica.stop()
    if kind == "plain":
        assert not second.endswith(b"pong"), second
        return
    assert second.startswith(b"HTTP/1.1 200") and second.endswith(b"pong"), second
    assert b"connection: close" in second.lower()
    assert code == 0
