"""verify's pod watch (drainsafe.kube Informer + LifecycleTracker) against the lab's real API
server and EndpointSlice controller, with the kubelet's part played by this test: it writes
pod status and finishes the deletion, as a kubelet does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient, KubeConfig, codecs
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from drainsafe.kube.client import KubeClient
from drainsafe.lab.controlplane import ControlPlane
from drainsafe.verify.record import LifecycleEvent
from drainsafe.verify.watch import LifecycleWatch

NOW = "2026-12-02T16:00:00Z"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[ControlPlane, Path]]:
    cp = ControlPlane(tmp_path / "state", bookmark_seconds=0.5)
    await cp.start()
    try:
        kubeconfig = tmp_path / "kubeconfig"
        cp.write_kubeconfig(kubeconfig)
        yield cp, kubeconfig
    finally:
        await cp.stop()


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "spec": {"nodeName": "node-0", "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "server", "image": "x",
                                     "ports": [{"name": "http", "containerPort": 8000}]}]}}


def status(ready: bool, *, exited: bool = False) -> dict[str, Any]:
    state: dict[str, Any] = ({"terminated": {"exitCode": 0, "reason": "Completed",
                                             "finishedAt": NOW}} if exited
                             else {"running": {"startedAt": NOW}})
    return {"status": {
        "phase": "Running", "podIP": "127.10.0.5",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                        "lastTransitionTime": NOW}],
        "containerStatuses": [{"name": "server", "ready": ready, "restartCount": 0,
                               "image": "x", "imageID": "", "state": state}]}}


async def wait_for(events: list[LifecycleEvent], kind: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not any(e.kind == kind for e in events):
        assert time.monotonic() < deadline, f"no {kind} event; got {events}"
        await asyncio.sleep(0.02)


async def test_watch_records_a_pods_termination(api: tuple[ControlPlane, Path]) -> None:
    _, kubeconfig = api
    client = AsyncClient(config=KubeConfig.from_file(str(kubeconfig)))
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": "default"},
               "spec": {"selector": {"app": "web"},
                        "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}
    await client.create(codecs.from_dict(service))
    await client.create(codecs.from_dict(pod("web-old")))
    await client.patch(Pod.Status, "web-old", status(True), namespace="default",
                       patch_type=PatchType.MERGE)

    events: list[LifecycleEvent] = []
    async with KubeClient.from_kubeconfig(str(kubeconfig)) as kube:
        watch = LifecycleWatch(kube, "default", "app=web", (time.monotonic(), time.time()),
                               events.append)
        await watch.start()
        try:
            await asyncio.sleep(0.5)  # the slice for the ready pod exists before deletion
            assert events == []  # what the initial list showed is state, not events
            await client.create(codecs.from_dict(pod("web-new")))
            await wait_for(events, "pod_added")
            await client.patch(Pod.Status, "web-new", status(True), namespace="default",
                               patch_type=PatchType.MERGE)
            await wait_for(events, "ready")

            await client.delete(Pod, "web-old", namespace="default", grace_period=30)
            await wait_for(events, "terminating")
            await wait_for(events, "endpoint_not_ready")
            await client.patch(Pod.Status, "web-old", status(False, exited=True),
                               namespace="default", patch_type=PatchType.MERGE)
            await wait_for(events, "exited")
            await client.delete(Pod, "web-old", namespace="default", grace_period=0)
            await wait_for(events, "deleted")
            await wait_for(events, "endpoint_removed")
        finally:
            await watch.stop()
            await client.close()

    old = [(e.kind, e.detail) for e in events if e.pod == "web-old"]
    kinds = [k for k, _ in old]
    assert kinds.index("terminating") < kinds.index("exited") < kinds.index("deleted")
    assert ("terminating", "grace 30s") in old
    assert ("exited", "server exit 0 (Completed)") in old
    terminating = next(e for e in events if e.kind == "terminating")
    # deletionTimestamp is now + 30 s; the event's `at` is when termination started.
    assert terminating.at is not None and abs(terminating.at - terminating.t) < 2.0
    assert [e.kind for e in events if e.pod == "web-new"] == ["pod_added", "ready"]
