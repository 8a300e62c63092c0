"""Shared fixtures for the lab tests (control plane and node side; keep additions additive)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
from collections.abc import AsyncIterator, Callable

import pytest

from drainsafe.lab.cluster import Lab, pids_alive
from drainsafe.lab.controllers.nodelifecycle import NodeMonitor
from drainsafe.lab.controlplane import ControlPlane
from drainsafe.lab.node.kubelet import NODE_LEASE_SECONDS
from drainsafe.lab.node.probes import LoopStalls

KUBECTL_DIR = pathlib.Path("/usr/lib/google-cloud-sdk/bin")
KUBECTL_VERSIONS = ("1.27", "1.33")


@dataclasses.dataclass
class KubectlResult:
    returncode: int
    stdout: str
    stderr: str


@dataclasses.dataclass
class Kubectl:
    """Runs a real kubectl binary against the lab, without blocking the event loop
    (the API server runs on the same loop as the test)."""

    binary: pathlib.Path
    kubeconfig: pathlib.Path
    cache_dir: pathlib.Path

    async def __call__(self, *args: str, stdin: str | None = None,
                       timeout: float = 60) -> KubectlResult:
        proc = await asyncio.create_subprocess_exec(
            str(self.binary), f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.cache_dir}", *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(stdin.encode() if stdin is not None else None), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        return KubectlResult(int(proc.returncode or 0), out.decode(), err.decode())

    async def ok(self, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
        result = await self(*args, stdin=stdin, timeout=timeout)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout


@pytest.fixture
def node_monitor() -> NodeMonitor:
    """The control plane's node health settings (kube-controller-manager's defaults). A
    test scales them down by parametrizing this fixture by name:
    `@pytest.mark.parametrize("node_monitor", [NodeMonitor(grace_seconds=1.0)])`."""
    return NodeMonitor()


@pytest.fixture
async def control_plane(tmp_path: pathlib.Path,
                        node_monitor: NodeMonitor) -> AsyncIterator[ControlPlane]:
    """A started lab control plane (HTTPS + token), stopped even when the test fails."""
    cp = ControlPlane(tmp_path / "state", bookmark_seconds=0.5, node_monitor=node_monitor)
    await cp.start()
    try:
        yield cp
    finally:
        await cp.stop()


@pytest.fixture
def cp_kubeconfig(control_plane: ControlPlane, tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "kubeconfig"
    control_plane.write_kubeconfig(path)
    return path


@pytest.fixture(params=KUBECTL_VERSIONS)
def kubectl(request: pytest.FixtureRequest, cp_kubeconfig: pathlib.Path,
            tmp_path: pathlib.Path) -> Kubectl:
    binary = KUBECTL_DIR / f"kubectl.{request.param}"
    if not binary.exists():
        pytest.skip(f"{binary} is not installed")
    return Kubectl(binary, cp_kubeconfig, tmp_path / f"kubectl-cache-{request.param}")


# ---- node side: a whole lab (control plane + kubelets + traffic paths) -----------------

@pytest.fixture
async def lab(tmp_path: pathlib.Path) -> AsyncIterator[Lab]:
    """A 2-node lab with a 0.2 s propagation delay; every process it started is checked
    to be gone afterwards, also when the test fails."""
    seen: set[int] = set()
    async with Lab(tmp_path / "lab", nodes=2, propagation_seconds=0.2,
                   restart_backoff=0.5) as running:
        try:
            yield running
        finally:
            seen.update(running.pids())
    assert pids_alive(seen) == [], "processes of the lab survived it"


async def wait_until(control_plane: ControlPlane, predicate: Callable[[], bool], *,
                     timeout: float = 30.0, what: str = "condition") -> None:
    """Wait (woken by store changes, bounded by `timeout`) until predicate() holds."""
    changed = asyncio.Event()
    unlisten = control_plane.store.listen(lambda _ev: changed.set())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(remaining, 0.5))
    finally:
        unlisten()


def node_lease_seconds(monitor: NodeMonitor) -> float:
    """The kubelets' lease duration scaled with the grace period, as their defaults relate
    (40 s to 50 s): a lease renewed every quarter of it is renewed 5 times per grace."""
    return NODE_LEASE_SECONDS * monitor.grace_seconds / NodeMonitor().grace_seconds


@pytest.fixture
async def cp_nodes(control_plane: ControlPlane, cp_kubeconfig: pathlib.Path,
                   node_monitor: NodeMonitor) -> AsyncIterator[list[str]]:
    """Four GPU nodes (2 GPUs each) played by the test-only node agent, their Leases
    renewed so that they stay Ready past the control plane's grace period."""
    from cp_node_agent import NodeAgent

    names = ["node-a", "node-b", "node-c", "node-d"]
    async with NodeAgent(cp_kubeconfig, names, gpus=2,
                         lease_seconds=node_lease_seconds(node_monitor)):
        yield names


@pytest.fixture
async def loop_stalls() -> AsyncIterator[LoopStalls]:
    """The test's event loop's measured stalls (the lab's too: it runs in the test's
    process). A timing assertion adds the stall measured over its window, so a busy machine
    widens the margin by the delay it really imposed and no more."""
    stalls = LoopStalls.for_loop()
    stalls.acquire()
    try:
        yield stalls
    finally:
        stalls.release()
