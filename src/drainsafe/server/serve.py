"""`drainsafe serve MODULE:APP`: an ASGI app on real uvicorn, with drainsafe owning shutdown.

uvicorn's own shutdown closes the listener on the first 0.1 s tick after SIGTERM, closes
idle keep-alive connections in the same instant, then waits without bound (uvicorn
server.py `handle_exit`, `shutdown`; see shared/research/server-shutdown.md §1). `DrainServer`
subclasses `uvicorn.Server` and replaces exactly those parts:

- `capture_signals`: SIGTERM/SIGINT go to the drain runtime (first: drain; second: force),
  and are not re-raised at exit (uvicorn 0.29+ re-raises them, which would turn a clean
  drain into death by signal);
- `on_tick`: keeps serving through DRAINING, returns True at CLOSING;
- `shutdown`: closes the listener, closes each idle connection once it has been idle for
  `idle_grace` (a request already on its way is still answered, with Connection: close),
  lets in-flight work run to the deadline, ends what remains with the marker, then runs
  the lifespan shutdown.

Little is added per request on the hot path. In-flight work is read from uvicorn's own
request cycles (`server_state.connections[*].cycle`) on the runtime's 0.1 s tick, and
requests are counted and timed on those same looks (drainsafe.server.ticktimer). uvicorn
calls the app itself, with no wrapper: `DrainCycle`, a subclass of the httptools
protocol's `RequestResponseCycle` installed in this process, notes each response's headers
(the cut must know an SSE stream). Once the drain begins, new requests get a
`ClosingCycle` instead, whose `keep_alive` is off, which makes uvicorn write
`Connection: close` and close after the response (httptools_impl.py `send`); nothing of
that is paid per request before. The application's port carries the application's traffic
only: readiness, liveness, the drain trigger and metrics are on the admin port
(drainsafe.server.admin), so no path of the app's is looked at, shadowed or answered.
That keeps `drainsafe serve` within a few percent of bare uvicorn on a trivial endpoint
(docs/server.md).

The pod header is one of uvicorn's own default headers (`Config(headers=...)`, written on
every response).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import sys
import threading
from collections.abc import Coroutine, Generator
from typing import Any

import uvicorn
import uvicorn.protocols.http.httptools_impl as httptools_impl

from drainsafe.marker import sse_error_event
from drainsafe.server.admin import AdminServer
from drainsafe.server.config import AdminSettings
from drainsafe.server.lifecycle import Phase, idle_grace_over
from drainsafe.server.runtime import POD_HEADER, DrainRuntime
from drainsafe.server.ticktimer import Outcome, TickTimer
from drainsafe.server.types import ASGIApp
from drainsafe.shell import EXIT_FAILED

POLL = 0.05
logger = logging.getLogger("drainsafe.server")


_BaseCycle = httptools_impl.RequestResponseCycle
_base_send = _BaseCycle.send


def cycle_classes(runtime: DrainRuntime) -> tuple[type[Any], type[Any]]:
    """uvicorn's request cycle, subclassed for `runtime`: (serving, closing).

    The serving cycle notes each response's headers (the cut needs to know an SSE stream);
    uvicorn calls the app itself, with no wrapper in between. The closing one is for
    requests that arrive once the drain began: they count as late, and their response says
    `Connection: close`, after which uvicorn closes the connection (httptools_impl.py
    `send`), so a pooled connection retires."""

    class DrainCycle(_BaseCycle):
        drain_headers: list[tuple[bytes, bytes]] | None = None

        # A plain function returning a coroutine: no second coroutine per message.
        def send(self, message: Any) -> Coroutine[Any, Any, None]:
            if not self.response_started:
                self.drain_headers = message.get("headers")
            return _base_send(self, message)

    class ClosingCycle(DrainCycle):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.keep_alive = False
            runtime.note_late()

    return DrainCycle, ClosingCycle


def install_cycle(cycle: type[Any]) -> None:
    """Make uvicorn's httptools protocol build `cycle`s (this process only)."""
    httptools_impl.RequestResponseCycle = cycle  # type: ignore[misc]


def cycle_outcome(cycle: Any) -> Outcome:
    """Where a uvicorn request cycle stands (for the tick timer)."""
    if cycle.disconnected:  # the client left, or the cut ended it (`DrainServer._cut`)
        return Outcome.LOST
    return Outcome.ANSWERED if cycle.response_complete else Outcome.RUNNING


class DrainServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, runtime: DrainRuntime,
                 timer: TickTimer[Any], admin: AdminSettings | None = None) -> None:
        super().__init__(config)
        self.runtime = runtime
        # Ready once uvicorn has run the app's lifespan start-up and listens.
        self.admin = AdminServer(runtime, admin or AdminSettings(), ready_check=self._started)
        self._timer = timer
        runtime.durations.help = (
            "Seconds from request received to response sent in full; an upper bound, "
            "taken on drainsafe serve's 0.1 s tick")
        runtime.refresh = self._look
        self._serving_cycle, self._closing_cycle = cycle_classes(runtime)
        install_cycle(self._serving_cycle)
        self._unanswered = unanswered_response(runtime.pod_header)
        runtime.probe = self._probe
        runtime.cutter = self._cut
        runtime.on_phase(self._phase_changed)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()
        sigs = (signal.SIGTERM, signal.SIGINT)
        for sig in sigs:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            yield
        finally:
            for sig in sigs:
                loop.remove_signal_handler(sig)

    async def _started(self) -> bool:
        return self.started

    def _on_signal(self, sig: signal.Signals) -> None:
        self.runtime.signal(sig.name)
        if self.runtime.state.forced:
            self.should_exit = True
            self.force_exit = True

    def _phase_changed(self, phase: Phase) -> None:
        if phase is Phase.SERVING or httptools_impl.RequestResponseCycle is self._closing_cycle:
            return  # once, when the lifecycle leaves SERVING
        # From now on requests get ClosingCycles; those already received whose response
        # has not started will say Connection: close too. Nothing changes per request
        # before the drain.
        install_cycle(self._closing_cycle)
        for conn in list(self.server_state.connections):
            cycles = [getattr(conn, "cycle", None),
                      *(c for c, _ in getattr(conn, "pipeline", ()))]
            for cycle in cycles:
                if cycle is not None and not cycle.response_started:
                    cycle.keep_alive = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # The admin port first: the kubelet's probes and the preStop hook go there.
        try:
            await self.admin.start()
        except OSError as exc:
            logger.error("drainsafe serve: cannot listen on the admin port %s:%d: %s",
                         self.admin.settings.host, self.admin.settings.port, exc)
            sys.exit(EXIT_FAILED)
        await super().startup(sockets)
        self._timer.last_look = self.runtime.clock()  # as the listener opens

    def _look(self) -> list[Any]:
        """uvicorn's request cycles with a response still owed to a connected client. Every look
        also counts and times the requests answered since the last one
        (drainsafe.server.ticktimer)."""
        found: dict[Any, None] = {}  # ordered, for the cut: a connection's oldest first
        pipelined = False
        for conn in list(self.server_state.connections):
            queued = getattr(conn, "pipeline", None)
            if queued:
                # Requests read behind one still running: `conn.cycle` is the newest, the
                # running one is out of its view (httptools_impl.py on_headers_complete).
                pipelined = True
                found.update((cycle, None) for cycle, _ in reversed(queued))
            cycle = getattr(conn, "cycle", None)
            if cycle is not None:
                found[cycle] = None
        if pipelined:
            running = (_task_cycle(task) for task in list(self.server_state.tasks))
            found = {**{c: None for c in running if c is not None}, **found}
        cycles = [c for c in found if not c.response_complete and not c.disconnected]
        self._timer.look(self.runtime.clock(), set(cycles), self.server_state.total_requests)
        self.runtime.requests_total = self._timer.received
        return cycles

    def _probe(self) -> tuple[int, int]:
        cycles = self._look()
        streams = sum(1 for c in cycles if c.response_started and c.chunked_encoding)
        return len(cycles), streams

    def _cut(self) -> int:
        """End every open response on purpose (see drainsafe.marker); returns how many."""
        cycles = self._look()
        for cycle in cycles:
            transport = cycle.transport
            if transport.is_closing():
                pass  # a request queued behind one just ended: its connection is closing
            elif not cycle.response_started:
                transport.write(self._unanswered)
            elif cycle.chunked_encoding and _is_sse(getattr(cycle, "drain_headers", None)):
                event = sse_error_event()
                transport.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
            # Any other started body ends without its terminating chunk: an incomplete body.
            cycle.response_complete = cycle.response_started = True
            cycle.disconnected = True  # the app's further sends are dropped by uvicorn
            cycle.message_event.set()  # and its receive() answers http.disconnect
            transport.close()
        return len(cycles)

    async def on_tick(self, counter: int) -> bool:
        stop = await super().on_tick(counter)
        self.runtime.tick()
        return stop or self.runtime.phase in (Phase.CLOSING, Phase.EXIT)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        rt = self.runtime
        if rt.phase is Phase.SERVING:
            # Stopped for another reason (e.g. --limit-max-requests): drain all the same.
            rt.request_drain("server stop")
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        idle_since: dict[Any, float] = {}
        while True:
            rt.tick()
            now = rt.clock()
            # Past the deadline (or forced) nothing waits any more; before it, even after the
            # last request finished, a connection that just went idle keeps its idle grace:
            # the client may already be sending its next request on it.
            deadline = rt.state.deadline(rt.settings)
            hard_stop = rt.state.cut_done or rt.state.forced or (
                deadline is not None and now >= deadline + rt.settings.flush)
            for conn in list(self.server_state.connections):
                if not _idle(conn):
                    idle_since.pop(conn, None)
                    continue
                since = idle_since.setdefault(conn, now)
                if hard_stop or idle_grace_over(rt.state, now, rt.settings, since):
                    conn.shutdown()  # idle: uvicorn closes the transport
            if rt.phase is Phase.EXIT and (not self.server_state.connections or hard_stop):
                break
            await asyncio.sleep(POLL)
        for conn in list(self.server_state.connections):
            conn.shutdown()
        # Whatever still runs (apps that ignored the cut, forced exit) is cancelled.
        tasks = [t for t in self.server_state.tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        if not self.force_exit:
            await self.lifespan.shutdown()
        self.admin.close()
        install_cycle(_BaseCycle)  # another server in this process starts as uvicorn's own


_UNANSWERED_BODY = json.dumps({"error": "server shut down before answering"}).encode()


def unanswered_response(pod_header: tuple[bytes, bytes] | None) -> bytes:
    """The 503 written at the deadline to a request the app has not answered."""
    pod = b"" if pod_header is None else b"%s: %s\r\n" % pod_header
    return (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nretry-after: 1\r\n%sconnection: close\r\n\r\n%s"
            % (len(_UNANSWERED_BODY), pod, _UNANSWERED_BODY))


def _is_sse(headers: list[tuple[bytes, bytes]] | None) -> bool:
    return any(k.lower() == b"content-type" and v.lower().startswith(b"text/event-stream")
               for k, v in headers or ())


def _task_cycle(task: asyncio.Task[Any]) -> Any | None:
    """The request cycle a uvicorn request task runs (`cycle.run_asgi(app)`), if any."""
    frame = getattr(task.get_coro(), "cr_frame", None)
    cycle = None if frame is None else frame.f_locals.get("self")
    return cycle if isinstance(cycle, _BaseCycle) else None


def _idle(conn: Any) -> bool:
    """Whether a uvicorn HTTP protocol instance has no request in progress."""
    cycle = getattr(conn, "cycle", None)
    return cycle is None or bool(getattr(cycle, "response_complete", False))


def build(app: ASGIApp, runtime: DrainRuntime, admin: AdminSettings | None = None,
          **uvicorn_options: Any) -> DrainServer:
    """A DrainServer for `app` (already imported), its admin port per `admin`."""
    # The cycle hook is for the httptools protocol (uvicorn's default when installed).
    uvicorn_options["http"] = "httptools"
    uvicorn_options.setdefault("interface", "asgi3")
    if runtime.pod is not None:
        # One of uvicorn's default headers: written on every response at no extra cost.
        uvicorn_options["headers"] = [*uvicorn_options.get("headers", []),
                                      (POD_HEADER, runtime.pod)]
    timer: TickTimer[Any] = TickTimer(runtime.durations, cycle_outcome, runtime.clock())
    config = uvicorn.Config(app, **uvicorn_options)
    return DrainServer(config, runtime, timer, admin)


def run(server: DrainServer) -> int:
    """Serve until the lifecycle ends; the exit code says whether anything was cut."""
    try:
        server.run()
    except SystemExit as exc:
        # uvicorn exits with its own code 3 when start-up fails (port in use, lifespan
        # failure; uvicorn/config.py STARTUP_FAILURE); drainsafe's 3 means the API server
        # (drainsafe.shell), so report serve's own failure instead.
        if exc.code not in (0, None):
            return EXIT_FAILED
    if not server.started:
        return EXIT_FAILED
    return server.runtime.exit_code()
