"""Fleet: several nodes planned as one, cordoned first, drained in order, stopping at the
first failure and giving back the cordons of nodes it never started."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from drainsafe.drain import ownership
from drainsafe.drain.execute import DrainSettings
from drainsafe.drain.fleet import drain_fleet
from drainsafe.kube import KubeClient, api_path
from drainsafe.lab.cluster import virtual_deployment

from .labkit import get_node, gpu_lab, pods_of


async def cordon(client: KubeClient, node: str, value: bool | None) -> None:
    await client.patch(api_path("v1", "nodes", name=node), {"spec": {"unschedulable": value}})


async def test_fleet_in_sequence_and_stop_at_first_failure(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=4, gpus=0) as lab, KubeClient.from_kubeconfig(
            str(lab.kubeconfig)) as client:
        await lab.apply(virtual_deployment("web", replicas=2, startup_seconds=0.3))
        await lab.wait_available("default", "web", timeout=60)
        web_nodes = sorted({p["spec"]["nodeName"] for p in await pods_of(client, "web")})
        assert len(web_nodes) == 2

        # Together: both nodes drained, the pods now outside the fleet.
        fleet = await drain_fleet(client, web_nodes, DrainSettings(timeout=60))
        reports = fleet.reports
        assert fleet.ok and fleet.not_started == []
        assert [r.ok for r in reports] == [True, True], [r.failure for r in reports]
        assert all(p["spec"]["nodeName"] not in web_nodes for p in await pods_of(client, "web"))
        for name in web_nodes:
            n = await get_node(client, name)
            assert ownership.Progress.of(n).state == "drained"

        # A node whose pod never gets Ready fails (bounded), the next is never started
        # and its queued cordon is given back.
        free = sorted({f"node-{i}" for i in range(4)} - set(web_nodes))
        await cordon(client, free[1], True)  # so that "slow" lands on free[0]
        await lab.apply(virtual_deployment("slow", replicas=1, startup_seconds=3600))
        deadline = time.monotonic() + 30
        while not [p for p in await pods_of(client, "slow") if p["spec"].get("nodeName")]:
            assert time.monotonic() < deadline, "slow pod never scheduled"
            await asyncio.sleep(0.1)
        [slow_pod] = await pods_of(client, "slow")
        assert slow_pod["spec"]["nodeName"] == free[0]
        for name in [*web_nodes, free[1]]:
            await cordon(client, name, None)
        fleet = await drain_fleet(client, [free[0], free[1]], DrainSettings(timeout=3))
        reports = fleet.reports
        assert not fleet.ok and fleet.not_started == [free[1]]
        assert len(reports) == 1 and not reports[0].ok
        assert "slow" in reports[0].failure
        first = await get_node(client, free[0])
        assert first["spec"]["unschedulable"] and ownership.Progress.of(first).state == "failed"
        second = await get_node(client, free[1])
        assert not second["spec"].get("unschedulable")
        assert ownership.PROGRESS not in ownership.node_annotations(second)


async def test_fleet_refused_as_one_before_any_cordon(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=1) as lab, KubeClient.from_kubeconfig(
            str(lab.kubeconfig)) as client:
        await lab.apply(virtual_deployment("llm", replicas=2, gpus=1))
        await lab.wait_available("default", "llm", timeout=60)
        nodes = sorted(p["spec"]["nodeName"] for p in await pods_of(client, "llm"))
        # Each node alone would fit its replacement on the free GPU; both together do not.
        fleet = await drain_fleet(client, nodes, DrainSettings(timeout=30))
        reports = fleet.reports
        assert not fleet.ok and len(fleet.plans) == 1  # one plan for the fleet
        assert all(r.refused for r in reports)
        assert [b.kind for b in reports[0].plan.blockers] == ["no-room"]  # type: ignore[union-attr]
        for name in nodes:
            assert not (await get_node(client, name))["spec"].get("unschedulable")
