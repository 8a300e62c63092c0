"""drainsafe serve / run against bare uvicorn, side by side in one run.

Figures:
1. a trivial endpoint (GET /ping of drainsafe.workload.streaming) at saturation with hey:
   requests/s, p50, p99 for bare uvicorn, drainsafe serve, drainsafe run (proxy + uvicorn),
   and a second bare uvicorn process as a control (the noise floor);
2. the same at a fixed moderate rate, to read the latency the proxy adds (p50/p99 delta);
3. SSE chunks/s of one stream with no pause between tokens, read by curl, direct from
   uvicorn and through the proxy.

Goals (issues 3 and 12): serve >= 0.97x bare uvicorn (the median of the ratios taken within each
round, each server going first in turn); the proxy adds <= 1 ms at p99 and carries
>= 20,000 SSE chunks/s on one core. Every server runs with uvloop + httptools and no access
log. On a shared machine, figures are indicative; --pin puts servers on CPU 0 and the load
tool on CPU 1 (the proxy's child shares CPU 0 with it, so proxy figures are conservative).

    python bench/bench_server.py [--duration 5] [--concurrency 16] [--sse-tokens 100000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

BIN = Path(sys.executable).parent
APP = "drainsafe.workload.streaming:app"
CONTROL = "uvicorn-b"
"""A second bare uvicorn process, measured like the others: how far two identical servers
differ in one run (the noise floor every ratio should be read against)."""
UVICORN_FLAGS = ["--no-access-log", "--log-level", "warning", "--loop", "uvloop",
                 "--http", "httptools"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"port {port} not listening")


def pinned(argv: list[str], cpu: int | None) -> list[str]:
    if cpu is None or shutil.which("taskset") is None:
        return argv
    return ["taskset", "-c", str(cpu), *argv]


@contextlib.contextmanager
def server(kind: str, cpu: int | None) -> Iterator[tuple[int, int]]:
    port = free_port()
    # drainsafe's readiness is on its admin port (a free one: benches may overlap).
    admin = free_port()
    admin_flags = ["--admin-host", "127.0.0.1", "--admin-port", str(admin)]
    if kind in ("uvicorn", CONTROL):
        argv = [str(BIN / "uvicorn"), APP, "--port", str(port), *UVICORN_FLAGS]
    elif kind == "serve":
        argv = [str(BIN / "drainsafe"), "serve", APP, "--port", str(port), "--no-access-log",
                "--log-level", "warning", "--drain-delay", "0", "--shutdown-timeout", "1",
                *admin_flags]
    else:
        upstream = free_port()
        argv = [str(BIN / "drainsafe"), "run", "--listen", f"127.0.0.1:{port}",
                "--upstream", f"127.0.0.1:{upstream}", "--log-level", "warning",
                "--drain-delay", "0", "--shutdown-timeout", "1", *admin_flags, "--",
                str(BIN / "uvicorn"), APP, "--port", str(upstream), *UVICORN_FLAGS]
    proc = subprocess.Popen(pinned(argv, cpu), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        if kind in ("serve", "run"):
            _wait_ready(admin)  # run's child binds after the proxy
        yield port, proc.pid
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _wait_ready(admin_port: int, timeout: float = 20) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            url = f"http://127.0.0.1:{admin_port}/readyz"
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.05)
    raise TimeoutError(f"admin port {admin_port}: /readyz not ready")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` and its descendants (taskset execs in place)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
            todo += [int(c) for c in
                     Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except (OSError, IndexError, ValueError):
            continue
    return total


@dataclass
class HeyResult:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    requests: int = 0
    cpu_us: float = 0.0
    """Server CPU time per request (all its processes): robust to a busy shared machine."""


def hey(url: str, *, duration: float, concurrency: int, qps: int | None,
        cpu: int | None) -> HeyResult:
    argv = ["hey", "-z", f"{duration}s", "-c", str(concurrency)]
    if qps:
        argv += ["-q", str(qps)]
    out = subprocess.run(pinned([*argv, url], cpu), capture_output=True, text=True,
                         timeout=duration + 60, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = float(re.search(r"50%+ in ([\d.]+) secs", out).group(1))  # type: ignore[union-attr]
    p99 = float(re.search(r"99%+ in ([\d.]+) secs", out).group(1))  # type: ignore[union-attr]
    errors = 0
    if "Error distribution" in out:
        errors = sum(int(n) for n in re.findall(r"\[(\d+)\]\s+Get", out))
    statuses = re.findall(r"\[(\d{3})\]\s+(\d+) responses", out)
    errors += sum(int(n) for code, n in statuses if code != "200")
    requests = sum(int(n) for _, n in statuses)
    return HeyResult(rps, p50 * 1000, p99 * 1000, errors, requests)


def measured(pid: int, url: str, **options: object) -> HeyResult:
    before = cpu_seconds(pid)
    result = hey(url, **options)  # type: ignore[arg-type]
    used = cpu_seconds(pid) - before
    result.cpu_us = used / max(result.requests, 1) * 1e6
    return result


def sse_rate(port: int, tokens: int, cpu: int | None) -> float:
    body = f'{{"stream": true, "max_tokens": {tokens}, "token_interval": 0}}'
    argv = ["curl", "-sN", "-o", "/dev/null", "-w", "%{time_total} %{size_download}",
            "-X", "POST", "-H", "content-type: application/json", "-d", body,
            f"http://127.0.0.1:{port}/v1/completions"]
    out = subprocess.run(pinned(argv, cpu), capture_output=True, text=True, timeout=300,
                         check=True).stdout.split()
    return tokens / float(out[0])


def _median(results: list[HeyResult], key: str) -> HeyResult:
    """The run whose `key` is the median (so its other figures belong to the same run)."""
    ordered = sorted(results, key=lambda r: float(getattr(r, key)))
    return ordered[len(ordered) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per hey run")
    parser.add_argument("--rounds", type=int, default=9,
                        help="interleaved rounds; medians are reported, and for the ratio "
                             "to bare uvicorn the median of each round's ratio")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rate", type=int, default=1000,
                        help="requests/s for the fixed-rate latency run")
    parser.add_argument("--sse-tokens", type=int, default=100_000)
    parser.add_argument("--pin", action="store_true",
                        help="servers on CPU 0, load tools on CPU 1 (taskset)")
    args = parser.parse_args(argv)
    for tool in ("hey", "curl"):
        if shutil.which(tool) is None:
            print(f"bench_server: {tool} not found (apt-get install {tool})", file=sys.stderr)
            return 2
    server_cpu, load_cpu = (0, 1) if args.pin else (None, None)
    console = Console()
    kinds = ["uvicorn", "serve", "run", CONTROL]
    runs: dict[str, list[HeyResult]] = {k: [] for k in kinds}
    fixed_runs: dict[str, list[HeyResult]] = {k: [] for k in kinds}
    sse: dict[str, list[float]] = {"uvicorn": [], "run": []}
    workers = 4
    for rnd in range(args.rounds):
        console.print(f"[dim]round {rnd + 1}/{args.rounds}[/dim]")
        # Fresh processes every round: one process of a server can run a few % faster or
        # slower than another of the same for minutes (the control row shows it), so
        # each round draws new ones. All are up at once and loaded one after another, so a
        # busy neighbour hurts every server alike.
        with contextlib.ExitStack() as stack:
            started = {k: stack.enter_context(server(k, server_cpu)) for k in kinds}
            ports = {k: port for k, (port, _) in started.items()}
            pids = {k: pid for k, (_, pid) in started.items()}
            for kind in kinds:
                hey(f"http://127.0.0.1:{ports[kind]}/ping", duration=0.5,
                    concurrency=args.concurrency, qps=None, cpu=load_cpu)
            # Each server goes first in turn: no server always follows another's load.
            for kind in kinds[rnd % len(kinds):] + kinds[:rnd % len(kinds)]:
                url = f"http://127.0.0.1:{ports[kind]}/ping"
                runs[kind].append(measured(pids[kind], url, duration=args.duration,
                                           concurrency=args.concurrency, qps=None,
                                           cpu=load_cpu))
                fixed_runs[kind].append(hey(url, duration=args.duration, concurrency=workers,
                                            qps=max(args.rate // workers, 1), cpu=load_cpu))
                if kind in sse and rnd < 3:
                    sse[kind].append(sse_rate(ports[kind], args.sse_tokens, load_cpu))
    sat = {k: _median(v, "rps") for k, v in runs.items()}
    cost = {k: statistics.median(r.cpu_us for r in v) for k, v in runs.items()}
    fixed = {k: _median(v, "p99_ms") for k, v in fixed_runs.items()}
    sse_best = {k: statistics.median(v) for k, v in sse.items()}
    # Throughput on this kind of machine drifts by several % within a minute; a ratio
    # taken within each round (seconds apart) cancels the drift, its median the outliers.
    paired = {k: sorted(r.rps / u.rps for r, u in zip(v, runs["uvicorn"], strict=True))
              for k, v in runs.items()}
    ratio = {k: statistics.median(v) for k, v in paired.items()}
    table = Table(title=f"GET /ping, hey -c {args.concurrency}, {args.rounds} x "
                  f"{args.duration:g}s interleaved (median; {os.cpu_count()} CPUs, shared)")
    for col in ("server", "requests/s", "x bare uvicorn", "per round", "p50 ms", "p99 ms",
                "errors", "CPU µs/request", "efficiency x bare"):
        table.add_column(col, justify="right" if col != "server" else "left")
    names = {"uvicorn": "bare uvicorn", "serve": "drainsafe serve",
             "run": "drainsafe run (proxy)",
             CONTROL: "bare uvicorn again (noise floor)"}
    for kind in kinds:
        r = sat[kind]
        spread = "" if kind == "uvicorn" else f"{paired[kind][0]:.3f}-{paired[kind][-1]:.3f}"
        table.add_row(names[kind], f"{r.rps:,.0f}", f"{ratio[kind]:.3f}", spread,
                      f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", str(r.errors),
                      f"{cost[kind]:.1f}", f"{cost['uvicorn'] / cost[kind]:.3f}")
    console.print(table)

    lat = Table(title=f"GET /ping at a fixed {args.rate} requests/s ({workers} connections)")
    for col in ("server", "p50 ms", "p99 ms", "p99 added vs bare uvicorn"):
        lat.add_column(col, justify="right" if col != "server" else "left")
    for kind in kinds:
        r = fixed[kind]
        lat.add_row(names[kind], f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}",
                    "" if kind == "uvicorn" else f"{r.p99_ms - fixed['uvicorn'].p99_ms:+.2f} ms")
    console.print(lat)

    chunks = Table(title=f"SSE chunks/s, one stream of {args.sse_tokens:,} tokens read by "
                   "curl (median of 3)")
    chunks.add_column("path")
    chunks.add_column("chunks/s", justify="right")
    chunks.add_row("direct from uvicorn", f"{sse_best['uvicorn']:,.0f}")
    chunks.add_row("through drainsafe run (proxy)", f"{sse_best['run']:,.0f}")
    console.print(chunks)
    serve_ratio = ratio["serve"]
    serve_eff = cost["uvicorn"] / cost["serve"]
    added = fixed["run"].p99_ms - fixed["uvicorn"].p99_ms
    console.print(
        f"noise floor: a second bare uvicorn measured {ratio[CONTROL]:.3f}x the first "
        f"(per round {paired[CONTROL][0]:.3f}-{paired[CONTROL][-1]:.3f}), CPU per request "
        f"{cost['uvicorn'] / cost[CONTROL]:.3f}x")
    console.print(
        f"goals: serve {serve_ratio:.3f}x bare uvicorn requests/s, median of the rounds' "
        f"ratios (>= 0.97) "
        f"{'met' if serve_ratio >= 0.97 else 'NOT met'} (CPU per request "
        f"{serve_eff:.3f}x as efficient); proxy adds {added:+.2f} ms at p99 "
        f"(<= 1 ms) {'met' if added <= 1 else 'NOT met'}; proxy {sse_best['run']:,.0f} SSE "
        f"chunks/s (>= 20,000) {'met' if sse_best['run'] >= 20000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
