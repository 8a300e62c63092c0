"""The admin port: drainsafe's endpoints off the application's port (issue 12).

Real processes: `drainsafe serve` and `drainsafe run` in front of an application that
answers every path itself, and the middleware under a uvicorn the user starts.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest
from server_harness import Replica, start_replica, wait_exit

from drainsafe.server.config import Settings
from drainsafe.server.lifecycle import Phase, State, begin_drain, live

CATCH_ALL = "server_apps:catch_all"
RUNTIME_PATHS = ("/drainsafe/drain", "/drainsafe/drain?wait=0", "/readyz", "/livez",
                 "/metrics")
TOKEN = "s3cret-Token_1"


def _phase(metrics: str) -> str:
    found = re.search(r'drainsafe_phase\{phase="(\w+)"\} 1\.0', metrics)
    assert found, metrics
    return found.group(1)


@pytest.mark.parametrize("kind", ["serve", "run"])
async def test_a_catch_all_app_keeps_its_port_and_the_admin_port_drains(
        kind: str, tmp_path: Path) -> None:
    replica = start_replica(kind, tmp_path, app=CATCH_ALL, drain_delay=1.5,
                            shutdown_timeout=1)
    app = f"http://{replica.address}"
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            answers = []
            slowest = 0.0  # the slowest round trip measured here: the machine's delay now
            for path in RUNTIME_PATHS:
                for method in ("GET", "POST"):
                    sent = time.monotonic()
                    answers.append((method, path, await client.request(method, app + path)))
                    slowest = max(slowest, time.monotonic() - sent)
            ready_before = await client.get(f"{replica.admin}/readyz")
            metrics = (await client.get(f"{replica.admin}/metrics")).text
            replica.signal(signal.SIGTERM)
            signalled = time.monotonic()
            while (await client.get(f"{replica.admin}/readyz")).status_code != 503:
                assert time.monotonic() - signalled < 2, "readiness never failed"
            readiness_failed = time.monotonic() - signalled
            # The application's port answers the application through the drain delay,
            # new connections included (endpoint removal has not reached every proxy).
            during: list[httpx.Response] = []
            while time.monotonic() - signalled < 1.2:
                async with httpx.AsyncClient(timeout=5) as fresh:
                    during.append(await fresh.get(f"{app}/readyz"))
                await asyncio.sleep(0.05)
        code = await wait_exit(replica.proc, 10)
    finally:
        replica.stop()
    for method, path, response in answers:
        assert response.status_code == 200, (method, path, response.text)
        assert response.text.startswith(f"app: {method} {path.split('?')[0]} #"), response.text
    # None of those changed the lifecycle.
    assert ready_before.status_code == 200 and _phase(metrics) == "serving"
    # At once: within one poll's round trip (the slowest measured before SIGTERM) plus 0.2 s.
    assert readiness_failed < 0.2 + slowest, \
        f"admin readiness took {readiness_failed:.3f}s to fail (round trip {slowest:.3f}s)"
    # Fresh connections were answered back to back until 1.2 s into the 1.5 s drain delay
    # (a port closed early would have refused the later ones); how many fit depends on the
    # machine's speed, so only "more than one" is asserted.
    assert len(during) >= 2
    assert all(r.status_code == 200 and r.text.startswith("app: GET /readyz #")
               for r in during), [r.text for r in during]
    assert code == 0, replica.log_text()


@pytest.mark.parametrize("kind", ["serve", "run"])
async def test_the_drain_trigger_needs_the_token(kind: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    replica = start_replica(kind, tmp_path, app=CATCH_ALL, drain_delay=0.3,
                            shutdown_timeout=1, extra=("--admin-token-file", str(token_file)))
    drain = f"{replica.admin}/drainsafe/drain?wait=0"
    good = {"X-Drainsafe-Token": TOKEN}
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            missing = await client.get(drain)
            wrong = await client.get(drain, headers={"X-Drainsafe-Token": TOKEN + "x"})
            put = await client.put(drain, headers=good)
            head = await client.head(drain, headers=good)
            still = await client.get(f"{replica.admin}/readyz")
            started = await client.post(drain, headers=good)
            after = await client.get(f"{replica.admin}/readyz")
        code = await wait_exit(replica.proc, 10)
    finally:
        replica.stop()
    assert (missing.status_code, wrong.status_code) == (403, 403)
    assert put.status_code == 405 and put.headers["allow"] == "GET, POST"
    assert head.status_code == 405
    assert still.status_code == 200, "a refused drain request changed the lifecycle"
    assert started.status_code == 200 and after.status_code == 503
    assert code == 0, replica.log_text()
    assert "without the token refused" in replica.log_text()


def test_a_token_file_that_cannot_be_used_is_a_usage_error(tmp_path: Path) -> None:
    import subprocess

    from server_harness import DRAINSAFE

    empty = tmp_path / "empty"
    empty.write_text("\n")
    for path, says in ((str(empty), "the file is empty"),
                       (str(tmp_path / "missing"), "cannot read it")):
        done = subprocess.run([DRAINSAFE, "serve", "x:y", "--admin-token-file", path],
                              capture_output=True, text=True, check=False, timeout=30)
        assert done.returncode == 2 and f"--admin-token-file {path}: {says}" in done.stderr


def _exchange(port: int, payload: bytes, timeout: float = 5.0) -> bytes:
    """Send `payload` and read until the server closes (or the timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout) as sock:
        sock.sendall(payload)
        data = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
        return data


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Replica:
    replica = start_replica("serve", tmp_path_factory.mktemp("admin"), app=CATCH_ALL)
    yield replica  # type: ignore[misc]
    replica.stop()


def test_head_on_the_admin_endpoints_sends_no_body(serve: Replica) -> None:
    port = serve.admin_port
    data = _exchange(port, b"HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    parts = data.split(b"HTTP/1.1 ")[1:]
    assert len(parts) == 3, data
    for part in parts[:2]:
        # Headers announce the body's length; nothing follows them.
        assert part.startswith(b"200 ") and part.endswith(b"\r\n\r\n"), part
        assert int(re.search(rb"content-length: (\d+)", part).group(1)) > 0  # type: ignore[union-attr]
    assert parts[2].startswith(b"200 ") and parts[2].endswith(b'"phase": "serving"}')


def test_other_methods_and_paths_on_the_admin_port(serve: Replica) -> None:
    delete = httpx.delete(f"{serve.admin}/readyz", timeout=5)
    post = httpx.post(f"{serve.admin}/metrics", timeout=5)
    other = httpx.get(f"{serve.admin}/ping", timeout=5)
    assert delete.status_code == 405 and delete.headers["allow"] == "GET, HEAD"
    assert post.status_code == 405
    assert other.status_code == 404
    assert httpx.get(f"{serve.admin}/readyz", timeout=5).status_code == 200


def test_http2_preface_gets_a_clean_answer(serve: Replica) -> None:
    data = _exchange(serve.admin_port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 505 "), data
    assert b"HTTP/2 is not served on this port" in data and b"Pause" not in data


async def test_middleware_drain_request_under_plain_uvicorn_ends_the_server(
        tmp_path: Path) -> None:
    # Before: readiness 503 and liveness 200 for ever, a pod that never serves again.
    replica = start_replica("plain", tmp_path, app="server_apps:wrapped")
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            ready = await client.get(f"{replica.admin}/readyz")
            app_drain = await client.get(f"http://{replica.address}/drainsafe/drain")
            assert (await client.get(f"{replica.admin}/readyz")).status_code == 200
            hook = await client.get(f"{replica.admin}/drainsafe/drain")
            draining = await client.get(f"{replica.admin}/readyz")
        code = await wait_exit(replica.proc, 10)
    finally:
        replica.stop()
    assert ready.status_code == 200 and app_drain.status_code == 404  # the app's own 404
    assert hook.status_code == 200 and draining.status_code == 503
    assert code is not None, "uvicorn kept running after the drain"


@pytest.mark.parametrize("kind", ["serve", "middleware"])
def test_not_ready_before_the_apps_start_up_is_done(kind: str, tmp_path: Path) -> None:
    import os
    import subprocess

    from server_harness import APPS_DIR, DRAINSAFE, PY, free_port

    port, admin = free_port(), free_port()
    argv = [DRAINSAFE, "serve", "server_apps:slow_start", "--port", str(port),
            "--admin-host", "127.0.0.1", "--admin-port", str(admin)] if kind == "serve" \
        else [PY, "-m", "uvicorn", "server_apps:wrapped_slow_start", "--port", str(port)]
    env = {**os.environ, "DRAINSAFE_ADMIN_HOST": "127.0.0.1",
           "DRAINSAFE_ADMIN_PORT": str(admin)}
    proc = subprocess.Popen(argv, cwd=APPS_DIR, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    seen: list[int] = []
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                status = httpx.get(f"http://127.0.0.1:{admin}/readyz", timeout=1).status_code
            except httpx.HTTPError:
                time.sleep(0.02)
                continue
            if not seen or seen[-1] != status:
                seen.append(status)
            if status == 200:
                break
            time.sleep(0.05)
        app = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
    finally:
        proc.kill()
        proc.wait(10)
    # The admin port opens first; readiness waits for the app's lifespan start-up.
    assert seen == [503, 200], seen
    assert app.text == "ready"


def test_liveness_fails_once_the_lifecycle_is_over_in_a_process_still_there() -> None:
    settings = Settings(drain_delay=1, shutdown_timeout=2, flush=1)
    state = begin_drain(State(), 10.0, "drain endpoint")
    assert live(State(), 0.0, settings) and live(state, 100.0, settings)  # DRAINING
    closing = State(phase=Phase.CLOSING, drain_started=10.0, closing_started=11.0)
    assert live(closing, 13.9, settings) and not live(closing, 14.0, settings)
    assert not live(State(phase=Phase.EXIT), 0.0, settings)
