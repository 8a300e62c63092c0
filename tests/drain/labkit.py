"""Helpers for drain tests against the lab (real API server, controllers, kubelets)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from drainsafe.kube import KubeClient, api_path
from drainsafe.lab.cluster import Lab, pids_alive


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
