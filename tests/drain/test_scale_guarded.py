"""A scale change is written only while the workload carries the record it was decided from.

The eviction guard decides from its informer cache; a moment behind a restore and another
drainer's record, it once scaled a Deployment to 4 (two surges at once) in the test of
drainsafe drain and kubectl drain at once. scale.set_scale and scale.finish now check the
record on the object they write, with its resourceVersion."""

from __future__ import annotations

from pathlib import Path

import pytest

from drainsafe.drain import scale
from drainsafe.drain.ownership import SurgeRecord
from drainsafe.kube import KubeClient, api_path
from drainsafe.lab.cluster import virtual_deployment

from .labkit import gpu_lab

LLM = "Deployment/default/llm"
PATH = api_path("apps/v1", "deployments", namespace="default", name="llm")


async def test_a_stale_record_scales_nothing_and_clears_nothing(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=2, gpus=1) as lab:
        await lab.apply(virtual_deployment("llm", replicas=1, gpus=1, grace=1))
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            guards = await scale.begin(client, LLM, node="n-a", autoscaler=None, pods={},
                                       guard=True, clock=lambda: 1.0)
            await scale.set_scale(client, LLM, guards, 2)
            await scale.finish(client, LLM, guards)  # restored and removed
            drains = await scale.begin(client, LLM, node="n-b", autoscaler=None, pods={},
                                       clock=lambda: 2.0)
            await scale.set_scale(client, LLM, drains, 2)
            # The guard, from a copy that still shows its own record: nothing changes.
            with pytest.raises(scale.NotOurSurge):
                await scale.set_scale(client, LLM, guards, 3)
            with pytest.raises(scale.NotOurSurge):
                await scale.finish(client, LLM, guards)
            obj = await client.get(PATH)
            assert obj["spec"]["replicas"] == 2
            current = SurgeRecord.of(obj)
            assert current is not None and scale.same_surge(current, drains)
            await scale.finish(client, LLM, drains)
            obj = await client.get(PATH)
            assert obj["spec"]["replicas"] == 1 and SurgeRecord.of(obj) is None
