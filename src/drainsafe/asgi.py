"""Drain-aware ASGI middleware, for apps under `drainsafe serve` or a uvicorn you start.

    from drainsafe.asgi import DrainMiddleware
    app = DrainMiddleware(app, drain_delay=5, shutdown_timeout=60)   # then: uvicorn mod:app

What it adds to any ASGI app (FastAPI, Starlette, raw):
- readiness (default /readyz) answers 503 as soon as the drain begins, liveness (/livez)
  stays 200; a drain endpoint (/drainsafe/drain) for a preStop httpGet; Prometheus metrics
  (/metrics). The app's own routes always win: these paths answer only where the app says
  404.
- while draining, every response carries `Connection: close`, which uvicorn honours by
  closing the connection after the response (uvicorn protocols/http/httptools_impl.py and
  h11_impl.py, "connection: close" handling in send), so pooled keep-alive connections
  retire instead of being reset later;
- requests still running at the shutdown deadline are ended on purpose: an SSE stream gets
  drainsafe.marker's error event and no [DONE]; another started body is aborted without its
  terminating chunk (clients report an incomplete body); an unanswered request gets 503.
- every response of the app names the pod (`x-drainsafe-pod`, from env POD_NAME or else
  HOSTNAME; no header when neither is set), and its duration goes into the
  `drainsafe_request_duration_seconds` histogram, both for drainsafe verify/tune.

Under plain uvicorn (lifespan on, the default), the middleware takes over SIGTERM/SIGINT at
lifespan start-up and hands uvicorn its own signal only when the drain delay is over, so
uvicorn closes its listener then rather than at once (uvicorn 0.29+ installs its handlers
before lifespan start-up: uvicorn/server.py `serve` -> `capture_signals` -> `_serve`).
A second signal is handed to uvicorn as SIGINT, which uvicorn treats as force exit.
Under `drainsafe serve` only the endpoints come from here: the server owns the signals and
reads in-flight work from uvicorn's own request cycles (drainsafe.server.serve), which costs
nothing per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from types import FrameType
from typing import Any

from drainsafe.marker import sse_error_event
from drainsafe.server.lifecycle import Phase, Settings
from drainsafe.server.runtime import DrainRuntime, Paths, Tracked

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("drainsafe.server")

_CLOSE = (b"connection", b"close")
_current_task = asyncio.current_task


class StreamCut(Exception):
    """Raised to make the server abort a started non-SSE body at the deadline."""


class AsgiRequest(Tracked):
    """A request running in an ASGI task; cutting it cancels that task.

    Its bound `send` wraps the server's send: it notes the response start and end and adds
    `Connection: close` while draining. The hot path avoids per-request closures and
    calls: it is what `drainsafe serve` costs over bare uvicorn.
    """

    __slots__ = ("_send", "headers", "rt", "t0", "task")

    def __init__(self, task: asyncio.Task[Any] | None, send: Send, rt: DrainRuntime) -> None:
        self.task = task
        self._send = send
        self.rt = rt
        self.t0 = rt.clock()
        self.started = False
        self.complete = False
        self.was_cut = False
        self.headers: list[tuple[bytes, bytes]] | None = None

    def send(self, message: Message) -> Awaitable[None]:
        if message["type"] == "http.response.start":
            self.started = True
            headers = self.headers = message.get("headers") or []
            rt = self.rt
            pod = rt.pod_header
            if pod is not None or not rt.serving:
                message = dict(message)
                extra = [_CLOSE] if not rt.serving else []
                message["headers"] = [*headers, *extra] if pod is None \
                    else [*headers, pod, *extra]
        elif not message.get("more_body", False) and not self.complete:
            self.complete = True
            rt = self.rt
            rt.durations.observe(rt.clock() - self.t0)
        return self._send(message)

    @property
    def stream(self) -> bool:
        if not self.started or self.headers is None:
            return False
        return not any(k.lower() == b"content-length" for k, _ in self.headers)

    @property
    def sse(self) -> bool:
        return any(k.lower() == b"content-type" and v.lower().startswith(b"text/event-stream")
                   for k, v in self.headers or ())

    def cut(self) -> None:
        self.was_cut = True
        if self.task is not None:
            self.task.cancel()


class DrainMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        drain_delay: float = 5.0,
        shutdown_timeout: float = 20.0,
        runtime: DrainRuntime | None = None,
        paths: Paths | None = None,
        hook_signals: bool = True,
    ) -> None:
        self.app = app
        self.runtime = runtime or DrainRuntime(
            Settings(drain_delay=drain_delay, shutdown_timeout=shutdown_timeout), paths=paths)
        self.hook_signals = hook_signals
        self._hooks: _UvicornSignalHooks | None = None
        self._warned_shadow: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan" and self.hook_signals and self._hooks is None:
                self._hooks = _UvicornSignalHooks.install(self.runtime)
            await self.app(scope, receive, send)
            return
        rt = self.runtime
        if scope["path"] in rt.own_paths:
            await self._own_or_app(scope, receive, send)
            return
        req = AsgiRequest(_current_task(), send, rt)
        rt.track(req)
        try:
            await self.app(scope, receive, req.send)
        except asyncio.CancelledError:
            task = req.task
            if not req.was_cut or task is None:
                raise
            task.uncancel()
            await _end_cut(req, send)
        finally:
            rt.open.discard(req)

    async def _own_or_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Let the app answer first; answer the runtime's endpoint only where it says 404."""
        app_said_404 = False

        async def probe_send(message: Message) -> None:
            nonlocal app_said_404
            if message["type"] == "http.response.start" and message["status"] == 404:
                app_said_404 = True
            if not app_said_404:
                await send(message)

        await self.app(scope, receive, probe_send)
        if app_said_404:
            await answer_own_endpoint(self.runtime, scope["path"], scope.get("query_string", b""),
                                      send)
        elif scope["path"] not in self._warned_shadow:
            self._warned_shadow.add(scope["path"])
            logger.warning("drainsafe: the app serves %s itself; drainsafe's endpoint there is "
                           "not used (choose another path)", scope["path"])


async def _end_cut(req: AsgiRequest, send: Send) -> None:
    if not req.started:
        headers = [(b"content-type", b"application/json"), _CLOSE, (b"retry-after", b"1")]
        if req.rt.pod_header is not None:
            headers.append(req.rt.pod_header)
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body",
                    "body": b'{"error":"server shut down before answering"}'})
    elif req.sse and req.stream:
        await send({"type": "http.response.body", "body": sse_error_event(),
                    "more_body": False})
    else:
        raise StreamCut("response body ended by the shutdown deadline")


async def answer_own_endpoint(rt: DrainRuntime, path: str, query: bytes, send: Send) -> None:
    """Readiness, liveness, drain and metrics answers (shared by the middleware and run)."""
    status, ctype, body = await own_endpoint_response(rt, path, query)
    headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode()),
               (b"cache-control", b"no-store")]
    if not rt.serving:
        headers.append(_CLOSE)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def own_endpoint_response(
    rt: DrainRuntime, path: str, query: bytes, *,
    ready_check: Callable[[], Awaitable[bool]] | None = None,
) -> tuple[int, bytes, bytes]:
    """(status, content type, body) of a runtime endpoint; `ready_check` adds a condition
    to readiness (drainsafe run: the child's own readiness)."""
    paths = rt.paths
    if path == paths.ready:
        ok = rt.serving and (ready_check is None or await ready_check())
        return (200 if ok else 503, b"application/json",
                json.dumps({"ready": ok, "phase": rt.phase.value}).encode())
    if path == paths.live:
        return 200, b"application/json", json.dumps({"live": True,
                                                     "phase": rt.phase.value}).encode()
    if path == paths.drain:
        rt.request_drain("drain endpoint")
        # Like a preStop sleep: answer when the drain delay is over, so the kubelet's
        # SIGTERM arrives when closing is due anyway (?wait=0 answers at once).
        if b"wait=0" not in query:
            await rt.wait_phase(Phase.CLOSING, Phase.EXIT,
                                timeout=rt.settings.drain_delay + 1.0)
        return 200, b"application/json", json.dumps({"phase": rt.phase.value,
                                                     **rt.figures()}).encode()
    if path == paths.metrics:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return 200, CONTENT_TYPE_LATEST.encode(), generate_latest(rt.registry())
    return 404, b"application/json", b'{"error":"not found"}'


class _UvicornSignalHooks:
    """Hold uvicorn's own SIGTERM/SIGINT handler until the drain delay is over."""

    def __init__(self, runtime: DrainRuntime, loop: asyncio.AbstractEventLoop,
                 previous: dict[int, Any]) -> None:
        self.runtime = runtime
        self.loop = loop
        self.previous = previous
        self.forwarded = False
        self.ticker: asyncio.Task[None] | None = None

    @classmethod
    def install(cls, runtime: DrainRuntime) -> _UvicornSignalHooks | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        loop = asyncio.get_running_loop()
        hooks = cls(runtime, loop, {})
        for sig in (signal.SIGTERM, signal.SIGINT):
            hooks.previous[sig] = signal.getsignal(sig)
            signal.signal(sig, hooks._handler)
        return hooks

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.loop.call_soon_threadsafe(self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        self.runtime.signal(signal.Signals(signum).name)
        if self.runtime.state.forced:
            self._forward(signal.SIGTERM)
            self._forward(signal.SIGINT)  # uvicorn: SIGINT while exiting = force exit
            self.runtime.cut_all()
        elif self.ticker is None:
            self.ticker = self.loop.create_task(self._tick())

    async def _tick(self) -> None:
        rt = self.runtime
        while rt.phase is not Phase.EXIT:
            rt.tick()
            if rt.phase is not Phase.SERVING and rt.phase is not Phase.DRAINING \
                    and not self.forwarded:
                self._forward(signal.SIGTERM)
            await asyncio.sleep(0.05)

    def _forward(self, sig: int) -> None:
        if sig == signal.SIGTERM:
            if self.forwarded:
                return
            self.forwarded = True
        previous = self.previous.get(sig)
        if callable(previous):
            previous(sig, None)
        elif previous == signal.SIG_DFL:
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)
