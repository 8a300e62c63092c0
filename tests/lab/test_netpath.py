"""Traffic paths without the API: endpoint selection, propagation delay, the L4 proxy
against real sockets (refusal reaches the client, established connections stay), and the
ingress path on real nginx."""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from drainsafe.lab.netpath.endpoints import ServicePort, ServiceView, service_views
from drainsafe.lab.netpath.ingress import IngressPath
from drainsafe.lab.netpath.l4 import L4Proxy
from drainsafe.lab.netpath.propagation import DelayedFeed, Propagation

SVC = {"metadata": {"name": "web", "namespace": "ml"},
       "spec": {"clusterIP": "127.96.0.10", "ports": [{"name": "http", "port": 80,
                                                      "targetPort": 8000}]}}


def _slice(*endpoints: tuple[str, dict[str, bool]]) -> dict[str, object]:
    return {"metadata": {"name": "web-abc", "namespace": "ml",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": cond} for ip, cond in endpoints]}


def test_only_ready_endpoints_unless_none_is_ready() -> None:
    views = service_views([SVC], [_slice(
        ("127.10.0.2", {"ready": True, "serving": True, "terminating": False}),
        ("127.10.0.3", {"ready": False, "serving": True, "terminating": True}),
        ("127.10.0.4", {}),  # nil conditions count as ready
    )])
    assert views[("ml", "web")].port(80).backends == ("127.10.0.2:8000", "127.10.0.4:8000")
    # No ready endpoint left: serving + terminating ones are used (KEP-1669).
    views = service_views([SVC], [_slice(
        ("127.10.0.3", {"ready": False, "serving": True, "terminating": True}),
        ("127.10.0.5", {"ready": False, "serving": False, "terminating": False}))])
    assert views[("ml", "web")].port("http").backends == ("127.10.0.3:8000",)
    headless = {"metadata": {"name": "h", "namespace": "ml"}, "spec": {"clusterIP": "None"}}
    assert ("ml", "h") not in service_views([headless], [])


def test_propagation_parse_and_draw() -> None:
    assert Propagation.parse("1.5") == Propagation(1.5, 1.5)
    assert Propagation.parse("0.5-3") == Propagation(0.5, 3.0)
    with pytest.raises(ValueError, match="propagation 'soon'"):
        Propagation.parse("soon")
    with pytest.raises(ValueError, match="not valid"):
        Propagation(3, 1)
    rng = random.Random(1)
    assert all(0.5 <= Propagation(0.5, 3).draw(rng) <= 3 for _ in range(100))


async def test_delayed_feed_applies_after_the_delay_in_order() -> None:
    loop = asyncio.get_running_loop()
    applied: list[tuple[int, float]] = []
    feed: DelayedFeed[int] = DelayedFeed(0.4, lambda v: _record(applied, v, loop.time()))
    t0 = loop.time()
    feed.push(1)
    await asyncio.sleep(0.1)
    feed.push(2)
    try:
        deadline = loop.time() + 10
        while len(applied) < 2 and loop.time() < deadline:
            await asyncio.sleep(0.02)
        assert [v for v, _ in applied] == [1, 2]
        assert applied[0][1] - t0 >= 0.39
        assert applied[1][1] - t0 >= 0.49
    finally:
        await feed.close()


async def _record(out: list[tuple[int, float]], value: int, at: float) -> None:
    out.append((value, at))


class Backend:
    """A TCP echo server that says who it is, on a loopback address."""

    def __init__(self, host: str, tag: bytes) -> None:
        self.host, self.tag = host, tag
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._serve, self.host, port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await r.readline():
            w.write(self.tag + b":" + data)
            await w.drain()
        w.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def proxy() -> AsyncIterator[L4Proxy]:
    p = L4Proxy(random.Random(0))
    try:
        yield p
    finally:
        await p.close()


def _view(cluster_ip: str, port: int, backends: list[str]) -> dict[tuple[str, str], ServiceView]:
    return {("ml", "web"): ServiceView("ml", "web", cluster_ip,
                                       (ServicePort("http", port, "TCP", tuple(backends)),))}


def _free(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


async def test_l4_proxy_routes_and_keeps_established_connections(proxy: L4Proxy) -> None:
    a, b = Backend("127.10.250.2", b"a"), Backend("127.10.250.3", b"b")
    await a.start()
    await b.start()
    cluster_ip = f"127.96.{random.randint(1, 250)}.{random.randint(2, 250)}"
    port = _free(cluster_ip)
    try:
        await proxy.apply(_view(cluster_ip, port, [f"{a.host}:{a.port}"]))
        r, w = await asyncio.open_connection(cluster_ip, port)
        w.write(b"hello\n")
        assert await asyncio.wait_for(r.readline(), 10) == b"a:hello\n"
        # Endpoints change: new connections go to b; the open one stays with a.
        await proxy.apply(_view(cluster_ip, port, [f"{b.host}:{b.port}"]))
        r2, w2 = await asyncio.open_connection(cluster_ip, port)
        w2.write(b"x\n")
        assert await asyncio.wait_for(r2.readline(), 10) == b"b:x\n"
        w.write(b"again\n")
        assert await asyncio.wait_for(r.readline(), 10) == b"a:again\n"
        for writer in (w, w2):
            writer.close()
    finally:
        await a.stop()
        await b.stop()


async def test_l4_proxy_does_not_retry_a_refused_backend(proxy: L4Proxy) -> None:
    dead = f"127.10.250.9:{_free('127.10.250.9')}"  # nothing listens there
    cluster_ip = "127.96.251.7"
    port = _free(cluster_ip)
    await proxy.apply(_view(cluster_ip, port, [dead]))
    r, w = await asyncio.open_connection(cluster_ip, port)
    w.write(b"hello\n")
    with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
        async with asyncio.timeout(10):
            data = await r.readline()
        if not data:
            raise asyncio.IncompleteReadError(b"", None)
    assert proxy.stats.backend_refused == 1
    # An HTTP client sees it as a failed request, not a response.
    await proxy.apply(_view(cluster_ip, port, []))
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.TransportError):
            await client.get(f"http://{cluster_ip}:{port}/")
    assert proxy.stats.rejected_no_endpoint == 1


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx not installed")
async def test_ingress_path_follows_endpoint_changes(tmp_path: Path) -> None:
    ingress = IngressPath(tmp_path / "ingress")
    servers = []
    try:
        for host, tag in (("127.10.250.20", b"one"), ("127.10.250.21", b"two")):
            servers.append(await _http_server(host, tag))
        (_, p1), (_, p2) = servers
        await ingress.apply(_view("127.96.0.10", 80, [f"127.10.250.20:{p1}"]))
        url = ingress.url("ml", "web", 80)
        assert url is not None
        async with httpx.AsyncClient() as client:
            assert (await client.get(url + "/")).text == "one"
        await ingress.apply(_view("127.96.0.10", 80, [f"127.10.250.21:{p2}"]))
        assert ingress.url("ml", "web", 80) == url  # same address after a reload
        # apply() returns once the old workers have let go of the listener: a new
        # connection meets the new config.
        for _ in range(5):
            async with httpx.AsyncClient() as client:
                assert (await client.get(url + "/")).text == "two"
    finally:
        await ingress.close()
        for server, _ in servers:
            server.close()


async def _http_server(host: str, body: bytes) -> tuple[asyncio.base_events.Server, int]:
    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            line = await r.readline()
            if not line:
                break
            while (await r.readline()) not in (b"\r\n", b""):
                pass
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await w.drain()
        w.close()
    server = await asyncio.start_server(serve, host, 0)
    return server, server.sockets[0].getsockname()[1]
