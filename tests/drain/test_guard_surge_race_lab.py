"""drainsafe drain planned while the eviction guard's surge is in flight: the race the guard
acceptance test (tests/controller/test_guard_acceptance.py) met in 1 of 4-6 runs, made
deterministic.

The guard scales a Deployment for another drainer (kubectl drain) under its own surge
record, and later restores it. Until the deployment controller has synced such a scale,
the Deployment's generation is ahead of its observedGeneration (and during a scale-up
fewer replicas are updated than desired). A drain that planned in that window read the
scale as a rollout and stood down to evict-first, so its eviction went through the guard
(which stood in for it under its own record, scaling to 4). Here the lab's deployment
controller is held (drainsafe.lab.controllers: as a kube-controller-manager between
leaders) while the guard's write lands and the drain plans, so the window is open for as
long as the test needs. The guard's writes are the guard's own code (drain.scale with
guard=True; its decision is not what is under test).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from drainsafe.drain import ownership, scale
from drainsafe.drain.execute import DrainSettings, NodeDrainer
from drainsafe.drain.report import NodeReport
from drainsafe.kube import KubeClient
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event
from drainsafe.lab.cluster import Lab, virtual_deployment

from .labkit import gpu_lab, node_of, pods_of

pytestmark = pytest.mark.e2e
WORKLOAD = "Deployment/default/web"
PATH = "/apis/apps/v1/namespaces/default/deployments/web"
DEPLOYMENTS = BY_KEY["apps/deployments"]


@contextmanager
def scales_of(lab: Lab) -> Iterator[list[tuple[int, bool | None]]]:
    """Every change of the Deployment: (spec.replicas, whose surge record: the guard's
    True, a drain's False, none None)."""
    seen: list[tuple[int, bool | None]] = []

    def changed(event: Event) -> None:
        obj = event.obj
        if event.resource == DEPLOYMENTS.key and obj["metadata"]["name"] == "web":
            record = ownership.SurgeRecord.of(obj)
            seen.append((int(obj["spec"]["replicas"]),
                         None if record is None else record.guard))

    assert lab.control_plane is not None
    unlisten = lab.control_plane.store.listen(changed)
    try:
        yield seen
    finally:
        unlisten()


async def until_said(drain: asyncio.Task[NodeReport], said: asyncio.Event) -> None:
    """Until the drain says it (or ends first, which the caller's assertion reports)."""
    waiter = asyncio.ensure_future(said.wait())
    try:
        await asyncio.wait({drain, waiter}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


def outcome(drain: asyncio.Task[NodeReport]) -> object:
    if not drain.done():
        return "still running"
    report = drain.result()
    return (report.failure, report.plan and [w.why for w in report.plan.workload_plans])


def assert_surged_once(report: NodeReport, changes: list[tuple[int, bool | None]]) -> None:
    assert report.ok, report.failure
    assert report.plan is not None
    [w] = report.plan.workload_plans
    assert (w.strategy, w.replicas, w.surge) == ("surge", 2, 1), w.why
    assert report.scaled[WORKLOAD] == "replicas 2 -> 3"
    assert not any(p.guard_holds for p in report.pods)
    # Never a surge on top of a surge: base 2 and one stand-in at a time, whoever's.
    assert max(n for n, _ in changes) == 3, changes
    assert changes[-1] == (2, None), changes


async def test_planned_while_the_guards_scale_up_is_unseen(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=0) as lab, \
            KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        assert lab.control_plane is not None
        await lab.apply(virtual_deployment("web", replicas=2, startup_seconds=0.3))
        await lab.wait_available("default", "web", timeout=60)
        drained = await node_of(client, "web")
        other = next(p["spec"]["nodeName"] for p in await pods_of(client, "web")
                     if p["spec"]["nodeName"] != drained)
        waiting = asyncio.Event()
        said: list[str] = []

        def progress(message: str) -> None:
            said.append(message)
            if "surged by the eviction guard" in message and "waiting for its restore" \
                    in message:
                waiting.set()

        with scales_of(lab) as changes:
            with lab.control_plane.holding("deployment"):
                # The guard's surge for a kubectl drain of the other node, as it writes it.
                guard = await scale.begin(client, WORKLOAD, node=other, autoscaler=None,
                                          pods={}, guard=True)
                await scale.set_scale(client, WORKLOAD, guard, 3)
                dep = await client.get(PATH)
                assert dep["metadata"]["generation"] > dep["status"]["observedGeneration"]
                drain = asyncio.create_task(NodeDrainer(
                    client, drained, DrainSettings(timeout=120), on_progress=progress).run())
                await until_said(drain, waiting)
                assert waiting.is_set(), (outcome(drain), said)
            # The controller catches up (the guard's stand-in starts); the drain still
            # waits for the guard's restore, then surges under its own record.
            await scale.finish(client, WORKLOAD, guard)
            report = await drain
        assert_surged_once(report, changes)
        assert (3, True) in changes


async def test_planned_while_the_guards_restore_is_unseen(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=0) as lab, \
            KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        assert lab.control_plane is not None
        await lab.apply(virtual_deployment("web", replicas=2, startup_seconds=0.3))
        await lab.wait_available("default", "web", timeout=60)
        drained = await node_of(client, "web")
        other = next(p["spec"]["nodeName"] for p in await pods_of(client, "web")
                     if p["spec"]["nodeName"] != drained)
        guard = await scale.begin(client, WORKLOAD, node=other, autoscaler=None, pods={},
                                  guard=True)
        await scale.set_scale(client, WORKLOAD, guard, 3)
        await lab.wait_available("default", "web", timeout=60)
        surged = asyncio.Event()
        said: list[str] = []

        def progress(message: str) -> None:
            said.append(message)
            if message.startswith(f"{WORKLOAD}: surged 2 -> 3"):
                surged.set()

        with scales_of(lab) as changes:
            with lab.control_plane.holding("deployment"):
                await scale.finish(client, WORKLOAD, guard)  # the guard's restore
                dep = await client.get(PATH)
                assert dep["metadata"]["generation"] > dep["status"]["observedGeneration"]
                assert ownership.SurgeRecord.of(dep) is None
                drain = asyncio.create_task(NodeDrainer(
                    client, drained, DrainSettings(timeout=120), on_progress=progress).run())
                await until_said(drain, surged)
                assert surged.is_set(), (outcome(drain), said)
            report = await drain
        assert_surged_once(report, changes)
