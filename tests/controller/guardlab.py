"""Helpers for the controller's lab tests: install with the real kubectl, a guarded workload."""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
from typing import Any

from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab, virtual_deployment

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


async def install(lab: Lab, *extra_args: str) -> None:
    """`kubectl apply -k deploy/controller`, with extra controller args through an overlay;
    returns once the replicas are Available and the CA is in the webhook configuration."""
    source = str(DEPLOY)
    if extra_args:
        overlay = lab.state_dir / "overlay"
        overlay.mkdir()
        ops = "\n".join(f"      - op: add\n        path: /spec/template/spec/containers/0/args/-"
                        f"\n        value: {a}" for a in extra_args)
        (overlay / "kustomization.yaml").write_text(
            f"resources: [{os.path.relpath(DEPLOY, overlay)}]\npatches:\n"
            f"  - target: {{kind: Deployment, name: drainsafe-controller}}\n"
            f"    patch: |\n{ops}\n")
        source = str(overlay)
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
