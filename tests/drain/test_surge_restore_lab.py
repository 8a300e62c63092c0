"""Done after a surge means its restore is carried out, not only written.

The drain lowers a Deployment's scale right after each accepted eviction. Until the
deployment controller has seen that (its ReplicaSet still at the surged count), the
ReplicaSet replaces the evicted pod: a Pending surplus pod the restore removes once it is
seen. Here the controller manager lags behind the whole drain (its Deployment and
ReplicaSet controllers held, as kube-controller-manager between leaders): the drain must
not report done while the restore is unseen, and when it does report done that surplus pod
was made and removed.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from drainsafe.drain.execute import DrainSettings, NodeDrainer
from drainsafe.drain.report import NodeReport
from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.lab.cluster import virtual_deployment

from .labkit import gpu_lab, pods_of

WORKLOAD = "Deployment/default/llm"


async def said(drain: asyncio.Task[NodeReport], event: asyncio.Event) -> None:
    """Until the drain says it or ends first (the caller's assertion tells which)."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({drain, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


async def test_done_waits_for_the_controllers_to_carry_out_the_restore(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=2, gpus=1) as lab, \
            KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        plane = lab.control_plane
        assert plane is not None
        await lab.apply(virtual_deployment("llm", replicas=1, gpus=1, grace=2))
        await lab.wait_available("default", "llm", timeout=60)
        [old] = await pods_of(client, "llm")
        node = old["spec"]["nodeName"]
        made: set[str] = set()
        surplus = asyncio.Event()

        def seen(_kind: str, pod: dict[str, Any]) -> None:
            made.add(pod["metadata"]["name"])
            if len(made) == 3:  # the old pod, its stand-in, and the surplus
                surplus.set()

        stand_in_up, restore_waited = asyncio.Event(), asyncio.Event()
        # Released in the test's order, and whatever happens at the end of the test.
        deployments, replicasets = contextlib.ExitStack(), contextlib.ExitStack()

        def progress(message: str) -> None:
            if message.startswith(f"{WORKLOAD}: 1 pods Available off"):
                # The stand-in serves; before the eviction the controller manager stops.
                deployments.enter_context(plane.holding("deployment"))
                replicasets.enter_context(plane.holding("replicaset"))
                stand_in_up.set()
            if "to carry out" in message:
                restore_waited.set()

        async with Informer(client, api_path("v1", "pods", namespace="default"),
                            label_selector="app=llm", on_event=seen):
            with deployments, replicasets:
                drain = asyncio.create_task(NodeDrainer(
                    client, node, DrainSettings(timeout=60), on_progress=progress).run())
                await said(drain, stand_in_up)
                assert stand_in_up.is_set(), drain.result().failure
                # The old pod goes (its kubelet is no controller); the drain lowers the scale,
                # which nobody sees yet: it must wait for that, not report done.
                await said(drain, restore_waited)
                assert not drain.done(), drain.result()
                # The ReplicaSet controller catches up first, still at the surged count: it
                # replaces the evicted pod. Then the deployment controller: the restore.
                replicasets.close()
                await said(drain, surplus)
                assert surplus.is_set() and not drain.done(), made
                deployments.close()
                report = await drain
                assert report.ok, report.failure
                [moved] = await pods_of(client, "llm")
        assert moved["spec"]["nodeName"] != node
        assert report.done_checks.get("surged workloads' scale carried out")
        # The ReplicaSet, caught up while still at 2, replaced the evicted pod; the
        # restore then removed that Pending pod, before the drain reported done.
        assert len(made) == 3 and old["metadata"]["name"] in made, made
