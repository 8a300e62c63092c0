"""Run 4's set-up: the drainsafe controller installed on the lab as a user installs it,
`kubectl apply -k deploy/controller` with the real kubectl, and the demo's namespace opted in
(label `drainsafe.io/guard=true`), so a plain `kubectl drain` is held until a stand-in is
Ready. The lab runs the controller's pods as local processes that start `drainsafe` from
PATH (the stand-in for the image), so this interpreter's bin directory goes first."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "controller"
NAMESPACE = "drainsafe-system"
NAME = "drainsafe-controller"
WEBHOOK = "drainsafe-guard"
GUARD_LABEL = "drainsafe.io/guard"


def missing() -> str:
    """Why run 4 cannot run in this build ("" : it can)."""
    if importlib.util.find_spec("drainsafe.controller") is None:
        return "the drainsafe controller is not in this build (issue 14)"
    if not (DEPLOY / "kustomization.yaml").exists():
        return f"{DEPLOY} is missing (run the demo from a clone of the repository)"
    return ""


def lab_path() -> str:
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def overlay(directory: Path, *, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
            node_selector: Mapping[str, str] | None = None,
            tolerations: Sequence[Mapping[str, str]] = ()) -> Path:
    """A kustomization over DEPLOY that extends the controller's args and env and says where
    its pods run (a nodeSelector, tolerations), as a user's overlay would."""
    container = "/spec/template/spec/containers/0"
    ops: list[dict[str, Any]] = [{"op": "add", "path": f"{container}/args/-", "value": a}
                                 for a in args]
    ops += [{"op": "add", "path": f"{container}/env/-", "value": {"name": k, "value": v}}
            for k, v in (env or {}).items()]
    if node_selector:
        ops.append({"op": "add", "path": "/spec/template/spec/nodeSelector",
                    "value": dict(node_selector)})
    if tolerations:
        ops.append({"op": "add", "path": "/spec/template/spec/tolerations",
                    "value": [dict(t) for t in tolerations]})
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(json.dumps({
        "resources": [os.path.relpath(DEPLOY, directory)],
        "patches": [{"target": {"kind": "Deployment", "name": NAME},
                     "patch": json.dumps(ops)}]}))
    return directory


def system_nodes_overlay(directory: Path) -> Path:
    """The controller pinned to the lab's system nodes (nodeSelector and toleration), as an
    operator keeps it off the nodes it drains."""
    from drainsafe.lab.cluster import SYSTEM_NODE_SELECTOR, SYSTEM_TOLERATION

    return overlay(directory, node_selector=SYSTEM_NODE_SELECTOR,
                   tolerations=[SYSTEM_TOLERATION])


async def install(lab: Any, kubectl: str, namespace: str, *, timeout: float = 120,
                  system_nodes: bool = False) -> list[dict[str, Any]]:
    """Install the controller (on the lab's system nodes if `system_nodes`); returns the
    manifests that opt the demo's namespace in."""
    from drainsafe.kube import KubeClient, api_path

    source = system_nodes_overlay(lab.state_dir / "controller") if system_nodes else DEPLOY
    proc = await asyncio.create_subprocess_exec(
        kubectl, f"--kubeconfig={lab.kubeconfig}", "apply", "-k", str(source),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    async with asyncio.timeout(timeout):
        out, _ = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"kubectl apply -k {DEPLOY} failed: {out.decode()[-500:]}")
    await lab.wait_available(NAMESPACE, NAME, timeout=timeout)
    # The controller writes its CA into the webhook configuration once it serves.
    path = api_path("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations",
                    name=WEBHOOK)
    deadline = time.monotonic() + timeout
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        while True:
            hooks = (await client.get(path)).get("webhooks") or [{}]
            if (hooks[0].get("clientConfig") or {}).get("caBundle"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{WEBHOOK}: no caBundle after {timeout:g} s")
            await asyncio.sleep(0.2)
    return [{"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": namespace, "labels": {GUARD_LABEL: "true"}}}]
