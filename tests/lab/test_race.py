"""The seeds' termination race, reproduced: endpoint removal reaches the proxy N s after
the pod starts terminating (here N = 1 s), so a server that stops accepting at SIGTERM
loses the requests sent to it meanwhile; a preStop sleep longer than N, or `drainsafe
serve` with a drain delay longer than N, loses none.

All three run side by side in one lab during a real `kubectl rollout restart`, with
traffic through the ClusterIP (kube-proxy-like) path, one new connection per request.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.core_v1 import Pod

from drainsafe.lab.cluster import Lab, pids_alive
from drainsafe.verify.load import LoadRun, LoadSpec, RequestResult
from drainsafe.verify.loadproc import run_load_process

PROPAGATION = 1.0
# The drain delay (preStop sleep or serve's) covers the propagation delay with room to
# spare for a loaded event loop (the kubelet and the proxy share it with the load).
DRAIN_DELAY = 3 * PROPAGATION
KUBECTL = Path("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")

pytestmark = pytest.mark.e2e


def workload(name: str, command: list[str], *, ready_path: str, grace: int = 15,
             prestop: dict[str, Any] | None = None, ready_port: str = "http"
             ) -> dict[str, Any]:
    ports = [{"name": "http", "containerPort": 8000}]
    if ready_port == "drainsafe-admin":
        # drainsafe serve answers readiness on its admin port only, listed in no Service.
        ports.append({"name": "drainsafe-admin", "containerPort": 8490})
    container: dict[str, Any] = {
        "name": "server", "image": "vllm/vllm-openai",
        "command": command,
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "DRAINSAFE_GRACE_SECONDS", "value": str(grace)}],
        "ports": ports,
        "readinessProbe": {"httpGet": {"path": ready_path, "port": ready_port},
                           "periodSeconds": 1, "failureThreshold": 1},
    }
    if prestop is not None:
        container["lifecycle"] = {"preStop": prestop}
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"terminationGracePeriodSeconds": grace,
                                           "containers": [container]}}}}


def service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"app": name},
                     "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}


UVICORN = [sys.executable, "-m", "uvicorn", "drainsafe.workload.streaming:app",
           "--host", "$(POD_IP)", "--port", "8000", "--no-access-log"]
SERVE = [sys.executable, "-m", "drainsafe", "serve", "drainsafe.workload.streaming:app",
         "--host", "$(POD_IP)", "--port", "8000", "--no-access-log",
         "--admin-host", "$(POD_IP)", "--admin-port", "8490",
         "--drain-delay", str(DRAIN_DELAY), "--shutdown-timeout", "5"]


@dataclass
class Tally:
    ok: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def add(self, result: RequestResult) -> None:
        if result.outcome.ok:
            self.ok += 1
        else:
            self.failed += 1
            key = result.outcome.label
            self.errors[key] = self.errors.get(key, 0) + 1


def load(url: str, tally: Tally, stop: asyncio.Event) -> Awaitable[LoadRun]:
    # Connection: close, so every request opens a new connection that the proxy routes
    # afresh (as many clients behind a Service do); a refused connection is a lost
    # request (no client retry). In its own process: in this loop it would starve the
    # lab's proxy and kubelets (issue 28).
    spec = LoadSpec(url=url + "/ping", duration=3600, concurrency=3, keepalive=False,
                    headers=(("connection", "close"),), end_marker=None, pod_header=None,
                    timeout=10)
    return run_load_process(spec, on_result=tally.add, stop=stop)


async def kubectl(lab: Lab, *args: str) -> str:
    binary = str(KUBECTL) if KUBECTL.exists() else "kubectl"
    proc = await asyncio.create_subprocess_exec(
        binary, f"--kubeconfig={lab.kubeconfig}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": str(lab.kubeconfig)})
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, (args, out.decode(), err.decode())
    return out.decode()


async def settled(lab: Lab, name: str, old: set[str], timeout: float = 60) -> None:
    """Until the rollout is complete and every old pod is gone (its termination over)."""
    assert lab.client is not None
    await lab.wait_available("default", name, timeout=timeout)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        names = {p.metadata.name async for p in lab.client.list(
            Pod, namespace="default", labels={"app": name}) if p.metadata is not None}
        if not names & old:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"old pods of {name} still there after {timeout:g}s")


@pytest.mark.skipif(shutil.which("kubectl") is None and not KUBECTL.exists(),
                    reason="kubectl not installed")
async def test_rollout_restart_race_loses_requests_only_without_a_drain_delay(
        tmp_path: Path) -> None:
    cases = {
        "plain": workload("plain", UVICORN, ready_path="/health"),
        "prestop": workload("prestop", UVICORN, ready_path="/health",
                            prestop={"sleep": {"seconds": int(DRAIN_DELAY)}}),
        "serve": workload("serve", SERVE, ready_path="/readyz", ready_port="drainsafe-admin"),
    }
    started: set[int] = set()
    async with Lab(tmp_path / "lab", nodes=2, propagation_seconds=PROPAGATION,
                   ingress=False) as lab:
        try:
            assert lab.client is not None
            for name, manifest in cases.items():
                await lab.apply(manifest, service(name))
            for name in cases:
                await lab.wait_available("default", name, timeout=60)
                await lab.wait_backends("default", name, 2, timeout=30)
            started.update(lab.pids())
            old = {name: {p.metadata.name async for p in lab.client.list(
                Pod, namespace="default", labels={"app": name}) if p.metadata is not None}
                for name in cases}

            tallies = {name: Tally() for name in cases}
            stop = asyncio.Event()
            loaders = [asyncio.ensure_future(load(lab.service_url("default", name),
                                                  tallies[name], stop))
                       for name in cases]
            await asyncio.sleep(0.5)
            await kubectl(lab, "rollout", "restart", "deployment/plain", "deployment/prestop",
                          "deployment/serve")
            try:
                await asyncio.gather(*(settled(lab, name, old[name]) for name in cases))
                started.update(lab.pids())
                await asyncio.sleep(PROPAGATION + 0.5)  # the last endpoint change lands
            finally:
                stop.set()
                await asyncio.gather(*loaders)
        finally:
            started.update(lab.pids())

    assert lab.net is not None
    report = {"lost": {name: (t.ok, t.failed, t.errors) for name, t in tallies.items()},
              "l4": lab.net.l4.stats}
    for t in tallies.values():
        assert t.ok > 50, report  # traffic really flowed during the restart
    # The race: no drain delay and a 1 s propagation delay loses requests...
    assert tallies["plain"].failed > 0, report
    # ...and they are exactly the connections the proxy found refused (no retry), or that
    # the closing server accepted and closed without an answer.
    l4 = lab.net.l4
    assert tallies["plain"].failed == l4.stats.backend_refused + len(l4.empty_replies), report
    # ...a preStop sleep longer than the propagation delay, or drainsafe serve, loses none.
    assert tallies["prestop"].failed == 0, report
    assert tallies["serve"].failed == 0, report
    assert pids_alive(started) == []
