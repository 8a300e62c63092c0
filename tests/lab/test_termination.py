"""Termination sequencing against real processes: preStop, SIGTERM, SIGKILL, the 2 s floor."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from drainsafe.lab.node.handlers import Target, run_action
from drainsafe.lab.node.process import ProcessContainer, VirtualContainer
from drainsafe.lab.node.termination import (
    MINIMUM_GRACE_SECONDS,
    effective_grace,
    kill_container,
    kill_grace,
    stop_timeout,
)

# A child that logs each signal it gets, and either exits on SIGTERM or ignores it.
CHILD = r"""
import os, signal, sys, time
mode = sys.argv[1]
log = open(sys.argv[2], "a", buffering=1)
def on_term(signo, frame):
    log.write(f"TERM {time.monotonic()}\n")
    if mode == "exit":
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
log.write(f"START {os.getpid()}\n")
if len(sys.argv) > 3:  # spawn a grandchild that ignores SIGTERM, to see it die with the group
    import subprocess
    p = subprocess.Popen([sys.executable, "-c",
        "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    log.write(f"GRANDCHILD {p.pid}\n")
while True:
    time.sleep(0.05)
"""


def test_stop_timeout_follows_the_kubelet() -> None:
    assert stop_timeout(30, None) == 30
    assert stop_timeout(30, 10.9) == 20          # elapsed truncated to whole seconds
    assert stop_timeout(30, 29.5) == MINIMUM_GRACE_SECONDS  # 30 - 29 = 1 -> floor of 2
    assert stop_timeout(3, 3.0) == MINIMUM_GRACE_SECONDS    # hook overran: one-off 2 s
    assert stop_timeout(0, None) == MINIMUM_GRACE_SECONDS


def _pod(spec_grace: int | None, deletion_grace: int | None) -> dict[str, object]:
    meta: dict[str, object] = {"name": "p"}
    spec: dict[str, object] = {}
    if deletion_grace is not None:
        meta["deletionGracePeriodSeconds"] = deletion_grace
    if spec_grace is not None:
        spec["terminationGracePeriodSeconds"] = spec_grace
    return {"metadata": meta, "spec": spec}


# (spec terminationGracePeriodSeconds, deletionGracePeriodSeconds, grace already in force,
#  expected): pod_workers.go calculateEffectiveGracePeriod at v1.31.0.
@pytest.mark.parametrize(("spec_grace", "deletion_grace", "current", "expected"), [
    (30, 30, 0, 30),     # an ordinary graceful delete
    (30, 5, 0, 5),       # delete --grace-period=5 shortens the spec's value
    (0, 1, 0, 1),        # spec 0: the API server's minimum graceful delete is 1 s
    (0, None, 0, 1),     # force-deleted, spec 0: at least 1 s, never 30
    (120, None, 0, 120),  # force-deleted (no grace on the DELETED pod): the spec's value
    (None, None, 0, 1),  # nothing at all: 1 s
    (30, 10, 5, 5),      # a grace in force only shrinks
    (30, 3, 10, 3),
])
def test_effective_grace_follows_the_pod_worker(spec_grace: int | None,
                                                deletion_grace: int | None, current: int,
                                                expected: int) -> None:
    assert effective_grace(_pod(spec_grace, deletion_grace), current) == expected


# setTerminationGracePeriod at v1.31.0: a kill the kubelet starts after a failed probe.
@pytest.mark.parametrize(("spec_grace", "deletion_grace", "probe_grace", "reason", "expected"), [
    (0, None, None, "liveness", 0),    # explicit 0 stays 0: no preStop, SIGKILL after 2 s
    (30, None, None, "liveness", 30),
    (30, None, 5, "liveness", 5),      # the probe's own terminationGracePeriodSeconds
    (30, None, 5, "startup", 30),      # ... only for the probe that failed
    (0, None, 7, "liveness", 7),
    (30, 4, 5, "liveness", 4),         # already being deleted: the deletion's grace
    (None, None, 5, "liveness", MINIMUM_GRACE_SECONDS),  # no spec value at all
])
def test_kill_grace_follows_set_termination_grace_period(
        spec_grace: int | None, deletion_grace: int | None, probe_grace: int | None,
        reason: str, expected: int) -> None:
    container: dict[str, object] = {"name": "c"}
    if probe_grace is not None:
        container["livenessProbe"] = {"terminationGracePeriodSeconds": probe_grace}
    assert kill_grace(_pod(spec_grace, deletion_grace), container, reason) == expected
    # and the SIGTERM-to-SIGKILL window that follows never drops below the 2 s floor
    assert stop_timeout(expected, None) >= MINIMUM_GRACE_SECONDS


async def _start(tmp_path: Path, mode: str, *extra: str) -> tuple[ProcessContainer, Path]:
    log = tmp_path / "signals.log"
    container = ProcessContainer([sys.executable, "-c", CHILD, mode, str(log), *extra],
                                 env=dict(os.environ), cwd=tmp_path, log_path=tmp_path / "c.log")
    await container.start()
    deadline = time.monotonic() + 20
    while not (log.exists() and "START" in log.read_text()):
        assert time.monotonic() < deadline, "child did not start"
        await asyncio.sleep(0.02)
    return container, log


async def test_prestop_runs_before_sigterm_and_a_cooperative_process_exits(tmp_path: Path) -> None:
    container, log = await _start(tmp_path, "exit")
    marks: list[float] = []

    async def prestop() -> None:
        await run_action({"sleep": {"seconds": 0.5}}, Target("127.0.0.1"), timeout=None)
        marks.append(time.monotonic())

    record = await kill_container(container, grace=10, prestop=prestop)
    assert record.prestop_completed is True
    assert record.sigterm_at is not None and marks and record.sigterm_at >= marks[0]
    assert record.sigterm_at - record.started >= 0.5
    assert record.sigkill_at is None
    assert record.exit_code == 0
    assert record.stop_timeout == 10  # 0.5 s truncates to 0: the full grace is left
    assert "TERM" in log.read_text()


async def test_sigkill_at_the_deadline_when_sigterm_is_ignored(tmp_path: Path) -> None:
    container, log = await _start(tmp_path, "ignore")
    record = await kill_container(container, grace=2, prestop=None)
    assert record.sigterm_at is not None and record.sigkill_at is not None
    waited = record.sigkill_at - record.sigterm_at
    assert 1.9 <= waited <= 3.5
    assert record.exit_code == 128 + signal.SIGKILL
    assert "TERM" in log.read_text()


async def test_prestop_overrunning_grace_gets_the_one_off_two_second_extension(
        tmp_path: Path) -> None:
    container, _ = await _start(tmp_path, "ignore")

    async def prestop() -> None:
        await asyncio.sleep(60)  # far longer than the grace period

    record = await kill_container(container, grace=1, prestop=prestop)
    assert record.prestop_completed is False
    assert record.prestop_ended is not None and record.sigterm_at is not None
    assert record.sigkill_at is not None
    # SIGTERM when the grace period ends, SIGKILL 2 s later: 3 s in all, not 1.
    assert 0.9 <= record.sigterm_at - record.started <= 2.0
    assert record.stop_timeout == MINIMUM_GRACE_SECONDS
    assert 1.9 <= record.sigkill_at - record.sigterm_at <= 3.5
    assert record.sigkill_at - record.started >= 2.9


async def test_exec_prestop_runs_with_the_container_env(tmp_path: Path) -> None:
    container, _ = await _start(tmp_path, "exit")
    out = tmp_path / "hook.txt"
    target = Target("127.0.0.1", env={"GREETING": "bye"}, cwd=tmp_path)

    async def prestop() -> None:
        await run_action({"exec": {"command": [
            sys.executable, "-c",
            f"import os; open({str(out)!r}, 'w').write(os.environ['GREETING'])"]}},
            target, timeout=None)

    record = await kill_container(container, grace=10, prestop=prestop)
    assert out.read_text() == "bye"
    assert record.exit_code == 0


async def test_sigkill_takes_the_whole_process_group(tmp_path: Path) -> None:
    container, log = await _start(tmp_path, "ignore", "spawn")
    deadline = time.monotonic() + 20
    while "GRANDCHILD" not in log.read_text():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    grandchild = int(log.read_text().split("GRANDCHILD ")[1].split()[0])
    await kill_container(container, grace=0, prestop=None)
    deadline = time.monotonic() + 10
    while _alive(grandchild):
        assert time.monotonic() < deadline, "grandchild survived its container"
        await asyncio.sleep(0.05)


async def test_virtual_container_exits_after_the_configured_time() -> None:
    container = VirtualContainer(exit_after_sigterm=0.3)
    record = await kill_container(container, grace=5, prestop=None)
    assert record.exit_code == 0 and record.sigkill_at is None
    assert record.exited_at is not None and record.sigterm_at is not None
    assert record.exited_at - record.sigterm_at >= 0.29


async def test_virtual_container_that_outlives_grace_is_killed() -> None:
    container = VirtualContainer(exit_after_sigterm=60)
    record = await kill_container(container, grace=0, prestop=None)
    assert record.killed and record.exit_code == 128 + signal.SIGKILL


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); read its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False



async def test_http_get_prestop_reaches_the_server_before_sigterm(tmp_path: Path) -> None:
    container, log = await _start(tmp_path, "exit")
    hits: list[float] = []

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readuntil(b"\r\n\r\n")
        hits.append(time.monotonic())
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await w.drain()
        w.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        target = Target("127.0.0.1", named_ports={"http": port})

        async def prestop() -> None:
            await run_action({"httpGet": {"path": "/drainsafe/drain", "port": "http"}},
                             target, timeout=None)

        record = await kill_container(container, grace=10, prestop=prestop)
    finally:
        server.close()
    assert hits and record.sigterm_at is not None and hits[0] <= record.sigterm_at
    assert record.exit_code == 0 and "TERM" in log.read_text()
