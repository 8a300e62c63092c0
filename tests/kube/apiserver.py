"""A tiny scripted API server for the kube layer's own tests (real HTTP, real client).

It is not the lab: it serves one pods collection with a resourceVersion counter and lets a
test script faults (410 on watch, dropped streams, silent streams, 401s) to prove the
client and watch loop handle them. The lab's control plane covers real semantics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class FakeApi:
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    rv: int = 100
    events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    oldest_rv: int = 0  # watches from below this get a 410 ERROR event
    token: str | None = None  # required bearer token, if set
    seen_tokens: list[str] = field(default_factory=list)
    drop_next_watch_after: int | None = None  # close the stream after N events
    silent_watch: bool = False  # send nothing, keep the stream open
    requests: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def put(self, name: str, labels: dict[str, str] | None = None, kind: str = "MODIFIED") -> None:
        self.rv += 1
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(self.rv),
                         "labels": labels or {}},
        }
        if name not in self.objects:
            kind = "ADDED"
        self.objects[name] = obj
        self.events.append((self.rv, kind, obj))
        self.changed.set()

    def delete(self, name: str) -> None:
        self.rv += 1
        obj = self.objects.pop(name)
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        self.events.append((self.rv, "DELETED", obj))
        self.changed.set()

    def app(self) -> Starlette:
        async def pods(request: Request) -> Response:
            self.requests.append(f"{request.method} {request.url.path}?{request.url.query}")
            auth = request.headers.get("authorization", "")
            self.seen_tokens.append(auth)
            if self.token is not None and auth != f"Bearer {self.token}":
                return JSONResponse(
                    {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                     "reason": "Unauthorized", "message": "Unauthorized", "code": 401},
                    status_code=401,
                )
            if request.query_params.get("watch") == "true":
                return self._watch(int(request.query_params.get("resourceVersion") or 0))
            return JSONResponse(
                {"kind": "PodList", "apiVersion": "v1",
                 "metadata": {"resourceVersion": str(self.rv)},
                 "items": list(self.objects.values())}
            )

        return Starlette(routes=[Route("/api/v1/pods", pods)])

    def _watch(self, since: int) -> Response:
        silent = self.silent_watch  # decided when the request arrives

        async def body() -> AsyncIterator[bytes]:
            if since < self.oldest_rv:
                yield (json.dumps({"type": "ERROR", "object": {
                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": f"too old resource version: {since} ({self.oldest_rv})",
                    "reason": "Expired", "code": 410}}) + "\n").encode()
                return
            if silent:
                await asyncio.sleep(3600)
            sent = 0
            cursor = since
            while True:
                pending = [e for e in self.events if e[0] > cursor]
                for rv, kind, obj in pending:
                    drop = self.drop_next_watch_after
                    if drop is not None and sent >= drop:
                        self.drop_next_watch_after = None
                        return  # the connection drops with events still unsent
                    yield (json.dumps({"type": kind, "object": obj}) + "\n").encode()
                    cursor = rv
                    sent += 1
                self.changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self.changed.wait()

        return StreamingResponse(body(), media_type="application/json")


@contextlib.asynccontextmanager
async def serve(api: FakeApi) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(api.app(), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.force_exit = True
        with contextlib.suppress(Exception):
            async with asyncio.timeout(10):
                await task
        sock.close()


def kubeconfig(server: str, user: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "me", "user": user}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}],
    }
