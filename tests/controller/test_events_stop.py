"""The Event recorder at a graceful stop: what was emitted is on the API server when stop()
returns; an API server that does not answer holds the stop no longer than its bound.

Against the lab's API server (real HTTP), and a TCP server that accepts and never answers.
The reconciler's own stop (the leader's task cancelled, as at SIGTERM) is
test_maintenance_phases_lab.test_events_of_the_last_writes_survive_a_graceful_stop.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator

import pytest
import yaml

from drainsafe.controller.events import EventRecorder
from drainsafe.kube import KubeClient
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.controlplane import ControlPlane

EVENTS = BY_KEY["events"]
SUBJECT = {"metadata": {"name": "driver-upgrade", "uid": "u-1", "resourceVersion": "1"}}
BURST = 40


@pytest.fixture
async def api(tmp_path: pathlib.Path) -> AsyncIterator[tuple[ControlPlane, pathlib.Path]]:
    cp = ControlPlane(tmp_path / "state")
    await cp.start()
    try:
        cp.write_kubeconfig(tmp_path / "kubeconfig")
        yield cp, tmp_path / "kubeconfig"
    finally:
        await cp.stop()


async def test_events_emitted_right_before_a_stop_are_written(
        api: tuple[ControlPlane, pathlib.Path]) -> None:
    cp, kubeconfig = api
    async with KubeClient.from_kubeconfig(str(kubeconfig)) as client:
        recorder = EventRecorder(client, instance="leader-1", wall=lambda: 1.8e9)
        for i in range(BURST):
            recorder.emit(SUBJECT, "NodeMaintenance", "NodeUncordoned", f"node-{i}: done")
        await recorder.stop()  # no await between the emits and the stop: none had left
    written = sorted(e["message"] for e in cp.store.items(EVENTS, "default"))
    assert written == sorted(f"node-{i}: done" for i in range(BURST))


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
            recorder = EventRecorder(client, instance="leader-1", wall=lambda: 1.8e9)
            recorder.emit(SUBJECT, "NodeMaintenance", "NodeUncordoned", "node-1: done")
            await accepted.wait()  # the POST is on its way, and will never be answered
            # a hang guard only (the client's own timeout is 30 s): the bound ends the wait
            async with asyncio.timeout(20):
                await recorder.stop(bound=0.2)
            assert not recorder._tasks  # the write given up: cancelled, not left running
    finally:
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()
