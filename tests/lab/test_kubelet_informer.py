"""The node side's informer: a watch from an expired resourceVersion ends (410 as an ERROR
event), and the relist reports what changed meanwhile, deletions included."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import ConfigMap

from drainsafe.lab.controlplane import ControlPlane
from drainsafe.lab.informer import Informer


async def test_expired_watch_relists_and_reports_deletions(tmp_path: Path) -> None:
    cp = ControlPlane(tmp_path / "cp", history=5)
    await cp.start()
    client = None
    try:
        cp.write_kubeconfig(tmp_path / "kubeconfig")
        client = AsyncClient(config=KubeConfig.from_file(str(tmp_path / "kubeconfig")))
        for i in range(3):
            await client.create(ConfigMap.from_dict(  # type: ignore[call-overload]
                {"metadata": {"name": f"cm-{i}", "namespace": "default"}}))
        events: list[tuple[str, str]] = []

        def seen(kind: str, obj: dict[str, Any]) -> None:
            events.append((kind, obj["metadata"]["name"]))

        informer = Informer(client, ConfigMap, namespace="default", on_event=seen)
        version = await informer._relist()
        assert sorted(events) == [("ADDED", f"cm-{i}") for i in range(3)]
        # Meanwhile (no watch running): one deleted, many changes push the history past it.
        await client.delete(ConfigMap, "cm-0", namespace="default")
        for i in range(10):
            await client.create(ConfigMap.from_dict(  # type: ignore[call-overload]
                {"metadata": {"name": f"new-{i}", "namespace": "default"}}))
        events.clear()
        # The watch from the old version gets 410 Expired and ends instead of hanging.
        async with asyncio.timeout(20):
            await informer._watch(version)
        # run() relists: the deletion is reported even though its event expired.
        task = asyncio.ensure_future(informer.run())
        try:
            async with asyncio.timeout(20):
                await informer.synced.wait()
            assert ("DELETED", "cm-0") in events
            assert sum(1 for kind, _ in events if kind == "ADDED") == 10
            assert sorted(name for _, name in informer.cache) == sorted(
                ["cm-1", "cm-2", *[f"new-{i}" for i in range(10)]])
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        if client is not None:
            await client.close()
        await cp.stop()
