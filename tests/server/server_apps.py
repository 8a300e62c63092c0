"""ASGI apps the server tests start in real processes (imported by module:attr)."""

from __future__ import annotations

import asyncio

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from drainsafe.asgi import DrainMiddleware, Receive, Scope, Send
from drainsafe.workload.streaming import app as workload


async def _ready(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the app's own readiness")


own_readyz = Starlette(routes=[Route("/readyz", _ready)])
"""An app with its own /readyz: drainsafe must not shadow it."""


async def _slow_ready(request: Request) -> PlainTextResponse:
    await asyncio.sleep(0.6)
    return PlainTextResponse("the app's own, slow readiness")


slow_own_readyz = Starlette(routes=[Route("/readyz", _slow_ready)])
"""An app whose own /readyz takes 0.6 s: its requests are the app's work, timed as such."""

wrapped = DrainMiddleware(workload, drain_delay=1.0, shutdown_timeout=1.0)
"""The workload with the middleware, for a uvicorn the user starts."""


async def ndjson(scope: Scope, receive: Receive, send: Send) -> None:
    """A chunked, non-SSE stream: one JSON line every 0.1 s for 6 s."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/x-ndjson")]})

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(gone())
    try:
        for i in range(60):
            if watcher.done():
                return
            await send({"type": "http.response.body", "body": b'{"i": %d}\n' % i,
                        "more_body": True})
            await asyncio.sleep(0.1)
        await send({"type": "http.response.body", "body": b""})
    finally:
        watcher.cancel()
