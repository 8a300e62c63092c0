"""Acceptance (issue 5): under constant streaming load, `drainsafe drain` of a GPU node loses
nothing and returns only with the service back at full Ready capacity; `kubectl drain` of
the same kind of node, same workload, returns while the replacement is not Ready yet.

Real processes: the lab's API server, scheduler, controllers and kubelets; the streaming
workload under `drainsafe serve` in each pod (drain-aware settings); load through the
ClusterIP path with propagation delay; the real kubectl binary.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from drainsafe.drain.execute import DrainSettings, NodeDrainer
from drainsafe.kube import KubeClient
from drainsafe.verify.load import LoadSpec, run_load

from .labkit import gpu_lab, pdb, pods_of, service

pytestmark = pytest.mark.e2e

KUBECTL = Path("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")
PROPAGATION = 0.5
MODEL_LOAD = 6  # the replacement's readiness waits this long (a model loading)
STREAM_SECONDS = 1.5


def llm(replicas: int = 2) -> dict[str, Any]:
    container = {
        "name": "server", "image": "vllm/vllm-openai",
        "command": [sys.executable, "-m", "drainsafe", "serve",
                    "drainsafe.workload.streaming:app", "--host", "$(POD_IP)", "--port",
                    "8000", "--no-access-log", "--drain-delay", str(PROPAGATION * 3),
                    "--shutdown-timeout", "10"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "DRAINSAFE_GRACE_SECONDS", "value": "20"}],
        "ports": [{"name": "http", "containerPort": 8000}],
        "resources": {"requests": {"cpu": "100m", "nvidia.com/gpu": "1"},
                      "limits": {"nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"},
                           "initialDelaySeconds": MODEL_LOAD, "periodSeconds": 1,
                           "failureThreshold": 1},
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "llm", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "llm"}},
                     "template": {"metadata": {"labels": {"app": "llm"}},
                                  "spec": {"terminationGracePeriodSeconds": 20,
                                           "containers": [container]}}}}


def ready_count(pods: list[dict[str, Any]]) -> int:
    return sum(1 for p in pods if not p["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (p.get("status") or {}).get("conditions") or []))


def streaming_load(url: str) -> LoadSpec:
    body = json.dumps({"stream": True, "duration": STREAM_SECONDS,
                       "token_interval": 0.05}).encode()
    return LoadSpec(url=f"{url}/v1/completions", method="POST", body=body, duration=300,
                    concurrency=4, timeout=30, headers=(("content-type", "application/json"),))


async def kubectl(kubeconfig: Path, *args: str) -> tuple[int, str]:
    binary = str(KUBECTL) if KUBECTL.exists() else "kubectl"
    proc = await asyncio.create_subprocess_exec(
        binary, f"--kubeconfig={kubeconfig}", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode()


@pytest.mark.skipif(shutil.which("kubectl") is None and not KUBECTL.exists(),
                    reason="kubectl not installed")
async def test_drainsafe_loses_nothing_and_kubectl_returns_early(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=1, propagation=PROPAGATION) as lab:
        await lab.apply(llm(), pdb("llm", "llm", maxUnavailable=1), service("llm"))
        await lab.wait_available("default", "llm", timeout=90)
        await lab.wait_backends("default", "llm", 2, timeout=30)
        url = lab.service_url("default", "llm")
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            # --- drainsafe drain under load -------------------------------------------------
            node_a = sorted(p["spec"]["nodeName"] for p in await pods_of(client, "llm"))[0]
            stop = asyncio.Event()
            loader = asyncio.ensure_future(run_load(streaming_load(url), stop=stop))
            try:
                await asyncio.sleep(2)
                report = await NodeDrainer(client, node_a, DrainSettings(timeout=120)).run()
                ready_at_return = ready_count(await pods_of(client, "llm"))
                await asyncio.sleep(PROPAGATION * 2)  # the last endpoint change lands
            finally:
                stop.set()
                run = await loader
            outcomes: dict[str, int] = {}
            for r in run.results:
                outcomes[r.outcome.label] = outcomes.get(r.outcome.label, 0) + 1
            assert report.ok, (report.failure, outcomes)
            assert ready_at_return == 2, "drainsafe returned before full Ready capacity"
            assert outcomes.get("ok", 0) >= 10, outcomes
            assert set(outcomes) == {"ok"}, outcomes  # zero failed, zero truncated streams
            [moved] = [p for p in report.pods if p.outcome == "evicted"]
            assert moved.replacement_ready_at is not None
            assert moved.replacement_ready_at - (moved.evicted_at or 0) >= MODEL_LOAD - 1

            # --- the same with kubectl drain -----------------------------------------------
            await kubectl(lab.kubeconfig, "uncordon", node_a)
            node_b = sorted(p["spec"]["nodeName"] for p in await pods_of(client, "llm"))[0]
            stop = asyncio.Event()
            loader = asyncio.ensure_future(run_load(streaming_load(url), stop=stop))
            try:
                await asyncio.sleep(2)
                t0 = time.monotonic()
                code, out = await kubectl(lab.kubeconfig, "drain", node_b,
                                          "--ignore-daemonsets", "--delete-emptydir-data",
                                          "--timeout=90s")
                kubectl_took = time.monotonic() - t0
                ready_at_kubectl_return = ready_count(await pods_of(client, "llm"))
                await lab.wait_available("default", "llm", timeout=60)
                await asyncio.sleep(PROPAGATION * 2)
            finally:
                stop.set()
                await loader
            assert code == 0, out
            assert "drained" in out
            # kubectl drain reported success while the service was one replica short.
            assert ready_at_kubectl_return < 2, (ready_at_kubectl_return, kubectl_took, out)
