"""Helpers for the controller's lab tests: install with the real kubectl, a guarded workload."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drainsafe.demo.controller import overlay
from drainsafe.demo.scenario import APP, NAMESPACE, ScenarioSettings
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import SYSTEM_NODE_SELECTOR, SYSTEM_TOLERATION, Lab, virtual_deployment
from drainsafe.verify.load import LoadSpec
from drainsafe.verify.loadproc import run_load_process

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "controller"
KUBECTL_DIR = pathlib.Path("/usr/lib/google-cloud-sdk/bin")
PODS = BY_KEY["pods"]


def lab_path_env() -> str:
    """PATH with this interpreter's bin first: the lab runs `drainsafe` from the host's
    environment (the stand-in for the image's)."""
    return f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


async def kubectl(lab: Lab, version: str, *args: str, timeout: float = 120
                  ) -> tuple[int, str]:
    binary = KUBECTL_DIR / f"kubectl.{version}"
    proc = await asyncio.create_subprocess_exec(
        str(binary), f"--kubeconfig={lab.kubeconfig}",
        f"--cache-dir={lab.state_dir / ('kubectl-cache-' + version)}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    async with asyncio.timeout(timeout):
        out, _ = await proc.communicate()
    return int(proc.returncode or 0), out.decode()


def guarded_deployment(name: str = "llm", *, replicas: int = 2, startup: float = 2.0,
                       gpus: int = 1) -> dict[str, Any]:
    manifest = virtual_deployment(name, replicas=replicas, startup_seconds=startup,
                                  exit_after_sigterm_seconds=1.0, gpus=gpus)
    manifest["spec"]["template"]["metadata"]["labels"]["drainsafe.io/guard"] = "true"
    return manifest


def pdb(name: str = "llm", *, min_available: int = 1) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minAvailable": min_available,
                     "selector": {"matchLabels": {"app": name}}}}


async def audit_clean(lab: Lab) -> dict[str, Any]:
    """`drainsafe audit -o json` exits 0 (no forgotten cordon, nothing left scaled up);
    its JSON."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", "audit", "--kubeconfig", str(lab.kubeconfig),
        "-o", "json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"})
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, (out.decode(), err.decode())
    doc: dict[str, Any] = json.loads(out)
    assert doc["scaled_up"] == [], doc
    return doc


def ready_pods(lab: Lab, app: str, namespace: str = "default") -> list[dict[str, Any]]:
    assert lab.control_plane is not None
    out = []
    for pod in lab.control_plane.store.items(PODS, namespace):
        meta = pod["metadata"]
        if (meta.get("labels") or {}).get("app") != app or meta.get("deletionTimestamp"):
            continue
        if any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or []):
            out.append(pod)
    return out


async def until(predicate: Any, *, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


async def install(lab: Lab, *extra_args: str, env: Mapping[str, str] | None = None,
                  node: str | None = None, system_nodes: bool = False) -> None:
    """The guard by `kubectl apply -k deploy/controller` (its args and env extended, its
    pods kept to `node`, or to the lab's system nodes by nodeSelector and toleration as an
    operator keeps it off the nodes it drains, by an overlay), until it serves with its CA
    in its webhook configuration."""
    selector = {"kubernetes.io/hostname": node} if node is not None else {}
    if system_nodes:
        selector.update(SYSTEM_NODE_SELECTOR)
    source = str(DEPLOY)
    if extra_args or env or selector:
        source = str(overlay(lab.state_dir / "overlay", args=extra_args, env=env,
                             node_selector=selector,
                             tolerations=[SYSTEM_TOLERATION] if system_nodes else ()))
    code, out = await kubectl(lab, "1.33", "apply", "-k", source)
    assert code == 0, out
    await lab.wait_available("drainsafe-system", "drainsafe-controller", timeout=90)
    assert lab.control_plane is not None
    store = lab.control_plane.store
    await until(lambda: bool((store.peek(BY_KEY["admissionregistration.k8s.io/"
                                             "validatingwebhookconfigurations"], "",
                                         "drainsafe-guard") or {})
                             .get("webhooks", [{}])[0].get("clientConfig", {})
                             .get("caBundle")), timeout=30, what="the caBundle")


def controllers_killed(lab: Lab) -> list[str]:
    """Controller pods the kubelets stopped with SIGKILL at the end of their grace period
    (a replica that did not exit after SIGTERM)."""
    assert lab.nodes is not None
    return [w.name for kubelet in lab.nodes.kubelets.values() for w in kubelet.terminated
            if w.namespace == "drainsafe-system" and any(r.killed for r in w.records.values())]


def opt_in_namespace(on: bool) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NAMESPACE, "labels": {"drainsafe.io/guard": "true" if on else "false"}}}


@dataclass
class DrainRun:
    """A kubectl drain under load: its exit code and output, the Ready count every 0.1 s,
    failed requests by cause, ok requests, and when the drain started (loop time)."""

    code: int
    out: str
    samples: list[int] = field(default_factory=list)
    failed: dict[str, int] = field(default_factory=dict)
    ok: int = 0
    started: float = 0.0


async def drain_under_load(lab: Lab, version: str, node: str, settings: ScenarioSettings,
                           *, on_sample: Callable[[float], None] | None = None) -> DrainRun:
    """kubectl drain `node` under streaming load through the Service's ClusterIP path,
    with a new connection per request; `on_sample` is called at each 0.1 s sample."""
    url = lab.service_url(NAMESPACE, APP)
    body = json.dumps({"stream": True, "duration": settings.stream_seconds,
                       "token_interval": 0.05}).encode()
    spec = LoadSpec(url=f"{url}/v1/completions", method="POST", body=body, duration=600,
                    concurrency=settings.concurrency,
                    timeout=settings.stream_seconds * 5 + 10,
                    headers=(("content-type", "application/json"),), keepalive=False)
    samples: list[int] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def sample() -> None:
        while not stop.is_set():
            samples.append(len(ready_pods(lab, APP)))
            if on_sample is not None:
                on_sample(loop.time())
            await asyncio.sleep(0.1)

    sampler = asyncio.ensure_future(sample())
    loader = asyncio.ensure_future(run_load_process(spec, stop=stop,
                                            clock_zero=(loop.time(), time.time())))
    try:
        await asyncio.sleep(settings.warmup)
        started = loop.time()
        code, out = await kubectl(lab, version, "drain", node, "--ignore-daemonsets",
                                  "--delete-emptydir-data", "--timeout=240s", timeout=260)
        await until(lambda: len(ready_pods(lab, APP)) >= 2, timeout=60, what="2 Ready")
        await asyncio.sleep(settings.propagation + 1)
    finally:
        stop.set()
        run = await loader
        await sampler
    result = DrainRun(code, out, samples, started=started)
    for r in run.results:
        if r.outcome.ok:
            result.ok += 1
        else:
            result.failed[r.outcome.label] = result.failed.get(r.outcome.label, 0) + 1
    return result
