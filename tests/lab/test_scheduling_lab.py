"""The lab scheduler scores as kube-scheduler's default profile does (placement.score): a
PreferNoSchedule taint (here a NodeMaintenance's pending taint) steers a stand-in to
another node that fits, and is no obstacle when the tainted node is the only feasible
one, which the scheduler then binds without scoring. Real control plane and kubelets,
virtual pods, each asking a node's only GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import wait_until
from drainsafe.kube.objects import is_ready
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab, virtual_deployment
from drainsafe.maintenance.pending import PENDING_TAINT

PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
DEPLOYMENTS = BY_KEY["apps/deployments"]


async def test_a_prefer_no_schedule_taint_steers_a_stand_in_unless_no_other_node_fits(
        tmp_path: Path) -> None:
    async with Lab(tmp_path / "lab", nodes=3, gpus_per_node=1, propagation_seconds=0,
                   ingress=False) as lab:
        cp = lab.control_plane
        store = cp.store

        def placed() -> dict[str, str]:
            return {p["metadata"]["name"]: p["spec"].get("nodeName") or ""
                    for p in store.items(PODS, "default")}

        def scale(replicas: int) -> None:
            dep: dict[str, Any] = store.get(DEPLOYMENTS, "default", "llm")
            dep["spec"]["replicas"] = replicas
            store.update(DEPLOYMENTS, dep)

        def ready(count: int) -> bool:
            pods = list(store.items(PODS, "default"))
            return len(pods) == count and all(is_ready(p) for p in pods)

        await lab.apply(virtual_deployment("llm", replicas=1, gpus=1))
        await wait_until(cp, lambda: ready(1), what="the first replica Ready")
        [first] = placed().values()
        # The node a tie would go to (the lab breaks ties by name) is the one tainted.
        tainted, other = sorted(n for n in ("node-0", "node-1", "node-2") if n != first)
        node = store.get(NODES, "", tainted)
        node["spec"]["taints"] = [{"key": PENDING_TAINT, "value": "roll",
                                   "effect": "PreferNoSchedule"}]
        store.update(NODES, node)

        scale(2)  # a stand-in, as a drain's surge makes one
        await wait_until(cp, lambda: ready(2), what="the stand-in Ready")
        assert sorted(placed().values()) == sorted([first, other])

        scale(3)  # the tainted node is the only one with a free GPU
        await wait_until(cp, lambda: ready(3), what="the third replica Ready")
        assert sorted(placed().values()) == sorted([first, other, tainted])
