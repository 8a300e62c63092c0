"""ASGI apps the server tests start in real processes (imported by module:attr)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from drainsafe.asgi import DrainMiddleware
from drainsafe.server.types import Receive, Scope, Send
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


_seen = {"requests": 0}


async def catch_all(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers every path and method itself (a catch-all route, an SPA fallback, a proxying
    app): `app: METHOD PATH #N`, N counting the requests it has received. `GET /count`
    answers the count so far without counting itself."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/count":
        body = b"%d" % _seen["requests"]
    else:
        _seen["requests"] += 1
        body = b"app: %s %s #%d" % (scope["method"].encode(), scope["path"].encode(),
                                    _seen["requests"])
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


def _metrics_app(page: bytes, ctype: bytes) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = page if scope["path"] == "/metrics" else b"ok"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", ctype)]})
        await send({"type": "http.response.body", "body": body})
    return app


html_metrics = _metrics_app(b"<html><body>metrics are elsewhere</body></html>", b"text/html")
json_metrics = _metrics_app(b'{"num_requests_running": 0}', b"application/json")
nan_metrics = _metrics_app(b"# TYPE in_flight gauge\nin_flight NaN\n", b"text/plain")
inf_metrics = _metrics_app(b"# TYPE in_flight gauge\nin_flight +Inf\n", b"text/plain")
"""Children whose metrics page does not give signal mode a usable in-flight figure."""


async def slow_start(scope: Scope, receive: Receive, send: Send) -> None:
    """An app whose lifespan start-up takes 1.5 s (a model load), then answers `ready`."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await asyncio.sleep(1.5)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ready"})


wrapped_slow_start = DrainMiddleware(slow_start, drain_delay=0.5, shutdown_timeout=1.0)
"""slow_start in the middleware: its readiness must wait for the start-up too."""
