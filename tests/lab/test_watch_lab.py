"""Watch fidelity: ordering, resourceVersions, 410 Expired, bookmarks, selector transitions."""

from __future__ import annotations

import asyncio
import json
import pathlib
import ssl
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Store
from drainsafe.lab.controlplane import ControlPlane

CONFIGMAPS = BY_KEY["configmaps"]


def client(cp: ControlPlane) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=cp.url, timeout=10,
                             verify=ssl.create_default_context(cafile=cp.ca_path),
                             headers={"Authorization": f"Bearer {cp.token}"})


async def read_events(response: httpx.Response, count: int, timeout: float = 10) -> list[dict]:
    events: list[dict] = []

    async def collect() -> None:
        async for line in response.aiter_lines():
            if line.strip():
                events.append(json.loads(line))
                if len(events) >= count:
                    return

    async with asyncio.timeout(timeout):
        await collect()
    return events


def cm(name: str, value: str = "1") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"v": value}}


async def test_watch_stream_is_ordered_with_increasing_versions(
        control_plane: ControlPlane) -> None:
    async with client(control_plane) as c:
        listed = (await c.get("/api/v1/namespaces/default/configmaps")).json()
        rv = listed["metadata"]["resourceVersion"]
        async with c.stream("GET", "/api/v1/namespaces/default/configmaps",
                            params={"watch": "true", "resourceVersion": rv}) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"] == "application/json"
            await c.post("/api/v1/namespaces/default/configmaps", json=cm("a"))
            await c.post("/api/v1/namespaces/default/configmaps", json=cm("b"))
            await c.patch("/api/v1/namespaces/default/configmaps/a",
                          json={"data": {"v": "2"}},
                          headers={"content-type": "application/merge-patch+json"})
            await c.delete("/api/v1/namespaces/default/configmaps/b")
            events = await read_events(resp, 4)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == 4
    assert versions[0] > int(rv)
    assert events[2]["object"]["data"] == {"v": "2"}


@pytest.fixture
async def small_history(tmp_path: pathlib.Path) -> AsyncIterator[ControlPlane]:
    cp = ControlPlane(tmp_path / "state", history=5, bookmark_seconds=0.3)
    await cp.start()
    try:
        yield cp
    finally:
        await cp.stop()


async def test_too_old_resource_version_gets_an_error_event_with_410(
        small_history: ControlPlane) -> None:
    cp = small_history
    first = cp.store.create(CONFIGMAPS, cm("x"))
    old_rv = first["metadata"]["resourceVersion"]
    for i in range(10):
        cp.store.create(CONFIGMAPS, cm(f"y{i}"))
    async with client(cp) as c, c.stream(
            "GET", "/api/v1/namespaces/default/configmaps",
            params={"watch": "1", "resourceVersion": old_rv}) as resp:
        assert resp.status_code == 200  # as the watch cache answers: 200 + ERROR event
        lines = [json.loads(line) async for line in resp.aiter_lines() if line.strip()]
    assert len(lines) == 1
    event = lines[0]
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    assert event["object"]["message"].startswith(f"too old resource version: {old_rv} (")
    # a recent version still works
    recent = str(cp.store.resource_version - 2)
    async with client(cp) as c, c.stream(
            "GET", "/api/v1/namespaces/default/configmaps",
            params={"watch": "1", "resourceVersion": recent, "timeoutSeconds": "1"}) as resp:
        lines = [json.loads(line) async for line in resp.aiter_lines() if line.strip()]
    assert [e["type"] for e in lines] == ["ADDED", "ADDED"]


async def test_bookmarks_and_timeout(small_history: ControlPlane) -> None:
    cp = small_history
    async with client(cp) as c, c.stream(
            "GET", "/api/v1/namespaces/default/configmaps",
            params={"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "1",
                    "resourceVersion": str(cp.store.resource_version)}) as resp:
        lines = [json.loads(line) async for line in resp.aiter_lines() if line.strip()]
    # the server ended the stream after timeoutSeconds, sending bookmarks meanwhile
    assert lines and all(e["type"] == "BOOKMARK" for e in lines)
    assert lines[0]["object"]["metadata"]["resourceVersion"] == str(cp.store.resource_version)


async def test_selector_transitions_become_added_and_deleted(
        control_plane: ControlPlane) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "labels": {"app": "t"}},
           "spec": {"schedulerName": "none", "containers": [{"name": "c", "image": "x"}]}}
    async with client(control_plane) as c, c.stream("GET", "/api/v1/pods", params={
            "watch": "true", "fieldSelector": "spec.nodeName=n1"}) as resp:
        await c.post("/api/v1/namespaces/default/pods", json=pod)
        r = await c.post("/api/v1/namespaces/default/pods/p/binding", json={
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
            "target": {"kind": "Node", "name": "n1"}})
        assert r.status_code == 201
        await c.delete("/api/v1/namespaces/default/pods/p",
                       params={"gracePeriodSeconds": "0"})
        events = await read_events(resp, 2)
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]
    assert events[0]["object"]["spec"]["nodeName"] == "n1"


# ---- property: a watcher never loses or reorders events ------------------------------

OPS = hs.lists(hs.tuples(hs.sampled_from(["create", "update", "delete"]),
                         hs.integers(min_value=0, max_value=4),
                         hs.text(alphabet="abc", max_size=3)), max_size=40)


def apply_ops(store: Store, ops: list[tuple[str, int, str]]) -> None:
    for op, n, value in ops:
        name = f"cm{n}"
        try:
            if op == "create":
                store.create(CONFIGMAPS, cm(name, value))
            elif op == "update":
                obj = store.get(CONFIGMAPS, "default", name)
                obj["data"] = {"v": value}
                store.update(CONFIGMAPS, obj)
            else:
                store.delete(CONFIGMAPS, "default", name)
        except st.StatusError:
            continue


def drain(watch: object) -> list:
    events = []
    queue = watch.queue  # type: ignore[attr-defined]
    while not queue.empty():
        ev = queue.get_nowait()
        if ev is not None:
            events.append(ev)
    return events


@settings(max_examples=150, deadline=None)
@given(before=OPS, after=OPS, history=hs.integers(min_value=1, max_value=30))
def test_watch_from_a_list_never_loses_or_reorders(before: list, after: list,
                                                   history: int) -> None:
    store = Store(history=history)
    store.create(BY_KEY["namespaces"], {"metadata": {"name": "default"}})
    apply_ops(store, before)
    items, rv = store.list(CONFIGMAPS, "default")
    watch = store.watch(CONFIGMAPS, rv, "default")  # list-then-watch, as informers do
    apply_ops(store, after)
    events = drain(watch)
    versions = [ev.rv for ev in events]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert all(v > rv for v in versions)
    # replaying the events over the list reproduces the store exactly
    state = {o["metadata"]["name"]: o for o in items}
    for ev in events:
        if ev.type == "DELETED":
            assert ev.obj["metadata"]["name"] in state
            del state[ev.obj["metadata"]["name"]]
        else:
            assert (ev.type == "ADDED") == (ev.obj["metadata"]["name"] not in state)
            state[ev.obj["metadata"]["name"]] = ev.obj
        assert int(ev.obj["metadata"]["resourceVersion"]) == ev.rv
    final, _ = store.list(CONFIGMAPS, "default")
    assert {n: o["data"] for n, o in state.items()} == {
        o["metadata"]["name"]: o["data"] for o in final}


@settings(max_examples=150, deadline=None)
@given(ops=OPS, start=hs.integers(min_value=0, max_value=60),
       history=hs.integers(min_value=1, max_value=30))
def test_watch_from_any_version_is_the_exact_suffix_or_410(ops: list, start: int,
                                                           history: int) -> None:
    store = Store(history=history)
    store.create(BY_KEY["namespaces"], {"metadata": {"name": "default"}})
    full = store.watch(CONFIGMAPS, 0)  # an observer from the beginning
    apply_ops(store, ops)
    everything = drain(full)
    since = min(start, store.resource_version)
    try:
        late = store.watch(CONFIGMAPS, since)
    except st.StatusError as err:
        assert err.code == 410 and err.reason == "Expired"
        assert next(e.rv for e in everything if e.rv > since) <= store.oldest_watchable(
            CONFIGMAPS)
        return
    got = drain(late)
    assert [e.rv for e in got] == [e.rv for e in everything if e.rv > since]
