"""Real processes for the server tests: replicas, nginx in front, and streaming load.

Every process started here is stopped by the caller's fixture (`finally`), even on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from drainsafe.marker import is_drain_error_event

VENV_BIN = Path(sys.executable).parent
PY = sys.executable
DRAINSAFE = str(VENV_BIN / "drainsafe")
WORKLOAD = "drainsafe.workload.streaming:app"
APPS_DIR = str(Path(__file__).parent)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_port(host: str, port: int, timeout: float = 15.0,
              proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return
        time.sleep(0.03)
    raise TimeoutError(f"{host}:{port} not listening after {timeout}s")


@dataclass
class Replica:
    """One server process: plain uvicorn, drainsafe serve, or drainsafe run."""

    kind: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    admin_port: int = 0
    """drainsafe's admin port (readiness, liveness, drain trigger, metrics); 0: none."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def admin(self) -> str:
        """Base URL of the admin port."""
        return f"http://127.0.0.1:{self.admin_port}"

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def replica_argv(kind: str, port: int, *, drain_delay: float, shutdown_timeout: float,
                 app: str = WORKLOAD, admin_port: int = 0,
                 extra: tuple[str, ...] = ()) -> list[str]:
    uvicorn_flags = ["--no-access-log", "--log-level", "warning"]
    timing = ["--drain-delay", str(drain_delay), "--shutdown-timeout", str(shutdown_timeout),
              "--admin-host", "127.0.0.1", "--admin-port", str(admin_port), *extra]
    if kind == "plain":
        return [PY, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
                "--app-dir", APPS_DIR, *uvicorn_flags]
    if kind == "serve":
        return [DRAINSAFE, "serve", app, "--host", "127.0.0.1", "--port", str(port),
                "--no-access-log", *timing]
    if kind == "run":
        upstream = free_port()
        return [DRAINSAFE, "run", "--listen", f"127.0.0.1:{port}",
                "--upstream", f"127.0.0.1:{upstream}", *timing, "--",
                PY, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(upstream),
                "--app-dir", APPS_DIR, *uvicorn_flags]
    raise ValueError(kind)


def start_replica(kind: str, workdir: Path, *, drain_delay: float = 1.0,
                  shutdown_timeout: float = 3.0, app: str = WORKLOAD,
                  env: dict[str, str] | None = None, extra: tuple[str, ...] = ()) -> Replica:
    """`plain` is uvicorn; its admin port is the middleware's (DRAINSAFE_ADMIN_PORT), if
    the app has one."""
    port, admin_port = free_port(), free_port()
    log = workdir / f"{kind}-{port}.log"
    argv = replica_argv(kind, port, drain_delay=drain_delay,
                        shutdown_timeout=shutdown_timeout, app=app, admin_port=admin_port,
                        extra=extra)
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1",
                "DRAINSAFE_ADMIN_HOST": "127.0.0.1", "DRAINSAFE_ADMIN_PORT": str(admin_port),
                **(env or {})}
    proc = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                            env=full_env, cwd=APPS_DIR)
    replica = Replica(kind, port, proc, log, admin_port)
    try:
        wait_port("127.0.0.1", port, proc=proc)
        if kind != "plain":
            wait_ready(admin_port)
    except BaseException:
        replica.stop()
        raise
    return replica


def wait_ready(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return
        time.sleep(0.05)
    raise TimeoutError(f"admin port 127.0.0.1:{port}/readyz not ready after {timeout}s")


@contextlib.contextmanager
def replicas(kind: str, workdir: Path, n: int, **options: object) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    try:
        for _ in range(n):
            started.append(start_replica(kind, workdir, **options))  # type: ignore[arg-type]
        yield started
    finally:
        for r in started:
            r.stop()


# -- load -------------------------------------------------------------------------------

@dataclass
class LoadResult:
    ok: int = 0
    failed: int = 0
    truncated: int = 0
    marked: int = 0
    """Streams ended with drainsafe's explicit error event (not silent, but not finished)."""
    errors: list[str] = field(default_factory=list)
    proxy_closed: int = 0
    """Requests resent because the L7 proxy itself closed an idle client connection."""

    @property
    def total(self) -> int:
        return self.ok + self.failed + self.truncated + self.marked

    def summary(self) -> str:
        return (f"ok={self.ok} failed={self.failed} truncated={self.truncated} "
                f"marked={self.marked} proxy_closed={self.proxy_closed} "
                f"errors={self.errors[:5]}")


class _NoResponse(Exception):
    """The connection to the proxy closed before any response byte arrived."""


async def _one_stream(client: httpx.AsyncClient, url: str, body: dict[str, object],
                      result: LoadResult) -> None:
    data = b""
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                await response.aread()
                result.failed += 1
                result.errors.append(f"HTTP {response.status_code}")
                return
            async for chunk in response.aiter_bytes():
                data += chunk
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        if not data:
            raise _NoResponse(str(exc)) from exc
        result.failed += 1
        result.errors.append(f"{type(exc).__name__}: {exc}")
        return
    except httpx.HTTPError as exc:
        result.failed += 1
        result.errors.append(f"{type(exc).__name__}: {exc}")
        return
    if data.endswith(b"data: [DONE]\n\n"):
        result.ok += 1
    elif is_drain_error_event(data):
        result.marked += 1
    else:
        result.truncated += 1
        result.errors.append(f"truncated after {len(data)} bytes")


async def _one_short(client: httpx.AsyncClient, url: str, result: LoadResult) -> None:
    try:
        response = await client.post(url, json={"max_tokens": 1, "token_interval": 0})
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise _NoResponse(str(exc)) from exc
    except httpx.HTTPError as exc:
        result.failed += 1
        result.errors.append(f"short: {type(exc).__name__}: {exc}")
        return
    if response.status_code == 200 and b'"finish_reason": "length"' in response.content:
        result.ok += 1
    else:
        result.failed += 1
        result.errors.append(f"short: HTTP {response.status_code}")


@contextlib.asynccontextmanager
async def streaming_load(url: str, *, workers: int = 12, tokens: int = 10,
                         token_interval: float = 0.05, short_workers: int = 4,
                         l7_proxy: bool = False) -> AsyncIterator[LoadResult]:
    """Constant streaming POST load over keep-alive connections until the block ends,
    plus `short_workers` sending short non-streaming POSTs back to back (many requests on
    pooled connections, as chat front-ends and health checkers add).

    l7_proxy: the client talks to nginx's http module, so a replica's failure reaches the
    client as an HTTP status (502) or a cut body, never as a closed connection. A client
    connection closed before any response byte is nginx's own doing: on reload (our stand-in
    for endpoint removal) old workers close idle client keep-alive connections
    (nginx.org/en/docs/control.html), which ingress-nginx avoids by not reloading for
    endpoint changes. Such a request is sent again once and counted in `proxy_closed`.
    Behind the L4 proxy the client's connection reaches the replica, so it counts as failed.
    """
    result = LoadResult()
    stop = asyncio.Event()
    total = workers + short_workers
    limits = httpx.Limits(max_connections=total, max_keepalive_connections=total)
    body = {"stream": True, "max_tokens": tokens, "token_interval": token_interval}
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(15.0)) as client:

        async def attempt(one: Callable[[], Awaitable[None]]) -> None:
            for tries in (1, 2):
                try:
                    await one()
                    return
                except _NoResponse as exc:
                    if l7_proxy and tries == 1:
                        result.proxy_closed += 1
                        continue
                    result.failed += 1
                    result.errors.append(f"no response: {exc}")
                    return

        async def worker() -> None:
            while not stop.is_set():
                await attempt(lambda: _one_stream(client, url, body, result))

        async def short_worker() -> None:
            while not stop.is_set():
                await attempt(lambda: _one_short(client, url, result))

        tasks = [asyncio.create_task(worker()) for _ in range(workers)]
        tasks += [asyncio.create_task(short_worker()) for _ in range(short_workers)]
        try:
            yield result
        finally:
            stop.set()
            done, pending = await asyncio.wait(tasks, timeout=20)
            for t in pending:
                t.cancel()
            for t in done:
                if t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]


async def streaming(url: str, body: dict[str, object]
                    ) -> asyncio.Task[tuple[int, bytes, str | None]]:
    """collect_stream started, returned once the stream has begun."""
    began = asyncio.Event()
    task = asyncio.create_task(collect_stream(url, body, began=began))
    waiter = asyncio.ensure_future(began.wait())
    try:
        async with asyncio.timeout(20):
            await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    return task


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return proc.poll()


async def collect_stream(url: str, body: dict[str, object], timeout: float = 20.0,
                         began: asyncio.Event | None = None
                         ) -> tuple[int, bytes, str | None]:
    """(status, body, error) of one streaming POST read to its end; `began` is set once its
    first bytes are here (a test signals the server then, not after a fixed sleep)."""
    data = b""
    try:
        async with httpx.AsyncClient(timeout=timeout) as client, \
                client.stream("POST", url, json=body) as response:
            async for chunk in response.aiter_bytes():
                data += chunk
                if began is not None:
                    began.set()
            return response.status_code, data, None
    except httpx.HTTPError as exc:
        return 0, data, f"{type(exc).__name__}: {exc}"
