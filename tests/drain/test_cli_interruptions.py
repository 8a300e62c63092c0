"""drain and audit as CI runs them (issue 18): SIGTERM and Ctrl-C mid-drain, a re-run with a
new --reason, output through a pipe, a node that does not exist, a binary kubeconfig, and
audit's exit codes for an unreachable API server and a forgotten cordon."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from drainsafe.drain import ownership
from drainsafe.kube import KubeClient, api_path
from drainsafe.lab.cluster import virtual_deployment

from .labkit import get_node, gpu_lab, pdb, pods_of


def ds(*args: str) -> list[str]:
    return [sys.executable, "-m", "drainsafe", *args]


async def run(*argv: str, columns: int = 80, timeout: float = 90) -> tuple[int, str, str]:
    """A run as in CI: stdout and stderr are pipes and the 'terminal' is 80 columns."""
    env = {**os.environ, "COLUMNS": str(columns)}
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        async with asyncio.timeout(timeout):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode(), err.decode()


async def signal_when(argv: list[str], reached: Callable[[], Awaitable[bool]],
                      sig: int) -> tuple[int, str]:
    """Run the CLI until `reached()`, then send `sig`."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not await reached():
            await asyncio.sleep(0.05)
        proc.send_signal(sig)
        async with asyncio.timeout(30):
            _, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    return (proc.returncode if proc.returncode is not None else -1), err.decode()


async def test_sigterm_and_ctrl_c_are_recorded_and_a_rerun_takes_the_new_reason(
        tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=2, gpus=0) as lab:
        await lab.apply(virtual_deployment("w", replicas=6, grace=10, startup_seconds=1.0,
                                           exit_after_sigterm_seconds=1.0),
                        pdb("w", "w", maxUnavailable=1))
        await lab.wait_available("default", "w", timeout=60)
        cfg = str(lab.kubeconfig)
        async with KubeClient.from_kubeconfig(cfg) as client:
            pods = await pods_of(client, "w")
            node = pods[0]["spec"]["nodeName"]
            argv = ds("drain", node, "--kubeconfig", cfg, "--timeout", "90",
                      "--reason", "kernel 6.8")
            # Surge-first evicts as fast as the budget allows once the stand-ins are
            # Available, so the states that last are the wait for the stand-ins and the
            # wait for the evicted pods to go (each pod's 1 s start-up and exit).

            async def surged() -> bool:
                dep = await client.get(api_path("apps/v1", "deployments",
                                                namespace="default", name="w"))
                return int(dep["spec"]["replicas"]) > 6

            async def evicted() -> bool:
                return bool(ownership.Progress.of(await get_node(client, node)).evicted)

            # Ctrl-C while the stand-ins start: exit 130 and a line saying what state the
            # node is left in.
            code, err = await signal_when(argv, surged, signal.SIGINT)
            assert code == 130, err
            assert "drainsafe drain: interrupted (Ctrl-C); the nodes stay cordoned" in err
            assert not ownership.Progress.of(await get_node(client, node)).evicted
            # SIGTERM (a cancelled CI job) while the re-run's evicted pods go: before, the
            # record said "draining" forever.
            code, err = await signal_when(argv, evicted, signal.SIGTERM)
            n = await get_node(client, node)
            assert code == 143, err
            assert "drainsafe drain: terminated (SIGTERM)" in err and "Traceback" not in err
            assert ownership.Progress.of(n).state == "interrupted"
            assert n["spec"]["unschedulable"] and ownership.owned_by_drainsafe(n)
            # A re-run with a new reason records it (before: the first run's reason stayed).
            code, _, err = await run(*ds("drain", node, "--kubeconfig", cfg, "--timeout", "90",
                                         "--reason", "CVE-2026-0001 hotfix"))
            assert code == 0, err
            n = await get_node(client, node)
            annotations = n["metadata"]["annotations"]
            assert annotations[ownership.REASON] == "CVE-2026-0001 hotfix"
            # Without --reason a re-run keeps what was recorded.
            code, _, err = await run(*ds("drain", node, "--kubeconfig", cfg, "--timeout", "90"))
            assert code == 0, err
            n = await get_node(client, node)
            assert n["metadata"]["annotations"][ownership.REASON] == "CVE-2026-0001 hotfix"
            # audit through a pipe at COLUMNS=80: whole rows, the reason in one piece.
            code, out, err = await run(*ds("audit", "--kubeconfig", cfg), columns=80)
            assert code == 0, err
            [row] = [line for line in out.splitlines() if node in line]
            assert "CVE-2026-0001 hotfix" in row and "drained" in row


async def test_missing_node_refused_before_any_table_and_forgotten_cordon_exits_1(
        tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=1, gpus=0) as lab:
        cfg = str(lab.kubeconfig)
        code, out, err = await run(*ds("drain", "node-that-does-not-exist", "--kubeconfig", cfg))
        assert code == 2
        assert out == "" and "node 'node-that-does-not-exist' not found" in err
        async with KubeClient.from_kubeconfig(cfg) as client:
            items, _ = await client.list(api_path("v1", "nodes"))
            name = items[0]["metadata"]["name"]
            # A cordon by hand (kubectl cordon): no drainsafe record.
            await client.patch(api_path("v1", "nodes", name=name),
                               {"spec": {"unschedulable": True}})
        code, out, err = await run(*ds("audit", "--kubeconfig", cfg))
        assert code == 1, err
        assert name in out


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        f"clusters: [{{name: t, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: t, user: {token: x}}]\n"
        "contexts: [{name: t, context: {cluster: t, user: t}}]\n")
    return path


async def test_audit_exit_code_for_an_unreachable_api_server_is_3(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = _kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    code, _, err = await run(*ds("audit", "--kubeconfig", str(cfg), "--request-timeout", "2"))
    assert code == 3, err  # before: 1, the code of a forgotten cordon
    assert "API error" in err


async def test_binary_kubeconfig_is_named(tmp_path: Path) -> None:
    cfg = tmp_path / "kubeconfig.bin"
    cfg.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe")
    for command in ("drain", "audit"):
        args = ["n1"] if command == "drain" else []
        code, _, err = await run(*ds(command, *args, "--kubeconfig", str(cfg)))
        assert code == 2, err
        assert str(cfg) in err and "not UTF-8" in err
