"""`drainsafe run -- CMD`: the child process, PID 1's duties, and the drain around them.

PID 1 in a container gets the kubelet's SIGTERM and must reap orphans (the kernel gives
them to PID 1) and exit with a meaningful code. drainsafe run does that for CMD:
- SIGTERM/SIGINT go to the drain lifecycle (not straight to the child); SIGHUP, SIGUSR1,
  SIGUSR2 and SIGQUIT are forwarded as they come;
- children are reaped with waitpid(-1) when drainsafe is PID 1 (only its own child else);
- the exit code is the lifecycle's when it ended work on purpose, otherwise the child's
  (a child that dies from the SIGTERM drainsafe sent it has finished cleanly: 0).

In both modes readiness, liveness, the drain trigger and metrics are on the admin port
(drainsafe.server.admin), never on the pod's serving port.
proxy mode: drainsafe.server.proxy carries the traffic; the child gets SIGTERM when the
drain is over and nothing is in flight (or the deadline has passed and what remained was
ended with the marker).
signal mode: the child serves the pod's port itself; drainsafe holds SIGTERM for the drain
delay, then until the child's in-flight metric (presets: vLLM num_requests_running, ...)
reads zero or the deadline comes. Metrics that cannot be read (not Prometheus text, NaN or
+Inf, none of the names present, no answer) are not a crash: drainsafe warns once and falls
back to the drain delay and the deadline (SIGTERM now; the child's own shutdown setting
and the rest of the deadline cover what runs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from drainsafe.budget import DEFAULT_BUFFER_SECONDS
from drainsafe.lifetime import own_session_dying_with_parent
from drainsafe.server import lifecycle
from drainsafe.server.admin import AdminServer
from drainsafe.server.childmetrics import UnreadableMetrics, in_flight
from drainsafe.server.config import AdminSettings, Paths, Settings
from drainsafe.server.lifecycle import Phase
from drainsafe.server.presets import PRESETS, Preset
from drainsafe.server.proxy import Proxy
from drainsafe.server.runtime import DrainRuntime
from drainsafe.shell import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, SIGNAL_EXIT_BASE

logger = logging.getLogger("drainsafe.server")

POLL = 0.05
DEFAULT_LISTEN = ("127.0.0.1", 8080)
FORWARDED = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)


@dataclass(frozen=True)
class RunOptions:
    command: Sequence[str]
    mode: str
    listen: tuple[str, int] | None
    """The pod's serving port in proxy mode; None in signal mode (the child serves it)."""
    upstream: tuple[str, int]
    settings: Settings
    paths: Paths
    admin: AdminSettings = field(default_factory=AdminSettings)
    child_ready_path: str | None = None
    child_metrics_url: str | None = None
    in_flight_metrics: tuple[str, ...] = ()
    child_exit_timeout: float = DEFAULT_BUFFER_SECONDS
    preset: Preset | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, command: Sequence[str], settings: Settings,
                  paths: Paths, admin: AdminSettings | None = None) -> RunOptions:
        preset = PRESETS[args.preset] if args.preset else None
        host, port = args.upstream
        ready = args.child_ready_path or (preset.ready_path if preset else None)
        metrics_path = args.child_metrics_path or (preset.metrics_path if preset
                                                   else "/metrics")
        metrics_port = preset.metrics_port if preset and preset.metrics_port else port
        if metrics_path.startswith("http://") or metrics_path.startswith("https://"):
            metrics_url = metrics_path
        else:
            metrics_url = f"http://{_url_host(host)}:{metrics_port}{metrics_path}"
        metrics = tuple(args.in_flight_metric or (preset.in_flight_metrics if preset else ()))
        if args.mode == "signal" and not metrics:
            raise ValueError("signal mode needs --in-flight-metric NAME (or a --preset) to "
                             "know when the child has nothing in flight")
        listen = args.listen
        if args.mode == "signal":
            if listen is not None:
                raise ValueError("signal mode has no data path: the child serves the pod's "
                                 "port, and readiness is on the admin port (--admin-port); "
                                 "drop --listen")
        else:
            listen = listen or DEFAULT_LISTEN
            if listen == args.upstream:
                raise ValueError(f"--listen and --upstream are both {host}:{port}")
        admin = admin or AdminSettings()
        for name, address in (("--listen", listen), ("--upstream", args.upstream)):
            if address is not None and address[1] == admin.port != 0:
                raise ValueError(f"{name} and --admin-port are both port {admin.port}")
        return cls(command=list(command), mode=args.mode, listen=listen,
                   upstream=args.upstream, settings=settings, paths=paths, admin=admin,
                   child_ready_path=ready, child_metrics_url=metrics_url,
                   in_flight_metrics=metrics,
                   child_exit_timeout=DEFAULT_BUFFER_SECONDS if args.child_exit_timeout is None
                   else args.child_exit_timeout,
                   preset=preset)


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


class Child:
    """The supervised process. Reaped by us (never by Popen.wait), so orphans are too."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.proc = subprocess.Popen(list(argv), preexec_fn=own_session_dying_with_parent)
        self.pid = self.proc.pid
        self.status: int | None = None
        self.signalled: set[int] = set()

    @property
    def alive(self) -> bool:
        return self.status is None

    def reap(self) -> None:
        as_init = os.getpid() == 1
        while True:
            try:
                pid, status = os.waitpid(-1 if as_init else self.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid:
                self.status = status
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                if not as_init:
                    return

    def send(self, sig: int) -> None:
        if self.alive:
            self.signalled.add(sig)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def exit_code(self) -> int:
        if self.status is None:
            return EXIT_FAILED
        code = os.waitstatus_to_exitcode(self.status)
        if code < 0:
            # Death by a signal we sent as the planned stop is a clean end.
            if -code in self.signalled and -code in (signal.SIGTERM, signal.SIGINT):
                return EXIT_OK
            return SIGNAL_EXIT_BASE - code
        return code

    async def wait(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.alive and loop.time() < deadline:
            self.reap()
            if self.alive:
                await asyncio.sleep(POLL)
        return not self.alive


class Supervisor:
    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.runtime = DrainRuntime(options.settings, paths=options.paths)
        self.child: Child | None = None
        self.proxy: Proxy | None = None
        self.admin: AdminServer | None = None
        self._metrics_warned = False

    async def run(self) -> int:
        opts = self.options
        try:
            self.child = Child(opts.command)
        except OSError as exc:
            logger.error("drainsafe run: cannot start %s: %s", opts.command[0], exc)
            return EXIT_NOT_FOUND
        child = self.child
        try:
            return await self._supervise(child)
        finally:
            if child.alive:
                child.send(signal.SIGKILL)
                await child.wait(2.0)

    async def _supervise(self, child: Child) -> int:
        opts, rt = self.options, self.runtime
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, rt.signal, sig.name)
        for sig in FORWARDED:
            loop.add_signal_handler(sig, child.send, sig)
        # SIGCHLD belongs to the event loop (uvloop); the lifecycle loop reaps every tick.
        self.admin = AdminServer(rt, opts.admin, ready_check=self._child_ready)
        self.proxy = Proxy(rt, opts.upstream, limits=opts.admin.limits)
        try:
            await self.admin.start()
            if opts.listen is not None:
                address = await self.proxy.listen(*opts.listen)
                logger.info("drainsafe run: proxy mode on %s:%d, child pid %d", *address,
                            child.pid)
            else:
                logger.info("drainsafe run: signal mode, child pid %d", child.pid)
        except OSError as exc:
            logger.error("drainsafe run: cannot listen: %s", exc)
            self.admin.close()
            self.proxy.close_listener()
            child.send(signal.SIGTERM)
            await child.wait(opts.child_exit_timeout)
            child.send(signal.SIGKILL)
            return EXIT_FAILED
        try:
            return await self._lifecycle()
        finally:
            self.proxy.close_listener()
            self.proxy.close_all()
            self.admin.close()
            if child.alive:
                child.send(signal.SIGKILL)
                await child.wait(1.0)
            for sig in (signal.SIGTERM, signal.SIGINT, *FORWARDED):
                loop.remove_signal_handler(sig)

    async def _lifecycle(self) -> int:
        opts, rt = self.options, self.runtime
        child, proxy = self.child, self.proxy
        assert child is not None and proxy is not None
        closed_listener = False
        while True:
            child.reap()
            if not child.alive and rt.phase is not Phase.EXIT and not rt.state.forced:
                logger.warning("drainsafe run: child exited on its own (code %s) in phase %s",
                               child.exit_code(), rt.phase.value)
                proxy.close_listener()
                rt.cut_all()
                return child.exit_code() or (lifecycle.EXIT_CUT if rt.cut_count else EXIT_OK)
            if opts.mode == "signal" and rt.phase is Phase.CLOSING:
                running = await self._child_in_flight()
                # Unreadable: nothing to wait for that can be known; the child gets its
                # SIGTERM now and the rest of the deadline (the drain delay is over).
                rt.tick(in_flight=0 if running is None else running)
            else:
                # A connection whose last response just ended keeps its idle grace: the
                # client may be sending its next request on it (lifecycle.idle_grace_over).
                rt.tick(newest_idle=proxy.newest_idle() if opts.mode == "proxy" else None)
            if rt.phase in (Phase.CLOSING, Phase.EXIT) and not closed_listener:
                closed_listener = True
                if opts.mode == "proxy":
                    proxy.close_listener()
            if rt.phase is Phase.CLOSING and opts.mode == "proxy":
                proxy.sweep_idle()
            if rt.phase is Phase.EXIT:
                break
            await asyncio.sleep(POLL)
        proxy.sweep_idle(everything=True)
        code = rt.exit_code()
        timeout = 1.0 if rt.state.forced else opts.child_exit_timeout
        if opts.mode == "signal" and not rt.state.forced:
            # The child drains itself after SIGTERM (its own shutdown flag); give it the
            # rest of the deadline plus the buffer.
            deadline = rt.state.deadline(opts.settings) or rt.clock()
            timeout += max(deadline - rt.clock(), 0.0)
        child.send(signal.SIGTERM)
        if not await child.wait(timeout):
            logger.warning("drainsafe run: child still running %gs after SIGTERM; SIGKILL",
                           timeout)
            child.send(signal.SIGKILL)
            await child.wait(2.0)
        return code or child.exit_code()

    async def _child_ready(self) -> bool:
        child = self.child
        if child is None or not child.alive:
            return False
        host, port = self.options.upstream
        path = self.options.child_ready_path
        if path is None:
            try:
                async with asyncio.timeout(1.0):
                    _, writer = await asyncio.open_connection(host, port)
            except (OSError, TimeoutError):
                return False
            writer.close()
            return True
        import httpx

        try:
            async with httpx.AsyncClient(timeout=1.0) as client:
                response = await client.get(f"http://{_url_host(host)}:{port}{path}")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _child_in_flight(self) -> int | None:
        """The child's in-flight work per its own metrics; None when they cannot be read
        (warned once)."""
        import httpx

        url = self.options.child_metrics_url
        assert url is not None
        try:
            async with httpx.AsyncClient(timeout=1.0) as client:
                response = await client.get(url)
            response.raise_for_status()
            return in_flight(response.text, self.options.in_flight_metrics)
        except (httpx.HTTPError, UnreadableMetrics) as exc:
            if not self._metrics_warned:
                self._metrics_warned = True
                logger.warning("drainsafe run: cannot read the child's in-flight work at %s "
                               "(%s); falling back to the drain delay and the deadline: "
                               "SIGTERM now", url, exc)
            return None


def main(options: RunOptions) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        return int(asyncio.run(Supervisor(options).run()))
    return int(uvloop.run(Supervisor(options).run()))
