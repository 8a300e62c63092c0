"""--surge: no room for a replacement -> placeholder pods wait for capacity, then the drain."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from drainsafe.drain.execute import DrainSettings, NodeDrainer
from drainsafe.drain.surge import NODE_LABEL, placeholder_manifest
from drainsafe.kube import KubeClient, api_path
from drainsafe.lab.cluster import virtual_deployment

from .factory import pod
from .labkit import get_node, gpu_lab, pods_of

SURGE = DrainSettings(timeout=60, surge=True, surge_timeout=30)


def test_placeholder_asks_for_the_same_and_stays_off_drained_nodes() -> None:
    p = pod("llm-0", "g1", gpus=2, node_selector={"pool": "h100"},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    m = placeholder_manifest(p, "g1", ["g1", "g2"], priority_class="overprovisioning")
    spec = m["spec"]
    assert spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert spec["nodeSelector"] == {"pool": "h100"}
    assert spec["tolerations"] == p["spec"]["tolerations"]
    assert spec["priorityClassName"] == "overprovisioning"
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert {"key": "kubernetes.io/hostname", "operator": "NotIn",
            "values": ["g1", "g2"]} in term["matchExpressions"]
    assert {"key": "zone", "operator": "In", "values": ["a"]} in term["matchExpressions"]
    assert p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][-1]["key"] == "zone"  # input untouched
    assert m["metadata"]["labels"][NODE_LABEL] == "g1"


async def test_surge_waits_for_room_then_drains(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=2, gpus=1) as lab:
        await lab.apply(virtual_deployment("llm", replicas=1, gpus=1, grace=2),
                        virtual_deployment("hog", replicas=1, gpus=1, grace=1))
        await lab.wait_available("default", "llm", timeout=60)
        await lab.wait_available("default", "hog", timeout=60)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            node = (await pods_of(client, "llm"))[0]["spec"]["nodeName"]
            other = (await pods_of(client, "hog"))[0]["spec"]["nodeName"]

            # Without room and with a short wait: refused before cordoning, nothing left.
            short = await NodeDrainer(client, node, replace(SURGE, surge_timeout=1.5)).run()
            assert short.refused and "--surge: no room appeared" in short.failure
            assert not (await get_node(client, node))["spec"].get("unschedulable")

            async def capacity_arrives() -> None:
                await asyncio.sleep(1.0)  # as if an autoscaler had added a node
                await client.patch(api_path("apps/v1", "deployments", namespace="default",
                                            name="hog"), {"spec": {"replicas": 0}})

            report, _ = await asyncio.gather(NodeDrainer(client, node, SURGE).run(),
                                             capacity_arrives())
            assert report.ok, report.failure
            assert report.surge_nodes == [other]
            [moved] = await pods_of(client, "llm")
            assert moved["spec"]["nodeName"] == other
            left, _ = await client.list(api_path("v1", "pods"),
                                        {"labelSelector": NODE_LABEL})
            assert left == []
