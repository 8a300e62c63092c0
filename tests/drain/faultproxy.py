"""A fault-injecting HTTP proxy in front of the lab's API server (real client, real server).

The drainer talks plain HTTP to the proxy; the proxy forwards to the lab's HTTPS API server
(its CA, the client's own bearer token) and, where a test's rule matches, answers with an
error instead, forwards and then lies about the outcome, hangs, drops a watch stream, or
answers a watch with "410 Expired". Every request and what happened to it is logged, so a
test can assert what reached the server: no pod DELETE, and each pod's eviction accepted by
the server exactly once.

"Evicted twice" is counted on what the API server *accepted*, not on POSTs: a 429 (budget
or rate limit) or a refusal evicts nothing, and retrying it is what the Eviction API asks
of a client (kubectl pkg/drain/drain.go evictPods retries 429s; Karpenter's
terminator/eviction.go requeues them). A second eviction sent for a pod already
terminating would be accepted (the registry deletes terminating pods without a budget
check: pkg/registry/core/pod/storage/eviction.go canIgnorePDB), so it shows up as a second
acceptance; `evictions_after_accepted` also catches any POST for a pod after its accepted
one, whatever the server answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


def status_body(code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None,
                retry_after: int | None = None) -> bytes:
    details: dict[str, Any] = {}
    if causes:
        details["causes"] = causes
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": message, "reason": reason,
                            "code": code}
    if details:
        body["details"] = details
    return json.dumps(body).encode()


BUDGET_429 = status_body(
    429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
    [{"reason": "DisruptionBudget",
      "message": "The disruption budget llm needs 2 healthy pods and has 2 currently"}])
MULTI_PDB_500 = status_body(
    500, "", "This pod has more than one PodDisruptionBudget, which the eviction subresource "
    "does not support.")


@dataclass
class Fault:
    """Applies to the first `times` requests matching method + path regex (+ query part)."""

    method: str
    path: str  # regex, searched in the path
    action: str  # respond | forward_then | hang | drop_watch | expire_watch
    times: int = 1
    status: int = 500
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    query: str = ""  # substring of the raw query, e.g. "watch=true"
    after_lines: int = 1  # drop_watch: lines passed before the stream is cut
    hold: float = 3600.0  # hang: how long the answer is held back
    used: int = 0

    def matches(self, method: str, path: str, query: str) -> bool:
        return (self.used < self.times and method == self.method
                and re.search(self.path, path) is not None and self.query in query)


@dataclass
class Logged:
    method: str
    path: str
    query: str
    outcome: str  # "upstream 201", "injected 429", "forward_then 500 (upstream 201)", ...
    upstream_status: int | None = None
    body: bytes = b""  # what the API server answered (non-watch requests)
    at: float = field(default_factory=time.monotonic)

    @property
    def is_eviction(self) -> bool:
        return self.method == "POST" and self.path.endswith("/eviction")

    @property
    def accepted(self) -> bool:
        """The API server evicted the pod: 2xx with a Success Status. (The multi-PDB
        refusal comes as 201 with a Failure Status, so the code alone does not say.)"""
        if self.upstream_status is None or not 200 <= self.upstream_status < 300:
            return False
        try:
            doc = json.loads(self.body)
        except ValueError:
            return False
        return isinstance(doc, dict) and doc.get("status") == "Success"


class FaultProxy:
    def __init__(self, upstream: str, ca: str) -> None:
        self.upstream = upstream
        self.ca = ca
        self.faults: list[Fault] = []
        self.log: list[Logged] = []
        self._client: httpx.AsyncClient | None = None
        self.url = ""

    def add(self, *faults: Fault) -> None:
        self.faults.extend(faults)

    def _fault(self, method: str, path: str, query: str) -> Fault | None:
        for f in self.faults:
            if f.matches(method, path, query):
                f.used += 1
                return f
        return None

    def evictions_accepted(self) -> dict[str, int]:
        """Evictions the API server accepted, per pod name."""
        out: dict[str, int] = {}
        for e in self.log:
            if e.is_eviction and e.accepted:
                out[_pod_of(e.path)] = out.get(_pod_of(e.path), 0) + 1
        return out

    def evictions_after_accepted(self) -> list[Logged]:
        """Eviction POSTs for a pod whose eviction the server had already accepted."""
        done: set[str] = set()
        out: list[Logged] = []
        for e in sorted((e for e in self.log if e.is_eviction), key=lambda e: e.at):
            if _pod_of(e.path) in done:
                out.append(e)
            if e.accepted:
                done.add(_pod_of(e.path))
        return out

    def eviction_log(self) -> list[str]:
        """Every eviction POST, for assertion messages: when, which pod, what happened."""
        t0 = self.log[0].at if self.log else 0.0
        return [f"{e.at - t0:7.2f}s {_pod_of(e.path)}: {e.outcome} {e.body[:160]!r}"
                for e in sorted(self.log, key=lambda e: e.at) if e.is_eviction]

    def deletes(self) -> list[Logged]:
        return [e for e in self.log if e.method == "DELETE"]

    async def handle(self, request: Request) -> Response:
        assert self._client is not None
        path = request.url.path
        query = request.url.query
        method = request.method
        fault = self._fault(method, path, query)
        if fault is not None and fault.action == "respond":
            self.log.append(Logged(method, path, query, f"injected {fault.status}"))
            return Response(fault.body, status_code=fault.status, headers={
                "content-type": "application/json", **fault.headers})
        if fault is not None and fault.action == "expire_watch":
            self.log.append(Logged(method, path, query, "injected 410 event"))
            event = {"type": "ERROR", "object": json.loads(status_body(
                410, "Expired", "too old resource version: 1 (2)"))}
            return Response(json.dumps(event).encode() + b"\n",
                            media_type="application/json")
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("authorization", "content-type", "accept")}
        body = await request.body()
        upstream = self._client.build_request(method, self.upstream + path, params=query,
                                              content=body or None, headers=headers)
        resp = await self._client.send(upstream, stream=True)
        if "watch=true" in query:
            entry = Logged(method, path, query, f"upstream {resp.status_code}",
                           resp.status_code)
            self.log.append(entry)
            cut = fault.after_lines if fault is not None and fault.action == "drop_watch" else None
            if cut is not None:
                entry.outcome += f" (cut after {cut} lines)"
            return StreamingResponse(self._relay(resp, cut), status_code=resp.status_code,
                                     media_type="application/json")
        content = await resp.aread()
        await resp.aclose()
        if fault is not None and fault.action == "forward_then":
            self.log.append(Logged(method, path, query,
                                   f"forward_then {fault.status} (upstream {resp.status_code})",
                                   resp.status_code, content))
            return Response(fault.body, status_code=fault.status,
                            headers={"content-type": "application/json"})
        if fault is not None and fault.action == "hang":
            self.log.append(Logged(method, path, query,
                                   f"hang (upstream {resp.status_code})", resp.status_code,
                                   content))
            await asyncio.sleep(fault.hold)
        self.log.append(Logged(method, path, query, f"upstream {resp.status_code}",
                               resp.status_code, content))
        return Response(content, status_code=resp.status_code,
                        headers={k: v for k, v in resp.headers.items()
                                 if k.lower() in ("content-type", "retry-after")})

    async def _relay(self, resp: httpx.Response, cut: int | None) -> AsyncIterator[bytes]:
        sent = 0
        try:
            async for line in resp.aiter_lines():
                if cut is not None and sent >= cut:
                    return
                yield line.encode() + b"\n"
                sent += 1
        except httpx.HTTPError:
            return
        finally:
            await resp.aclose()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FaultProxy]:
        self._client = httpx.AsyncClient(verify=ssl.create_default_context(cafile=self.ca),
                                         timeout=httpx.Timeout(30, read=None))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        app = Starlette(routes=[Route("/{path:path}", self.handle,
                                     methods=["GET", "POST", "PATCH", "PUT", "DELETE"])])
        server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            for _ in range(500):
                if server.started:
                    break
                await asyncio.sleep(0.01)
            yield self
        finally:
            server.should_exit = True
            server.force_exit = True
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await task
            sock.close()
            await self._client.aclose()

    def kubeconfig(self, lab_kubeconfig: Path, out: Path) -> Path:
        """The lab's kubeconfig with the server swapped for the proxy."""
        doc = yaml.safe_load(lab_kubeconfig.read_text())
        for c in doc["clusters"]:
            c["cluster"] = {"server": self.url}
        out.write_text(yaml.safe_dump(doc))
        return out


def _pod_of(path: str) -> str:
    """"/api/v1/namespaces/ns/pods/name/eviction" -> "ns/name"."""
    parts = path.rstrip("/").split("/")
    return f"{parts[-4]}/{parts[-2]}"


def lab_upstream(lab_kubeconfig: Path) -> tuple[str, str]:
    doc = yaml.safe_load(lab_kubeconfig.read_text())
    cluster = doc["clusters"][0]["cluster"]
    return cluster["server"], cluster["certificate-authority"]


def in_front_of(lab_kubeconfig: Path) -> FaultProxy:
    """A proxy (not yet running) for the lab API server that `lab_kubeconfig` names."""
    return FaultProxy(*lab_upstream(lab_kubeconfig))
