"""The NodeMaintenance readout at a graceful stop: a capacity reading below desired taken
right before the stop is in status.lowestCapacity, with its CapacityBelowDesired Event,
once the reconciler's stop sequence returns (readout.stop, then the recorder's flush, as
MaintenanceReconciler.run ends at SIGTERM); an API server that does not answer holds the
stop no longer than its bound.

Against the lab's API server (real HTTP, the CRD of deploy/controller), and a TCP server
that accepts and never answers. The bounded wait is controller.events' (as for Events).
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator

import pytest
import yaml

from drainsafe.controller.events import EventRecorder
from drainsafe.controller.maintenance_readout import MaintenanceReadout
from drainsafe.controller.maintenance_status import StatusWriter
from drainsafe.drain.capacity import CapacityReading
from drainsafe.kube import KubeClient, api_path
from drainsafe.lab.controlplane import ControlPlane

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD = yaml.safe_load((ROOT / "deploy/controller/nodemaintenance-crd.yaml").read_text())
NAME = "driver-upgrade"
LOW = CapacityReading("Deployment/ml/web", ready=1, desired=2)
WALL = 1.8e9


@pytest.fixture
async def api(tmp_path: pathlib.Path) -> AsyncIterator[pathlib.Path]:
    cp = ControlPlane(tmp_path / "state")
    await cp.start()
    try:
        cp.write_kubeconfig(tmp_path / "kubeconfig")
        yield tmp_path / "kubeconfig"
    finally:
        await cp.stop()


async def test_a_low_reading_just_before_a_stop_is_written_with_its_event(
        api: pathlib.Path) -> None:
    path = api_path("drainsafe.io/v1alpha1", "nodemaintenances", name=NAME)
    async with KubeClient.from_kubeconfig(str(api)) as client:
        await client.post(api_path("apiextensions.k8s.io/v1", "customresourcedefinitions"),
                          CRD)
        obj = await client.post(
            api_path("drainsafe.io/v1alpha1", "nodemaintenances"),
            {"apiVersion": "drainsafe.io/v1alpha1", "kind": "NodeMaintenance",
             "metadata": {"name": NAME},
             "spec": {"nodeNames": ["node-1"], "maxParallelNodes": 1}})
        events = EventRecorder(client, instance="leader-1", wall=lambda: WALL)
        readout = MaintenanceReadout(events, clock=lambda: WALL)
        status = StatusWriter(client, readout, lambda: WALL)
        # As a drain's watch reports it (no await), then at once the stop of
        # MaintenanceReconciler.run: the readout's, then the recorder's flush.
        readout.reading(obj, NAME, "node-1", LOW, status.put)
        await readout.stop()
        await events.flush()
        written = await client.get(path)
        listed, _ = await client.list(api_path("v1", "events", namespace="default"))
    low = (written.get("status") or {}).get("lowestCapacity") or {}
    assert (low.get("ready"), low.get("desired"), low.get("node")) == (1, 2, "node-1"), written
    assert [e["message"] for e in listed if e["reason"] == "CapacityBelowDesired"] == [
        "Deployment/ml/web: 1/2 pods Ready (50%) during the drain of node-1"]


async def test_a_stop_waits_for_an_api_server_that_does_not_answer_only_its_bound(
        tmp_path: pathlib.Path) -> None:
    accepted = asyncio.Event()
    held: list[asyncio.StreamWriter] = []

    async def never_answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        accepted.set()

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    try:
        async with KubeClient.from_kubeconfig(str(tmp_path / "kubeconfig")) as client:
            events = EventRecorder(client, instance="leader-1", wall=lambda: WALL)
            readout = MaintenanceReadout(events, clock=lambda: WALL)
            status = StatusWriter(client, readout, lambda: WALL)
            readout.reading(None, NAME, "node-1", LOW, status.put)
            await accepted.wait()  # the status read is on its way, and never answered
            # a hang guard only (the client's own timeout is 30 s): the bound ends the wait
            async with asyncio.timeout(20):
                await readout.stop(bound=0.2)
            assert not readout._flushes  # the write given up: cancelled, not left running
    finally:
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()

