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
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Generator
from typing import Any

import uvicorn

from drainsafe.asgi import ASGIApp, DrainMiddleware
from drainsafe.server.lifecycle import Phase
from drainsafe.server.runtime import DrainRuntime

POLL = 0.05


class DrainServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, runtime: DrainRuntime) -> None:
        super().__init__(config)
        self.runtime = runtime

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

    def _on_signal(self, sig: signal.Signals) -> None:
        self.runtime.signal(sig.name)
        if self.runtime.state.forced:
            self.should_exit = True
            self.force_exit = True

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
            busy = False
            for conn in list(self.server_state.connections):
                if not _idle(conn):
                    idle_since.pop(conn, None)
                    busy = True
                    continue
                since = idle_since.setdefault(conn, now)
                if now - since >= rt.settings.idle_grace or rt.phase is Phase.EXIT:
                    conn.shutdown()  # idle: uvicorn closes the transport
            if rt.phase is Phase.EXIT and not busy:
                break
            if rt.state.forced or (rt.state.cut_done and rt.phase is Phase.EXIT):
                break
            await asyncio.sleep(POLL)
        for conn in list(self.server_state.connections):
            conn.shutdown()
        # Whatever still runs (cut requests that did not finish, forced exit) is cancelled.
        tasks = [t for t in self.server_state.tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        if not self.force_exit:
            await self.lifespan.shutdown()


def _idle(conn: Any) -> bool:
    """Whether a uvicorn HTTP protocol instance has no request in progress."""
    cycle = getattr(conn, "cycle", None)
    return cycle is None or bool(getattr(cycle, "response_complete", False))


def build(app: ASGIApp, runtime: DrainRuntime, **uvicorn_options: Any) -> DrainServer:
    """A DrainServer for `app` (already imported), wrapped in the drain middleware."""
    wrapped = DrainMiddleware(app, runtime=runtime, hook_signals=False)
    uvicorn_options.setdefault("http", "httptools")
    config = uvicorn.Config(wrapped, **uvicorn_options)
    return DrainServer(config, runtime)


def run(server: DrainServer) -> int:
    """Serve until the lifecycle ends; the exit code says whether anything was cut."""
    try:
        server.run()
    except SystemExit as exc:
        # uvicorn exits with its own code 3 when start-up fails (port in use, lifespan
        # failure); drainsafe's 3 means "forced", so report a plain failure instead.
        if exc.code not in (0, None):
            return 1
    if not server.started:
        return 1
    return server.runtime.exit_code()
