"""The project's informer (drainsafe.kube.watch), which the lab's kubelets and traffic paths
watch through, against the lab's API server: a watch from an expired resourceVersion ends
(410 as an ERROR event), and the relist reports what changed meanwhile, deletions included."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from drainsafe.kube import Expired, Informer, KubeClient, api_path
from drainsafe.lab.controlplane import ControlPlane


async def test_expired_watch_relists_and_reports_deletions(tmp_path: Path) -> None:
    cp = ControlPlane(tmp_path / "cp", history=5)
    await cp.start()
    client = None
    try:
        cp.write_kubeconfig(tmp_path / "kubeconfig")
        client = KubeClient.from_kubeconfig(str(tmp_path / "kubeconfig"))
        path = api_path("v1", "configmaps", namespace="default")
        for i in range(3):
            await client.post(path, {"metadata": {"name": f"cm-{i}"}})
        events: list[tuple[str, str]] = []

        def seen(kind: str, obj: dict[str, Any]) -> None:
            events.append((kind, obj["metadata"]["name"]))

        informer = Informer(client, path, on_event=seen)
        await informer._relist()
        assert sorted(events) == [("ADDED", f"cm-{i}") for i in range(3)]
        # Meanwhile (no watch running): one deleted, many changes push the history past it.
        await client.request("DELETE", api_path("v1", "configmaps", namespace="default",
                                                name="cm-0"))
        for i in range(10):
            await client.post(path, {"metadata": {"name": f"new-{i}"}})
        events.clear()
        # The watch from the old version gets 410 Expired and ends instead of hanging.
        with pytest.raises(Expired):
            async with asyncio.timeout(20):
                await informer._watch_once()
        # The loop relists: the deletion is reported even though its event expired.
        async with informer:
            await informer.wait_for(lambda cache: "default/new-9" in cache, timeout=20,
                                    what="the relist")
            assert ("DELETED", "cm-0") in events
            assert sum(1 for kind, _ in events if kind == "ADDED") == 10
            assert sorted(informer.cache) == sorted(
                f"default/{name}" for name in ["cm-1", "cm-2", *[f"new-{i}" for i in range(10)]])
    finally:
        if client is not None:
            await client.aclose()
        await cp.stop()
