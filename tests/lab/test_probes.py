"""Probes: spec defaults and validation, thresholds, and httpGet/tcpSocket/exec against real
processes listening on a loopback address."""

from __future__ import annotations

import asyncio
import itertools
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from drainsafe.lab.node.handlers import Outcome, Target, run_action
from drainsafe.lab.node.probes import (
    LoopStalls,
    ProbeSpec,
    ProbeSpecError,
    ProbeTiming,
    ProbeType,
    ProbeWorker,
    Threshold,
    Verdict,
    verdict,
)

# A server whose /healthz answers with the code written in a file (default 200), after the
# delay written in the file beside it (default none).
SERVER = r"""
import http.server, os, sys, time
code_file = sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = int(open(code_file).read()) if os.path.exists(code_file) else 200
        if os.path.exists(code_file + ".delay"):
            time.sleep(float(open(code_file + ".delay").read()))
        self.send_response(code); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
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


def test_verdict_throws_away_only_timeouts_the_lab_stalled_through() -> None:
    def timing(stalled: float) -> ProbeTiming:
        return ProbeTiming(due=10.0, sent=10.5, answered=12.0, stalled=stalled)

    timeout = Outcome(False, "timed out", timed_out=True)
    assert verdict(Outcome(True), timing(1.4), 1.0) is Verdict.SUCCESS
    assert verdict(timeout, timing(0.0), 1.0) is Verdict.FAILURE      # the pod was slow
    assert verdict(timeout, timing(1.4), 1.0) is Verdict.UNKNOWN      # the lab was
    assert verdict(timeout, timing(0.05), 1.0) is Verdict.FAILURE     # a blip: counted
    # The pod's own answer (refused, HTTP 500) counts, however late the lab read it.
    assert verdict(Outcome(False, "HTTP 500"), timing(1.4), 1.0) is Verdict.FAILURE
    assert timing(0.0).lateness == 0.5


async def test_loop_stalls_measure_a_blocked_loop() -> None:
    stalls = LoopStalls()
    stalls.acquire()
    try:
        await asyncio.sleep(0.2)
        before = time.monotonic()
        time.sleep(0.6)
        await asyncio.sleep(0.1)  # the stall timer runs late, and records it
        after = time.monotonic()
        assert stalls.stalled(before, after) >= 0.5
        assert stalls.stalled(after, after + 1) == 0.0
        assert stalls.total() >= stalls.stalled(before, after)
    finally:
        stalls.release()


class Recorder:
    """Wraps run_action: keeps every outcome, and can block the loop while a probe waits."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []
        self.block = 0.0

    async def run(self, action: Any, target: Target, *, timeout: float,
                  client: object) -> Outcome:
        if self.block:
            # Runs on the loop's next turn, once the request is on its way: the whole
            # lab stops, as when the machine gives the lab's process no CPU.
            asyncio.get_running_loop().call_soon(time.sleep, self.block)
        outcome = await run_action(action, target, timeout=timeout)
        self.outcomes.append(outcome)
        return outcome


def _watch(seen: list[bool | None], changed: asyncio.Event) -> Any:
    def on_result(kind: ProbeType, result: bool | None, outcome: Outcome) -> None:
        if not seen or seen[-1] != result:
            seen.append(result)
            changed.set()
    return on_result


async def test_a_timeout_while_the_lab_was_starved_counts_for_nothing(
        http_server: tuple[int, Path]) -> None:
    port, code_file = http_server
    spec = ProbeSpec(ProbeType.READINESS, {"httpGet": {"port": port, "path": "/"}},
                     period=0.5, timeout=1, failure_threshold=1)
    seen: list[bool | None] = []
    changed = asyncio.Event()
    recorder = Recorder()
    worker = ProbeWorker(spec, Target("127.0.0.1"), started_at=time.monotonic(),
                         on_result=_watch(seen, changed), run=recorder.run)
    worker.start()
    try:
        async with asyncio.timeout(20):
            await changed.wait()
        assert seen == [True]
        changed.clear()
        # The pod now answers after 2 s, and the lab's loop stops for 1.5 s of every wait:
        # when it runs again the timeout has passed, and whose fault that was it cannot
        # tell. Threshold 1: one counted failure would make the pod unready.
        Path(str(code_file) + ".delay").write_text("2")
        recorder.block = 1.5
        async with asyncio.timeout(30):
            while worker.unknown < 2:
                await asyncio.sleep(0.1)
        recorder.block = 0.0
        timed_out = [o for o in recorder.outcomes if not o.ok]
        assert len(timed_out) >= 2, recorder.outcomes
        assert worker.last_timing is not None and worker.last_timing.stalled >= 1.0
        assert seen == [True] and worker.threshold.result is True
        # The same slow pod on a lab that is not starved: its timeouts count.
        async with asyncio.timeout(30):
            await changed.wait()
        assert seen == [True, False]
    finally:
        await worker.stop()


async def test_a_failing_pod_still_fails_on_a_starved_lab(
        http_server: tuple[int, Path]) -> None:
    port, code_file = http_server
    spec = ProbeSpec(ProbeType.READINESS, {"httpGet": {"port": port, "path": "/"}},
                     period=0.5, timeout=1, failure_threshold=2)
    seen: list[bool | None] = []
    changed = asyncio.Event()
    recorder = Recorder()
    worker = ProbeWorker(spec, Target("127.0.0.1"), started_at=time.monotonic(),
                         on_result=_watch(seen, changed), run=recorder.run)
    worker.start()
    try:
        async with asyncio.timeout(20):
            await changed.wait()
        changed.clear()
        code_file.write_text("500")
        recorder.block = 1.5  # every wait stalled past the timeout; the pod answered first
        async with asyncio.timeout(30):
            await changed.wait()
        assert seen == [True, False]
        assert worker.unknown == 0
        assert worker.last_timing is not None and worker.last_timing.stalled >= 1.0
    finally:
        await worker.stop()


async def test_a_late_worker_drops_missed_ticks_instead_of_bursting() -> None:
    calls: list[float] = []

    async def run(action: object, target: Target, *, timeout: float,
                  client: object) -> Outcome:
        calls.append(time.monotonic())
        if len(calls) == 2:
            time.sleep(1.0)  # the loop starved for five periods
        return Outcome(True)

    spec = ProbeSpec(ProbeType.LIVENESS, {"tcpSocket": {"port": 1}}, period=0.2)
    worker = ProbeWorker(spec, Target("127.0.0.1"), started_at=time.monotonic(),
                         on_result=lambda *a: None, run=run)
    worker.start()
    try:
        async with asyncio.timeout(20):
            while len(calls) < 5:
                await asyncio.sleep(0.05)
    finally:
        await worker.stop()
    assert worker.skipped_ticks >= 3
    # After the stall: at most one probe at once (the tick due now), then the period.
    gaps = [b - a for a, b in itertools.pairwise(calls[2:])]
    assert all(gap >= 0.1 for gap in gaps[1:]), gaps
