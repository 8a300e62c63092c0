"""Drain-aware ASGI middleware, for apps under `drainsafe serve` or a uvicorn you start.

    from drainsafe.asgi import DrainMiddleware
    app = DrainMiddleware(app, drain_delay=5, shutdown_timeout=60)   # then: uvicorn mod:app

What it adds to any ASGI app (FastAPI, Starlette, raw):
- an admin port (drainsafe.server.admin; default 0.0.0.0:8490, or env
  DRAINSAFE_ADMIN_HOST / DRAINSAFE_ADMIN_PORT / DRAINSAFE_ADMIN_TOKEN_FILE, or the
  arguments) with readiness (/readyz: 503 as soon as the drain begins), liveness (/livez),
  the drain trigger for a preStop httpGet (/drainsafe/drain) and Prometheus metrics
  (/metrics). It opens at lifespan start-up (uvicorn's default `--lifespan auto` sends it).
  Nothing is added to the app's own port or paths.
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
A drain started on the admin port (the preStop hook) ends the same way: when the drain
delay is over uvicorn gets its SIGTERM and stops, as it would after the kubelet's signal;
where the middleware could not take uvicorn's handlers (not on the main thread), liveness
answers 503 once the drain delay and the deadline are over, so the kubelet restarts the
container instead of keeping a pod that never serves again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Awaitable
from types import FrameType
from typing import Any

from drainsafe.marker import sse_error_event
from drainsafe.server.admin import AdminServer
from drainsafe.server.config import (
    DEFAULT_DRAIN_DELAY,
    DEFAULT_SHUTDOWN_TIMEOUT,
    AdminSettings,
    Paths,
    Settings,
    admin_settings_from_env,
)
from drainsafe.server.lifecycle import Phase
from drainsafe.server.runtime import DrainRuntime, Tracked
from drainsafe.server.types import ASGIApp, Message, Receive, Scope, Send

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
        drain_delay: float = DEFAULT_DRAIN_DELAY,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        runtime: DrainRuntime | None = None,
        paths: Paths | None = None,
        hook_signals: bool = True,
        admin: AdminSettings | None = None,
    ) -> None:
        self.app = app
        self.runtime = runtime or DrainRuntime(
            Settings(drain_delay=drain_delay, shutdown_timeout=shutdown_timeout), paths=paths)
        self.hook_signals = hook_signals
        self.admin_settings = admin
        self.admin: AdminServer | None = None
        self._hooks: _UvicornSignalHooks | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._app_started = False
        self.runtime.on_phase(self._phase_changed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan" and self.admin is None:
                await self._start(scope)
                await self._lifespan(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        rt = self.runtime
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

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app's lifespan; readiness waits for its start-up (a model load) to complete.
        An app that returns or fails instead is started as far as uvicorn's `--lifespan
        auto` is concerned (it serves on), so readiness no longer waits then either."""

        async def noting_send(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                self._app_started = True
            await send(message)

        try:
            await self.app(scope, receive, noting_send)
        finally:
            self._app_started = True

    async def _ready(self) -> bool:
        return self._app_started

    async def _start(self, scope: Scope) -> None:
        """At lifespan start-up: the admin port, and uvicorn's signals."""
        settings = self.admin_settings or admin_settings_from_env(os.environ)
        self.admin = AdminServer(self.runtime, settings, ready_check=self._ready)
        try:
            await self.admin.start()
        except OSError as exc:
            # uvicorn's `--lifespan auto` only logs a failed start-up at INFO and serves
            # on: say it loudly (the probes then fail, so the pod never turns ready).
            logger.error("drainsafe: cannot listen on the admin port %s:%d: %s",
                         settings.host, settings.port, exc)
            raise
        if self.hook_signals and self._hooks is None:
            self._hooks = _UvicornSignalHooks.install(self.runtime)

    def _phase_changed(self, phase: Phase) -> None:
        # The drain may start from a signal or from the admin port: either way the
        # lifecycle must move on (and uvicorn get its SIGTERM) when the delay is over.
        if phase is not Phase.SERVING and self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        rt = self.runtime
        while rt.phase is not Phase.EXIT:
            rt.tick()
            if rt.phase is not Phase.SERVING and rt.phase is not Phase.DRAINING \
                    and self._hooks is not None:
                self._hooks.forward(signal.SIGTERM)
            await asyncio.sleep(0.05)


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


class _UvicornSignalHooks:
    """Hold uvicorn's own SIGTERM/SIGINT handler until the drain delay is over."""

    def __init__(self, runtime: DrainRuntime, loop: asyncio.AbstractEventLoop,
                 previous: dict[int, Any]) -> None:
        self.runtime = runtime
        self.loop = loop
        self.previous = previous
        self.forwarded = False

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
            self.forward(signal.SIGTERM)
            self.forward(signal.SIGINT)  # uvicorn: SIGINT while exiting = force exit
            self.runtime.cut_all()

    def forward(self, sig: int) -> None:
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
