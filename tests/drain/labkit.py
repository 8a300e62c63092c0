"""Helpers for drain tests against the lab (real API server, controllers, kubelets)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from drainsafe.kube import KubeClient, api_path
from drainsafe.lab.cluster import Lab, pids_alive, virtual_deployment


@contextlib.asynccontextmanager
async def gpu_lab(tmp: Path, *, nodes: int = 3, gpus: int = 1,
                  propagation: float = 0.2) -> AsyncIterator[Lab]:
    seen: set[int] = set()
    async with Lab(tmp / "lab", nodes=nodes, gpus_per_node=gpus,
                   propagation_seconds=propagation, restart_backoff=0.5) as lab:
        try:
            yield lab
        finally:
            seen.update(lab.pids())
    assert pids_alive(seen) == [], "processes of the lab survived it"


def pdb(name: str, app: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": app}}, **spec}}


def service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"app": name},
                     "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}


async def pods_of(client: KubeClient, app: str) -> list[dict[str, Any]]:
    items, _ = await client.list(api_path("v1", "pods", namespace="default"),
                                 {"labelSelector": f"app={app}"})
    return items


async def node_of(client: KubeClient, app: str) -> str:
    pods = await pods_of(client, app)
    return str(sorted(p["spec"]["nodeName"] for p in pods)[0])


async def get_node(client: KubeClient, name: str) -> dict[str, Any]:
    return await client.get(api_path("v1", "nodes", name=name))


# A server that, once SIGTERMed, exits only when its gate file (argv[1]) exists: it stands
# for one still finishing its work, so a test decides when a terminating pod gives its room
# back instead of racing a fixed exit time.
GATED_SERVER = ("import os, signal, sys, time\n"
                "term = []\n"
                "signal.signal(signal.SIGTERM, lambda *_: term.append(1))\n"
                "while not (term and os.path.exists(sys.argv[1])): time.sleep(0.02)\n")


def gated_deployment(name: str, *, replicas: int, gpus: int, gate: Path) -> dict[str, Any]:
    """virtual_deployment's Deployment with real pods that exit after SIGTERM only once
    `gate` exists (Ready at start; grace 30 s, never reached while the test opens the gate)."""
    dep = virtual_deployment(name, replicas=replicas, gpus=gpus, grace=30)
    template = dep["spec"]["template"]
    template["metadata"]["annotations"] = {}
    template["spec"]["containers"][0]["command"] = [sys.executable, "-c", GATED_SERVER,
                                                    str(gate)]
    return dep
