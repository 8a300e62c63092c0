"""Clients that go away: mid-body, mid-watch (idle or with a backlog), under ASGI 2.3 and 2.4.

A disconnected client is normal (a kubelet's request timing out, kubectl get -w ended with
Ctrl-C); the API server must end the request quietly (no traceback, no asyncio warnings
about writes to a closed socket) and release the client's store watcher at once.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Watch
from drainsafe.lab.controlplane import ControlPlane

CONFIGMAPS = BY_KEY["configmaps"]
BASE = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
def server_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """caplog, also fed by uvicorn's loggers (they do not propagate to the root logger)."""
    caplog.set_level(logging.DEBUG, logger="drainsafe.lab.apiserver.server")
    loggers = [logging.getLogger(n) for n in ("uvicorn", "uvicorn.error")]
    for lg in loggers:
        lg.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        for lg in loggers:
            lg.removeHandler(caplog.handler)


def assert_quiet(caplog: pytest.LogCaptureFixture) -> None:
    loud = [(r.name, r.levelname, r.getMessage()) for r in caplog.records
            if r.levelno >= logging.WARNING or r.exc_info]
    assert loud == [], loud


def watching(cp: ControlPlane) -> int:
    return sum(len(ws) for ws in cp.store._watches.values())


def on_unwatch(cp: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """An event set whenever the API server releases a store watcher."""
    released = asyncio.Event()
    original: Callable[[Watch], None] = cp.store.unwatch

    def unwatch(w: Watch) -> None:
        original(w)
        released.set()

    monkeypatch.setattr(cp.store, "unwatch", unwatch)
    return released


async def raw_request(cp: ControlPlane, head: str, body: bytes = b""
                      ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(
        cp.host, cp.port, ssl=ssl.create_default_context(cafile=cp.ca_path))
    writer.write(f"{head}\r\nHost: lab\r\nAuthorization: Bearer {cp.token}\r\n".encode())
    writer.write(b"\r\n" + body)
    await writer.drain()
    return reader, writer


async def test_client_gone_mid_body_ends_the_request_quietly(
        control_plane: ControlPlane, server_logs: pytest.LogCaptureFixture) -> None:
    gone = asyncio.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "client went away mid-request" in record.getMessage():
                gone.set()

    seen = Seen()
    logging.getLogger("drainsafe.lab.apiserver.server").addHandler(seen)
    try:
        _, writer = await raw_request(
            control_plane, f"POST {BASE} HTTP/1.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: 4096", b'{"metadata": {"name": "half"')
        writer.transport.abort()
        async with asyncio.timeout(10):
            await gone.wait()
    finally:
        logging.getLogger("drainsafe.lab.apiserver.server").removeHandler(seen)
    assert control_plane.store.peek(CONFIGMAPS, "default", "half") is None
    assert_quiet(server_logs)


@pytest.mark.parametrize("backlog", [0, 300], ids=["idle", "backlog"])
async def test_client_gone_mid_watch_releases_the_watch(
        control_plane: ControlPlane, server_logs: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, backlog: int) -> None:
    store = control_plane.store
    released = on_unwatch(control_plane, monkeypatch)
    reader, writer = await raw_request(
        control_plane, f"GET {BASE}?watch=true&resourceVersion={store.resource_version}"
                       " HTTP/1.1")
    assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).startswith(
        b"HTTP/1.1 200")
    assert watching(control_plane) == 1

    def create(names: range) -> None:
        for n in names:
            store.create(CONFIGMAPS, {"metadata": {"name": f"c{n}", "namespace": "default"},
                                      "data": {"v": "x" * 10_000}})

    if backlog:
        create(range(10))
        await asyncio.wait_for(reader.readexactly(1), 10)  # the stream is flowing
    writer.transport.abort()
    # ~3 MB queued for the client that just vanished, before the server hears of it:
    # it must stop at the disconnect, not write the backlog into a closed socket.
    create(range(10, backlog))
    async with asyncio.timeout(10):
        await released.wait()
    assert watching(control_plane) == 0
    assert_quiet(server_logs)


@pytest.mark.parametrize("bookmarks", [False, True])
async def test_watch_ends_when_client_goes_under_asgi_2_4(
        control_plane: ControlPlane, server_logs: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, bookmarks: bool) -> None:
    """Under ASGI spec 2.4 Starlette stops listening for http.disconnect and turns the
    server's OSError on send into ClientDisconnect; the watch must still end at once and
    quietly (idle: nothing would ever be sent; bookmarks: the next send fails)."""
    released = on_unwatch(control_plane, monkeypatch)
    started, gone = asyncio.Event(), asyncio.Event()
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if gone.is_set():
            raise OSError("client gone")  # what uvicorn's ClientDisconnected is
        if message["type"] == "http.response.start":
            assert message["status"] == 200
            started.set()

    query = "watch=true" + ("&allowWatchBookmarks=true" if bookmarks else "")
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
             "http_version": "1.1", "method": "GET", "scheme": "https", "path": BASE,
             "raw_path": BASE.encode(), "root_path": "", "query_string": query.encode(),
             "headers": [(b"authorization", f"Bearer {control_plane.token}".encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", control_plane.port)}
    call = asyncio.ensure_future(control_plane.api.app(scope, receive, send))
    try:
        async with asyncio.timeout(10):
            await started.wait()
        gone.set()
        async with asyncio.timeout(10):
            await released.wait()
        await asyncio.wait_for(call, 10)  # returns, no ClientDisconnect raised
    finally:
        call.cancel()
    assert watching(control_plane) == 0
    assert_quiet(server_logs)
