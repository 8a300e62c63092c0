"""Probes: spec defaults and validation, thresholds, and httpGet/tcpSocket/exec against real
processes listening on a loopback address."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from drainsafe.lab.node.handlers import Outcome, Target, run_action
from drainsafe.lab.node.probes import ProbeSpec, ProbeSpecError, ProbeType, ProbeWorker, Threshold

# A server whose /healthz answers with the code written in a file (default 200).
SERVER = r"""
import http.server, os, sys
code_file = sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = int(open(code_file).read()) if os.path.exists(code_file) else 200
        self.send_response(code); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""


@pytest.fixture
async def http_server(tmp_path: Path) -> AsyncIterator[tuple[int, Path]]:
    code_file = tmp_path / "code"
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", SERVER, "x", str(code_file),
                                                stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(20):
            line = await proc.stdout.readline()
        yield int(line), code_file
    finally:
        proc.kill()
        await proc.wait()


def test_defaults_and_validation() -> None:
    spec = ProbeSpec.from_manifest(ProbeType.READINESS, {"httpGet": {"path": "/", "port": 80}})
    assert (spec.period, spec.timeout, spec.success_threshold, spec.failure_threshold,
            spec.initial_delay) == (10, 1, 1, 3, 0)
    with pytest.raises(ProbeSpecError, match=r"c\.livenessProbe\.successThreshold"):
        ProbeSpec.from_manifest(ProbeType.LIVENESS, {"tcpSocket": {"port": 80},
                                                     "successThreshold": 2}, where="c")
    with pytest.raises(ProbeSpecError, match="periodSeconds: 0"):
        ProbeSpec.from_manifest(ProbeType.READINESS, {"tcpSocket": {"port": 80},
                                                      "periodSeconds": 0})
    with pytest.raises(ProbeSpecError, match="no action"):
        ProbeSpec.from_manifest(ProbeType.READINESS, {"periodSeconds": 1})


def test_thresholds_flip_only_after_consecutive_results() -> None:
    ready = Threshold(ProbeSpec(ProbeType.READINESS, {"tcpSocket": {"port": 1}},
                                success_threshold=2, failure_threshold=3))
    assert ready.result is False
    assert ready.observe(True) is False
    assert ready.observe(True) is True
    assert ready.observe(False) is True
    assert ready.observe(False) is True
    assert ready.observe(True) is True       # the run of failures is broken
    assert [ready.observe(False) for _ in range(3)] == [True, True, False]
    live = Threshold(ProbeSpec(ProbeType.LIVENESS, {"tcpSocket": {"port": 1}}))
    assert live.result is True
    startup = Threshold(ProbeSpec(ProbeType.STARTUP, {"tcpSocket": {"port": 1}}))
    assert startup.result is None


async def test_http_get_success_and_failure_codes(http_server: tuple[int, Path]) -> None:
    port, code_file = http_server
    target = Target("127.0.0.1", named_ports={"http": port})
    ok = await run_action({"httpGet": {"path": "/healthz", "port": "http"}}, target, timeout=5)
    assert ok.ok
    code_file.write_text("302")
    assert (await run_action({"httpGet": {"port": port}}, target, timeout=5)).ok
    code_file.write_text("503")
    failed = await run_action({"httpGet": {"port": port}}, target, timeout=5)
    assert not failed.ok and "503" in failed.message


async def test_tcp_and_exec_probes(http_server: tuple[int, Path], tmp_path: Path) -> None:
    port, _ = http_server
    target = Target("127.0.0.1", env={"WANT": "0"}, cwd=tmp_path)
    assert (await run_action({"tcpSocket": {"port": port}}, target, timeout=5)).ok
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    free_port = closed.getsockname()[1]
    closed.close()
    assert not (await run_action({"tcpSocket": {"port": free_port}}, target, timeout=5)).ok
    code = "import os,sys; sys.exit(int(os.environ['WANT']))"
    assert (await run_action({"exec": {"command": [sys.executable, "-c", code]}}, target,
                             timeout=10)).ok
    bad = Target("127.0.0.1", env={"WANT": "3"})
    result = await run_action({"exec": {"command": [sys.executable, "-c", code]}}, bad, timeout=10)
    assert not result.ok and "exit code 3" in result.message


async def test_exec_probe_timeout_is_a_failure(tmp_path: Path) -> None:
    result = await run_action({"exec": {"command": [sys.executable, "-c",
                                                    "import time; time.sleep(30)"]}},
                              Target("127.0.0.1"), timeout=1)
    assert not result.ok and "timed out" in result.message


async def test_worker_reports_readiness_transitions(http_server: tuple[int, Path]) -> None:
    port, code_file = http_server
    spec = ProbeSpec(ProbeType.READINESS, {"httpGet": {"port": port, "path": "/"}},
                     period=1, timeout=2, failure_threshold=2)
    seen: list[bool | None] = []
    changed = asyncio.Event()

    def on_result(kind: ProbeType, result: bool | None, outcome: Outcome) -> None:
        if not seen or seen[-1] != result:
            seen.append(result)
            changed.set()

    loop = asyncio.get_running_loop()
    worker = ProbeWorker(spec, Target("127.0.0.1"), started_at=loop.time(), on_result=on_result,
                         clock=loop.time)
    worker.start()
    try:
        async with asyncio.timeout(20):
            await changed.wait()
        assert seen == [True]
        changed.clear()
        code_file.write_text("500")
        async with asyncio.timeout(20):
            await changed.wait()
        assert seen == [True, False]  # after 2 consecutive failures
    finally:
        await worker.stop()


async def test_worker_waits_for_initial_delay_and_gate() -> None:
    calls: list[float] = []

    async def fake_run(action: object, target: Target, *, timeout: float,
                       client: object) -> Outcome:
        calls.append(loop.time())
        return Outcome(True)

    loop = asyncio.get_running_loop()
    opened = False
    spec = ProbeSpec(ProbeType.LIVENESS, {"tcpSocket": {"port": 1}}, initial_delay=0.5, period=1)
    start = loop.time()
    worker = ProbeWorker(spec, Target("127.0.0.1"), started_at=start,
                         on_result=lambda *a: None, clock=loop.time, run=fake_run,
                         gate=lambda: opened)
    worker.start()
    try:
        await asyncio.sleep(1.8)
        assert calls == []          # gate closed (startup probe not yet succeeded)
        opened = True
        deadline = loop.time() + 10
        while not calls and loop.time() < deadline:
            await asyncio.sleep(0.05)
        assert calls and calls[0] - start >= 0.5
    finally:
        await worker.stop()
