"""The uvicorn internals `drainsafe serve` hooks, checked against the installed uvicorn.

serve (drainsafe.server.serve) subclasses uvicorn's httptools `RequestResponseCycle` and
installs it as the module global the protocol builds cycles from, reads in-flight work from
`server_state.connections[*].cycle` and `.pipeline`, turns `keep_alive` off to make uvicorn
write `Connection: close`, writes the deadline's answer on `cycle.transport`, and replaces
`Server.capture_signals`, `on_tick`, `startup` and `shutdown`. pyproject.toml bounds uvicorn
below the next minor release; this test fails first when any of that moves, in-process,
through uvicorn's real protocol over an in-memory transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any

import uvicorn
import uvicorn.protocols.http.httptools_impl as httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from drainsafe.server import serve
from drainsafe.server.config import Settings
from drainsafe.server.runtime import DrainRuntime


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.data = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.data += bytes(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_the_server_methods_serve_replaces_exist_with_their_shape() -> None:
    server = uvicorn.Server
    assert "capture_signals" in vars(server)  # a context manager method of its own
    assert inspect.signature(server.on_tick).parameters.keys() == {"self", "counter"}
    for name in ("startup", "shutdown"):
        method = getattr(server, name)
        assert inspect.iscoroutinefunction(method), name
        assert list(inspect.signature(method).parameters) == ["self", "sockets"], name
    instance = uvicorn.Server(uvicorn.Config(lambda *a: None))
    for attr in ("started", "should_exit", "force_exit", "server_state"):
        assert hasattr(instance, attr), attr
    state = instance.server_state
    for attr in ("connections", "tasks", "total_requests", "default_headers"):
        assert hasattr(state, attr), attr
    # The cycle class is looked up as a module global when each request's cycle is built.
    assert "RequestResponseCycle" in HttpToolsProtocol.on_headers_complete.__code__.co_names
    run_asgi = httptools_impl.RequestResponseCycle.run_asgi
    assert inspect.iscoroutinefunction(run_asgi)
    assert next(iter(inspect.signature(run_asgi).parameters)) == "self"  # serve._task_cycle


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/sse":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await asyncio.sleep(30)
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"pong"})


async def test_serves_cycles_ride_uvicorns_protocol() -> None:
    runtime = DrainRuntime(Settings(drain_delay=0, shutdown_timeout=1), environ={})
    server = serve.build(_app, runtime, lifespan="off", log_level="warning",
                         access_log=False)
    config = server.config
    config.load()
    state = server.server_state
    protocol = HttpToolsProtocol(config=config, server_state=state, app_state={},
                                 _loop=asyncio.get_running_loop())
    transport = _Transport()
    try:
        protocol.connection_made(transport)
        assert protocol in state.connections
        protocol.data_received(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        cycle = protocol.cycle
        assert type(cycle) is server._serving_cycle  # built from the installed global
        for attr in ("scope", "transport", "keep_alive", "response_started",
                     "response_complete", "disconnected", "chunked_encoding",
                     "message_event"):
            assert hasattr(cycle, attr), attr
        while not cycle.response_complete:
            await asyncio.sleep(0)
        assert b"pong" in transport.data
        assert cycle.drain_headers == [(b"content-type", b"text/plain")]
        # A stream in flight is seen by serve's look at uvicorn's cycles.
        protocol.data_received(b"GET /sse HTTP/1.1\r\nHost: x\r\n\r\n")
        while not protocol.cycle.response_started:
            await asyncio.sleep(0)
        assert server._probe() == (1, 1)
        # A pipelined request waits in `pipeline` as (cycle, app), behind the stream.
        protocol.data_received(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        assert len(protocol.pipeline) == 1 and protocol.pipeline[0][0] is protocol.cycle
        assert server._probe()[0] == 2
        # Draining: the closing cycle's keep_alive off makes uvicorn say Connection: close.
        runtime.request_drain("test")
        assert httptools_impl.RequestResponseCycle is server._closing_cycle
        assert protocol.pipeline[0][0].keep_alive is False
        closing = server._closing_cycle(
            scope={"type": "http", "path": "/ping", "method": "GET", "headers": []},
            transport=transport, flow=protocol.flow, logger=protocol.logger,
            access_logger=protocol.access_logger, access_log=False,
            default_headers=[], message_event=asyncio.Event(), expect_100_continue=False,
            keep_alive=True, on_response=lambda: None)
        transport.data = b""
        await closing.send({"type": "http.response.start", "status": 200, "headers": []})
        assert b"connection: close" in transport.data.lower()
    finally:
        for task in list(state.tasks):
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*state.tasks, return_exceptions=True)
        protocol.connection_lost(None)
        serve.install_cycle(serve._BaseCycle)
