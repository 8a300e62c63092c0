"""pods/proxy on the lab API server: a real uvicorn behind a pod, reached through the API
(httpx over HTTPS with the token) and through the real `kubectl get --raw`."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from conftest import Kubectl
from drainsafe.lab.controlplane import ControlPlane


async def echo(request: Request) -> JSONResponse:
    return JSONResponse({"method": request.method, "path": request.url.path,
                         "query": request.url.query, "body": (await request.body()).decode()},
                        headers={"x-pod": "backend"})


@pytest.fixture
async def backend() -> AsyncIterator[int]:
    """A real uvicorn on 127.0.0.1 (the pod's IP below) answering every path."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = Starlette(routes=[Route("/{path:path}", echo, methods=["GET", "POST", "PATCH"])])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        await task


@pytest.fixture
async def api(control_plane: ControlPlane) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
            base_url=control_plane.url,
            verify=ssl.create_default_context(cafile=control_plane.ca_path),
            headers={"Authorization": f"Bearer {control_plane.token}"}, timeout=10) as c:
        yield c


async def make_pod(api: httpx.AsyncClient, name: str, port: int, *, ip: str | None) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "x:1",
                                    "ports": [{"name": "http", "containerPort": port}]}]}}
    assert (await api.post("/api/v1/namespaces/default/pods", json=pod)).status_code == 201
    if ip is not None:
        r = await api.patch(f"/api/v1/namespaces/default/pods/{name}/status",
                            json={"status": {"podIP": ip, "podIPs": [{"ip": ip}]}},
                            headers={"content-type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text


async def test_the_three_id_forms_reach_the_pod(api: httpx.AsyncClient, backend: int) -> None:
    await make_pod(api, "web", backend, ip="127.0.0.1")
    base = "/api/v1/namespaces/default/pods"
    r = await api.get(f"{base}/web:{backend}/proxy/metrics", params={"name": "x"})
    assert r.status_code == 200 and r.headers["x-pod"] == "backend"
    assert r.json() == {"method": "GET", "path": "/metrics", "query": "name=x", "body": ""}
    # NAME alone: the first declared container port.
    assert (await api.get(f"{base}/web/proxy/a/b")).json()["path"] == "/a/b"
    # SCHEME:NAME:PORT, and the trailing slash kept (JoinPreservingTrailingSlash).
    assert (await api.get(f"{base}/http:web:{backend}/proxy/a/")).json()["path"] == "/a/"
    assert (await api.get(f"{base}/web/proxy")).json()["path"] == "/"
    r = await api.post(f"{base}/web/proxy/in", content=b"payload")
    assert r.json()["method"] == "POST" and r.json()["body"] == "payload"
    r = await api.patch(f"{base}/web/proxy/in", content=b"x")
    assert r.json()["method"] == "PATCH"


async def test_errors_as_the_api_server_gives_them(api: httpx.AsyncClient,
                                                   backend: int) -> None:
    await make_pod(api, "web", backend, ip="127.0.0.1")
    await make_pod(api, "pending", backend, ip=None)
    base = "/api/v1/namespaces/default/pods"
    for ident in ("ftp:web:1", "a:web:1:2", ":1"):
        r = await api.get(f"{base}/{ident}/proxy/")
        assert r.status_code == 400, ident
        assert r.json()["message"] == f'invalid pod request "{ident}"'
    r = await api.get(f"{base}/pending/proxy/")
    assert (r.status_code, r.json()["message"]) == (400, "address not allowed")
    r = await api.get(f"{base}/nope:80/proxy/")
    assert (r.status_code, r.json()["reason"]) == (404, "NotFound")
    with socket.socket() as s:  # a port on which nothing listens
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    r = await api.get(f"{base}/web:{closed}/proxy/metrics")
    assert (r.status_code, r.json()["reason"]) == (503, "ServiceUnavailable")
    assert r.json()["message"].startswith("error trying to reach service: ")
    r = await api.request("OPTIONS", f"{base}/web")
    assert r.status_code == 405


async def test_kubectl_get_raw_reaches_the_pod(kubectl: Kubectl, api: httpx.AsyncClient,
                                               backend: int) -> None:
    await make_pod(api, "web", backend, ip="127.0.0.1")
    out = await kubectl.ok("get", "--raw",
                           f"/api/v1/namespaces/default/pods/web:{backend}/proxy/metrics")
    assert json.loads(out)["path"] == "/metrics"
    resources = json.loads(await kubectl.ok("get", "--raw", "/api/v1"))["resources"]
    assert "pods/proxy" in {r["name"] for r in resources}
