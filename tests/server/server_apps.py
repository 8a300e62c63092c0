"""ASGI apps the server tests start in real processes (imported by module:attr)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from drainsafe.asgi import DrainMiddleware
from drainsafe.workload.streaming import app as workload


async def _ready(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the app's own readiness")


own_readyz = Starlette(routes=[Route("/readyz", _ready)])
"""An app with its own /readyz: drainsafe must not shadow it."""

wrapped = DrainMiddleware(workload, drain_delay=1.0, shutdown_timeout=1.0)
"""The workload with the middleware, for a uvicorn the user starts."""
