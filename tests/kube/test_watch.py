"""The informer against a scripted server: events, 410 relist, dropped and silent streams."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
import yaml

from drainsafe.kube.client import KubeClient
from drainsafe.kube.retry import Backoff
from drainsafe.kube.watch import DeletedFinalStateUnknown, Informer, WaitTimeout, relist_events

from .apiserver import FakeApi, kubeconfig, serve


def client_for(tmp: Path, url: str) -> KubeClient:
    path = tmp / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig(url, {"token": "t"})))
    return KubeClient.from_kubeconfig(str(path), timeout=5)


def informer(client: KubeClient, **kw: object) -> Informer:
    return Informer(client, "/api/v1/pods", backoff=Backoff(base=0.05, cap=0.2),
                    rng=random.Random(1), **kw)  # type: ignore[arg-type]


async def test_list_then_watch_sees_every_change(tmp_path: Path) -> None:
    api = FakeApi()
    api.put("a")
    seen: list[tuple[str, str]] = []
    async with serve(api) as url, client_for(tmp_path, url) as client:
        inf = informer(client, on_event=lambda t, o: seen.append((t, o["metadata"]["name"])))
        async with inf:
            assert set(inf.cache) == {"ns/a"}
            api.put("b")
            await inf.wait_for(lambda c: "ns/b" in c, timeout=10)
            api.delete("a")
            await inf.wait_for(lambda c: "ns/a" not in c, timeout=10)
            assert inf.resource_version == str(api.rv)
    assert ("ADDED", "b") in seen and ("DELETED", "a") in seen


async def test_410_relists_and_loses_nothing(tmp_path: Path) -> None:
    api = FakeApi()
    api.put("a")
    async with serve(api) as url, client_for(tmp_path, url) as client:
        inf = informer(client)
        async with inf:
            # The stream drops before b and c are sent, and history is compacted past
            # the informer's resourceVersion: only a relist can recover them.
            api.drop_next_watch_after = 0
            api.oldest_rv = api.rv + 2
            api.put("b")
            api.put("c")
            await inf.wait_for(lambda c: {"ns/a", "ns/b", "ns/c"} <= set(c), timeout=15)
            api.delete("b")
            api.oldest_rv = 0
            await inf.wait_for(lambda c: "ns/b" not in c, timeout=15)
            assert inf.stats.expired >= 1
            assert inf.stats.lists >= 2


async def test_silent_stream_is_abandoned_after_idle_timeout(tmp_path: Path) -> None:
    api = FakeApi()
    api.put("a")
    api.silent_watch = True
    async with serve(api) as url, client_for(tmp_path, url) as client:
        inf = Informer(client, "/api/v1/pods", idle_timeout=0.5)
        async with inf:
            for _ in range(500):  # until the first (silent) watch is open
                if any("watch=true" in r for r in api.requests):
                    break
                await asyncio.sleep(0.01)
            api.silent_watch = False
            api.put("b")
            await inf.wait_for(lambda c: "ns/b" in c, timeout=15)
            assert inf.stats.idle_timeouts >= 1


async def test_errors_back_off_and_wait_for_is_bounded(tmp_path: Path) -> None:
    api = FakeApi()
    async with serve(api) as url, client_for(tmp_path, url) as client, informer(client) as inf:
        api.token = "other"  # every further request fails with 401
        api.drop_next_watch_after = 0
        api.put("x")
        with pytest.raises(WaitTimeout, match="pod y"):
            await inf.wait_for(lambda c: "ns/y" in c, timeout=1.0, what="pod y")
        assert inf.stats.errors >= 1
        api.token = None
        api.put("y")
        await inf.wait_for(lambda c: "ns/y" in c, timeout=15)


def _obj(name: str, rv: str, uid: str = "u") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "uid": uid}}


def test_relist_reports_changes_and_marks_the_deletions_it_missed() -> None:
    old = {"ns/a": _obj("a", "1"), "ns/b": _obj("b", "2"), "ns/c": _obj("c", "3"),
           "ns/e": _obj("e", "4")}
    fresh = {"ns/a": _obj("a", "1"), "ns/b": _obj("b", "7"), "ns/c": _obj("c", "9", uid="v"),
             "ns/d": _obj("d", "8")}
    events = relist_events(old, fresh)
    # a is unchanged; b changed during the gap; c was deleted and re-created under its name
    # (a new UID): the old one's deletion, then the new one's addition; e was deleted.
    assert [(kind, o["metadata"]["name"], o["metadata"]["uid"]) for kind, o in events] == [
        ("MODIFIED", "b", "u"), ("DELETED", "c", "u"), ("ADDED", "c", "v"), ("ADDED", "d", "u"),
        ("DELETED", "e", "u")]
    # Each deletion carries the last state seen, marked as possibly stale, with its key.
    deleted = [o for kind, o in events if kind == "DELETED"]
    assert all(isinstance(o, DeletedFinalStateUnknown) for o in deleted)
    assert [(o.key, o) for o in deleted if isinstance(o, DeletedFinalStateUnknown)] == [
        ("ns/c", old["ns/c"]), ("ns/e", old["ns/e"])]
    # What the watch or the list delivered is never marked.
    assert not any(isinstance(o, DeletedFinalStateUnknown) for kind, o in events
                   if kind != "DELETED")
    assert relist_events(fresh, {}) == [("DELETED", o) for o in fresh.values()]


async def test_a_change_across_a_410_relist_reaches_the_callback(tmp_path: Path) -> None:
    api = FakeApi()
    api.put("a")
    seen: list[tuple[str, str]] = []
    async with serve(api) as url, client_for(tmp_path, url) as client:
        inf = informer(client, on_event=lambda t, o: seen.append((t, o["metadata"]["name"])))
        async with inf:
            # The stream drops and history is compacted past the change to a: only the
            # relist sees it, and it must say so (a pod that turned terminating).
            api.drop_next_watch_after = 0
            api.oldest_rv = api.rv + 2
            api.put("a")
            api.put("b")
            await inf.wait_for(lambda c: "ns/b" in c, timeout=15)
            assert inf.stats.expired >= 1
    assert ("MODIFIED", "a") in seen, seen
