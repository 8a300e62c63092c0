"""drainsafe drain against the lab: real API server, scheduler, controllers, kubelets."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from drainsafe.drain import ownership
from drainsafe.drain.cordon import NotOwned, audit, uncordon
from drainsafe.drain.execute import DrainSettings, NodeDrainer
from drainsafe.drain.plan import DrainOptions
from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.lab.cluster import virtual_deployment
from drainsafe.lab.controllers.ranking import POD_DELETION_COST

from .labkit import gated_deployment, get_node, gpu_lab, node_of, pdb, pods_of, service


async def test_drain_gpu_node_replacement_first(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path) as lab:
        await lab.apply(virtual_deployment("llm", replicas=2, gpus=1, grace=5,
                                           startup_seconds=0.5),
                        pdb("llm", "llm", maxUnavailable=1), service("llm"))
        await lab.wait_available("default", "llm", timeout=60)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            node = await node_of(client, "llm")
            before = {p["metadata"]["uid"] for p in await pods_of(client, "llm")
                      if p["spec"]["nodeName"] == node}
            report = await NodeDrainer(client, node, DrainSettings(timeout=120)).run()
            assert report.ok, report.failure
            after = await pods_of(client, "llm")
            assert all(p["spec"]["nodeName"] != node for p in after)
            assert not before & {p["metadata"]["uid"] for p in after}
            moved = [p for p in report.pods if p.outcome == "evicted"]
            assert len(moved) == len(before)
            for p in moved:
                # Make before break: the replacement was Available before the eviction.
                assert p.strategy == "surge"
                assert p.evicted_at and p.terminated_at and p.replacement_ready_at
                assert p.replacement_ready_at <= p.evicted_at <= p.terminated_at
                assert p.replacement_node not in (None, node)
            dep = await client.get("/apis/apps/v1/namespaces/default/deployments/llm")
            assert dep["spec"]["replicas"] == 2
            assert ownership.SURGE not in (dep["metadata"].get("annotations") or {})
            n = await get_node(client, node)
            assert n["spec"]["unschedulable"] is True
            assert ownership.owned_by_drainsafe(n)
            assert ownership.Progress.of(n).state == "drained"
            [rec] = await audit(client)
            assert rec.node == node and rec.owner.endswith(")") and not rec.takes_work
            result = await uncordon(client, node)
            assert result.changed
            n = await get_node(client, node)
            assert not n["spec"].get("unschedulable")
            assert ownership.CORDONED_BY not in ownership.node_annotations(n)


async def test_refusals_before_cordoning(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=2) as lab:
        await lab.apply(virtual_deployment("a", replicas=2, gpus=1, grace=1),
                        pdb("a", "a", minAvailable=2))
        await lab.wait_available("default", "a", timeout=60)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            node = await node_of(client, "a")
            # The other node's only GPU is taken. Surge-first is not wedged by
            # minAvailable == replicas (with the surge Ready it allows one); evict-first is.
            report = await NodeDrainer(client, node, DrainSettings()).run()
            assert report.refused and not report.ok
            kinds = sorted(b.kind for b in report.plan.blockers)  # type: ignore[union-attr]
            assert kinds == ["no-room"]
            evict = DrainSettings(options=DrainOptions(strategy="evict"))
            report = await NodeDrainer(client, node, evict).run()
            assert report.refused and not report.ok
            kinds = sorted(b.kind for b in report.plan.blockers)  # type: ignore[union-attr]
            assert kinds == ["no-room", "wedged-budget"]
            assert "PodDisruptionBudget default/a" in report.failure
            n = await get_node(client, node)
            assert not n["spec"].get("unschedulable")
            assert ownership.PROGRESS not in ownership.node_annotations(n)


async def test_uncordon_refuses_a_cordon_it_does_not_own(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=1, gpus=0) as lab, KubeClient.from_kubeconfig(
            str(lab.kubeconfig)) as client:
        await client.patch("/api/v1/nodes/node-0", {"spec": {"unschedulable": True}},
                           "strategic")
        with pytest.raises(NotOwned, match="--force"):
            await uncordon(client, "node-0")
        [rec] = await audit(client)
        assert rec.owner.startswith("unknown")
        assert (await uncordon(client, "node-0", force=True)).changed


async def test_a_deployment_mid_rollout_stands_down_to_evict_first(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=0) as lab:
        await lab.apply(virtual_deployment("web", replicas=2, startup_seconds=0.3))
        await lab.wait_available("default", "web", timeout=60)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            node = await node_of(client, "web")
            steady = await NodeDrainer(client, node, DrainSettings()).run(dry_run=True)
            assert steady.plan is not None
            [w] = steady.plan.workload_plans
            assert w.strategy == "surge"
            # A rollout whose new pods take a minute to start: two ReplicaSets with replicas.
            await client.patch(
                "/apis/apps/v1/namespaces/default/deployments/web",
                {"spec": {"template": {"metadata": {"annotations": {
                    "lab.drainsafe.io/startup-seconds": "60"}}}}})
            report = None
            for _ in range(100):
                report = await NodeDrainer(client, node, DrainSettings()).run(dry_run=True)
                assert report.plan is not None
                [w] = report.plan.workload_plans
                if w.strategy == "evict":
                    break
                await asyncio.sleep(0.1)
            assert report is not None and report.plan is not None
            [w] = report.plan.workload_plans
            assert w.strategy == "evict" and w.why.startswith("mid-rollout"), w
            assert w.floor == 1 and w.surge == 0
            assert not (await get_node(client, node))["spec"].get("unschedulable")


async def test_uncordon_gives_a_surge_up_and_restores_the_recorded_scale(tmp_path: Path) -> None:
    from drainsafe.drain import scale

    async with gpu_lab(tmp_path, nodes=2, gpus=0) as lab:
        await lab.apply(virtual_deployment("web", replicas=2, startup_seconds=0.3))
        await lab.wait_available("default", "web", timeout=60)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            drained = await node_of(client, "web")
            stopped = "node-1" if drained == "node-0" else "node-0"
            # What a drain of `stopped` left behind after its scale-up.
            record = await scale.begin(client, "Deployment/default/web", node=stopped,
                                       autoscaler=None, pods={})
            await scale.set_scale(client, "Deployment/default/web", record, 3)
            [left] = await scale.audit_surged(client)
            assert (left.replicas_now, left.replicas_before, left.node) == (3, 2, stopped)
            # A drain of another node refuses to surge it meanwhile.
            other = await NodeDrainer(client, drained, DrainSettings()).run(dry_run=True)
            assert other.plan is not None
            assert "surge-owned" in [b.kind for b in other.plan.blockers]
            result = await uncordon(client, stopped)
            assert result.changed and "restored the scale of Deployment/default/web" in (
                result.message)
            dep = await client.get("/apis/apps/v1/namespaces/default/deployments/web")
            assert dep["spec"]["replicas"] == 2
            assert ownership.SURGE not in (dep["metadata"].get("annotations") or {})
            assert await scale.audit_surged(client) == []


async def test_a_drain_waits_for_the_guards_surge_and_never_surges_on_top(
        tmp_path: Path) -> None:
    """The eviction guard (drainsafe controller) surged the workload for a kubectl drain of
    another node: the drain is not refused, does not surge on top (one stand-in at a time),
    waits for the guard's restore, then makes before break as usual."""
    from drainsafe.drain import scale

    workload = "Deployment/default/web"
    async with gpu_lab(tmp_path, nodes=3, gpus=0) as lab:
        await lab.apply(virtual_deployment("web", replicas=2, startup_seconds=0.3))
        await lab.wait_available("default", "web", timeout=60)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            drained = await node_of(client, "web")
            elsewhere = next(n for n in ("node-0", "node-1", "node-2") if n != drained)
            guard = await scale.begin(client, workload, node=elsewhere, autoscaler=None,
                                      pods={}, guard=True)
            await scale.set_scale(client, workload, guard, 3)
            # Not an unfinished drain: no refusal, and uncordon never gives it up.
            planned = await NodeDrainer(client, drained, DrainSettings()).run(dry_run=True)
            assert planned.ok and planned.plan is not None, planned.failure
            assert await scale.restore_all_for_node(client, elsewhere) == []

            waiting = asyncio.Event()
            said: list[str] = []

            def progress(message: str) -> None:
                said.append(message)
                if "surged by the eviction guard" in message:
                    waiting.set()

            scales: list[int] = []
            drain = asyncio.create_task(NodeDrainer(
                client, drained, DrainSettings(timeout=120), on_progress=progress).run())
            async with asyncio.timeout(60):
                await waiting.wait()
            for _ in range(10):  # the drain holds off while the guard's surge stands
                dep = await client.get("/apis/apps/v1/namespaces/default/deployments/web")
                scales.append(dep["spec"]["replicas"])
                assert ownership.SurgeRecord.of(dep) == guard
                await asyncio.sleep(0.1)
            assert not drain.done()
            await scale.finish(client, workload, guard)  # the guard's restore
            report = await drain
            assert report.ok, (report.failure, said)
            assert report.scaled[workload] == "replicas 2 -> 3"
            dep = await client.get("/apis/apps/v1/namespaces/default/deployments/web")
            assert dep["spec"]["replicas"] == 2 and ownership.SurgeRecord.of(dep) is None
            assert set(scales) == {3}, scales


async def test_no_room_while_the_guard_surges_waits_for_its_restore(tmp_path: Path) -> None:
    """The guard's stand-in holds the only free GPU: rather than refusing for room (and
    advising a new node), the drain waits for the guard's restore and for its scale-down
    (the pod it removes holds its GPU until it exits), plans again and drains. A restore
    that does not come within --timeout is named in the refusal."""
    from drainsafe.drain import scale

    workload = "Deployment/default/llm"
    gate = tmp_path / "exit"  # the pods exit after SIGTERM once it exists
    async with gpu_lab(tmp_path, nodes=3, gpus=1) as lab:
        await lab.apply(gated_deployment("llm", replicas=2, gpus=1, gate=gate))
        await lab.wait_available("default", "llm", timeout=60)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, Informer(
                client, api_path("v1", "pods", namespace="default"),
                label_selector="app=llm") as pods:
            drained, other = sorted({p["spec"]["nodeName"] for p in await pods_of(client,
                                                                                 "llm")})
            guard = await scale.begin(client, workload, node=other, autoscaler=None,
                                      pods={}, guard=True)
            await scale.set_scale(client, workload, guard, 3)

            def stand_ins(cache: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
                return [p for p in cache.values()
                        if p["spec"].get("nodeName") not in (None, drained, other)]

            # The stand-in holds the third GPU.
            [standin] = await pods.wait_for(stand_ins, timeout=60, what="the stand-in placed")
            # The restore's scale-down removes it: its lowest pod-deletion-cost ranks it first
            # (upstream ActivePodsWithRanks). Without it, three Ready pods whose Ready times
            # share a log2 bucket go in UID order, and when that removes the drained node's
            # own pod there is nothing to wait for.
            await client.patch(api_path("v1", "pods", namespace="default",
                                        name=standin["metadata"]["name"]),
                               {"metadata": {"annotations": {POD_DELETION_COST: "-1"}}})
            # No restore within --timeout: refused before the cordon, naming the wait.
            refused = await NodeDrainer(client, drained, DrainSettings(timeout=1)).run()
            assert refused.refused and refused.failure.startswith(
                f"the eviction guard has not restored {workload} within --timeout 1s; "
            ), refused.failure
            assert not (await get_node(client, drained))["spec"].get("unschedulable")
            restore_waited, scale_down_waited = asyncio.Event(), asyncio.Event()
            said: list[str] = []

            def progress(message: str) -> None:
                said.append(message)
                if "waiting for its restore" in message:
                    restore_waited.set()
                if message.startswith(f"waiting for the restore's scale-down of {workload}"):
                    scale_down_waited.set()

            drain = asyncio.create_task(NodeDrainer(
                client, drained, DrainSettings(timeout=120), on_progress=progress).run())
            async with asyncio.timeout(60):
                await restore_waited.wait()
            assert not drain.done()
            assert not (await get_node(client, drained))["spec"].get("unschedulable"), said
            # The guard's restore, its scale-down under way before its record goes (as
            # when the ReplicaSet controller acts between the restore's two writes): the
            # removed stand-in, no longer active, holds its GPU until the gate opens.
            await scale.set_scale(client, workload, guard, 2)
            [removed] = await pods.wait_for(
                lambda cache: [p for p in cache.values()
                               if p["metadata"].get("deletionTimestamp")],
                timeout=60, what="the restore's scale-down begun")
            assert removed["metadata"]["uid"] == standin["metadata"]["uid"]
            await scale.finish(client, workload, guard)
            async with asyncio.timeout(60):
                await scale_down_waited.wait()
            assert not drain.done()
            gate.touch()
            report = await drain
            assert report.ok, report.failure
            assert all(p["spec"]["nodeName"] != drained for p in await pods_of(client, "llm"))


async def test_no_surge_on_top_of_a_guard_restore_that_does_not_come(tmp_path: Path) -> None:
    """As above, the guard's stand-in holds the only free GPU, and its restore never comes:
    with --surge, the drain is refused before the cordon, naming the restore, without a
    placeholder (none could be placed here, so a surge would fail on its own timeout and
    the refusal would read only "--surge: ...")."""
    from drainsafe.drain import scale

    workload = "Deployment/default/llm"
    async with gpu_lab(tmp_path, nodes=3, gpus=1) as lab:
        await lab.apply(virtual_deployment("llm", replicas=2, gpus=1, grace=2,
                                           startup_seconds=0.3))
        await lab.wait_available("default", "llm", timeout=60)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            drained, other = sorted({p["spec"]["nodeName"] for p in await pods_of(client,
                                                                                 "llm")})
            guard = await scale.begin(client, workload, node=other, autoscaler=None,
                                      pods={}, guard=True)
            await scale.set_scale(client, workload, guard, 3)
            async with asyncio.timeout(60):  # the stand-in holds the third GPU
                while len({p["spec"].get("nodeName") for p in await pods_of(client, "llm")}
                          - {None}) < 3:
                    await asyncio.sleep(0.1)
            said: list[str] = []
            refused = await NodeDrainer(
                client, drained, DrainSettings(timeout=1, surge=True, surge_timeout=30),
                on_progress=said.append).run()
            assert refused.refused and refused.failure.startswith(
                f"the eviction guard has not restored {workload} within --timeout 1s; "
                "no --surge on top of a restore not seen to finish; Pod default/llm-"
            ), refused.failure
            assert not any("surging" in m for m in said), said
            # Nothing changed: the node neither cordoned nor recorded, the guard's surge
            # as the guard left it.
            node = await get_node(client, drained)
            assert not node["spec"].get("unschedulable")
            assert ownership.PROGRESS not in ownership.node_annotations(node)
            dep = await client.get("/apis/apps/v1/namespaces/default/deployments/llm")
            assert dep["spec"]["replicas"] == 3 and ownership.SurgeRecord.of(dep) == guard
