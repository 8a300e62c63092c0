"""The project's informer (drainsafe.kube.watch), which the lab's kubelets and traffic paths
watch through, against the lab's API server: a watch from an expired resourceVersion ends
(410 as an ERROR event), and the relist reports what changed meanwhile, deletions included.

Across a real partition (a TCP link cut and mended), the relist delivers a deletion it
missed once, marked DeletedFinalStateUnknown, and an object re-created under its name as
the old one's deletion and the new one's addition."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from drainsafe.kube import (
    Backoff,
    DeletedFinalStateUnknown,
    Expired,
    Informer,
    KubeClient,
    api_path,
)
from drainsafe.lab.controlplane import ControlPlane

CONFIGMAPS = api_path("v1", "configmaps", namespace="default")


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


class Link:
    """A TCP relay between an informer and the API server that a test cuts and mends, as a
    network partition does: live connections closed on both sides, new ones refused. TLS
    passes through it untouched (the client still verifies the lab's certificate)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()

    async def mend(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        for task in list(self._pumps):
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.ensure_future(self._pump(src, dst))
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            dst.close()
            self._writers.discard(dst)


@contextlib.asynccontextmanager
async def behind_a_link(tmp_path: Path) -> AsyncIterator[tuple[KubeClient, KubeClient, Link]]:
    """A control plane with a short watch history; a client straight to it (the test's
    writes) and one through a Link (the informer's)."""
    cp = ControlPlane(tmp_path / "cp", history=5)
    await cp.start()
    link = Link(cp.port)
    await link.mend()
    direct = linked = None
    try:
        cp.write_kubeconfig(tmp_path / "kubeconfig")
        direct = KubeClient.from_kubeconfig(str(tmp_path / "kubeconfig"))
        config = yaml.safe_load((tmp_path / "kubeconfig").read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{link.port}"
        (tmp_path / "linked").write_text(yaml.safe_dump(config))
        linked = KubeClient.from_kubeconfig(str(tmp_path / "linked"))
        yield direct, linked, link
    finally:
        await link.cut()
        for client in (direct, linked):
            if client is not None:
                await client.aclose()
        await cp.stop()


Seen = tuple[str, str, str, bool]  # kind, name, uid, marked DeletedFinalStateUnknown


def recording(events: list[Seen]) -> Callable[[str, dict[str, Any]], None]:
    def seen(kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        events.append((kind, meta["name"], meta["uid"],
                       isinstance(obj, DeletedFinalStateUnknown)))
    return seen


def linked_informer(client: KubeClient, events: list[Seen]) -> Informer:
    # A short backoff: reconnects while the link is cut fail fast, and the one after it
    # mends is not seconds away.
    return Informer(client, CONFIGMAPS, backoff=Backoff(base=0.05, cap=0.2),
                    on_event=recording(events))


async def push_history_past(client: KubeClient, prefix: str) -> None:
    """More changes than the server keeps (history=5): a watch from before them is 410."""
    for i in range(8):
        await client.post(CONFIGMAPS, {"metadata": {"name": f"{prefix}-{i}"}})


async def test_a_deletion_missed_while_disconnected_is_delivered_once(tmp_path: Path) -> None:
    async with behind_a_link(tmp_path) as (direct, linked, link):
        for i in range(3):
            await direct.post(CONFIGMAPS, {"metadata": {"name": f"cm-{i}"}})
        events: list[Seen] = []
        async with linked_informer(linked, events) as informer:
            uid = informer.cache["default/cm-0"]["metadata"]["uid"]
            await link.cut()
            await direct.request("DELETE", f"{CONFIGMAPS}/cm-0")
            await push_history_past(direct, "gap1")
            await link.mend()
            await informer.wait_for(lambda c: "default/gap1-7" in c, timeout=30,
                                    what="the relist after the first partition")
            # Its watch event expired with the history: the relist found it, marked.
            assert informer.stats.expired >= 1
            assert [e for e in events if e[0] == "DELETED"] == [("DELETED", "cm-0", uid, True)]
            assert informer.stats.missed_deletions == 1
            # A second partition and relist: the deletion is not delivered again.
            await link.cut()
            await push_history_past(direct, "gap2")
            await link.mend()
            await informer.wait_for(lambda c: "default/gap2-7" in c, timeout=30,
                                    what="the relist after the second partition")
            assert informer.stats.expired >= 2
            assert [e for e in events if e[0] == "DELETED"] == [("DELETED", "cm-0", uid, True)]
            assert "default/cm-0" not in informer.cache
            # Everything else arrived once, unmarked.
            added = [e[1] for e in events if e[0] == "ADDED"]
            assert sorted(added) == sorted(
                ["cm-0", "cm-1", "cm-2", *[f"gap{g}-{i}" for g in (1, 2) for i in range(8)]])
            assert not any(e[3] for e in events if e[0] != "DELETED")


async def test_a_recreated_object_is_a_deletion_and_an_addition(tmp_path: Path) -> None:
    async with behind_a_link(tmp_path) as (direct, linked, link):
        await direct.post(CONFIGMAPS, {"metadata": {"name": "cm"}})
        events: list[Seen] = []
        async with linked_informer(linked, events) as informer:
            old_uid = informer.cache["default/cm"]["metadata"]["uid"]
            events.clear()
            await link.cut()
            # Deleted and created again under its name while the informer was away.
            await direct.request("DELETE", f"{CONFIGMAPS}/cm")
            created = await direct.post(CONFIGMAPS, {"metadata": {"name": "cm"}})
            new_uid = created["metadata"]["uid"]
            assert new_uid != old_uid
            await push_history_past(direct, "gap")
            await link.mend()
            await informer.wait_for(
                lambda c: c.get("default/cm", {}).get("metadata", {}).get("uid") == new_uid,
                timeout=30, what="the re-created object")
            assert informer.stats.expired >= 1
            # Two objects, not one changed: the old one's deletion (marked), then the new.
            assert [e for e in events if e[1] == "cm"] == [
                ("DELETED", "cm", old_uid, True), ("ADDED", "cm", new_uid, False)]
