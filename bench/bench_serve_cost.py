"""What `drainsafe serve` adds per request to bare uvicorn, in CPU instructions.

Throughput on a shared 2-CPU machine moves by a few % between two identical uvicorn
processes (bench_server.py's control row), as much as serve's whole cost. Instruction counts
do not: this bench feeds GET /ping (drainsafe.workload.streaming) straight into uvicorn's
httptools protocol over an in-memory transport, in one process, once as bare uvicorn builds
it and once as `drainsafe serve` builds it (drainsafe.server.serve.build: its request
cycle, no app wrapper), and counts user-space instructions with valgrind's cachegrind. The
count for N2 requests minus the count for N1, divided by N2 - N1, is the cost of one
request, start-up excluded. Sockets and the kernel are left out (they are the same for
both); so is serve's 0.1 s tick, which costs per tick, not per request.

    python bench/bench_serve_cost.py [--requests 5000 15000]

Needs valgrind (Debian package valgrind; ./dev bench installs it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

REQUEST = (b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: hey/0.0.1\r\n"
           b"Accept-Encoding: gzip\r\n\r\n")
KINDS = {"uvicorn": "bare uvicorn 0.55 (httptools)", "serve": "drainsafe serve"}


class MemoryTransport(asyncio.Transport):
    """Takes what uvicorn writes and forgets it; counts the writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes += 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000),
                "peername": ("127.0.0.1", 50000)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def feed(kind: str, requests: int) -> tuple[float, int]:
    """Serve `requests` GET /ping on one keep-alive connection; (CPU s, writes)."""
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    from drainsafe.workload.streaming import app

    options: dict[str, Any] = {"http": "httptools", "lifespan": "off", "access_log": False,
                               "log_level": "warning"}
    if kind == "uvicorn":
        config = uvicorn.Config(app, **options)
    else:
        from drainsafe.server import serve
        from drainsafe.server.config import Settings
        from drainsafe.server.runtime import DrainRuntime

        runtime = DrainRuntime(Settings(drain_delay=0, shutdown_timeout=1), environ={})
        config = serve.build(app, runtime, **options).config
    config.load()
    protocol = HttpToolsProtocol(config=config, server_state=ServerState(), app_state={},
                                 _loop=asyncio.get_running_loop())
    transport = MemoryTransport()
    protocol.connection_made(transport)
    started = time.process_time()
    for _ in range(requests):
        protocol.data_received(REQUEST)
        while protocol.cycle is not None and not protocol.cycle.response_complete:
            await asyncio.sleep(0)
    return time.process_time() - started, transport.writes


def child(kind: str, requests: int) -> None:
    import uvloop

    cpu, writes = uvloop.run(feed(kind, requests))
    if writes != 2 * requests:  # head and body of each answer: every request was served
        raise SystemExit(f"bench_serve_cost: {kind} wrote {writes} times for {requests}")
    print(f"cpu_us_per_request {cpu / requests * 1e6:.3f}")


def instructions(kind: str, requests: int) -> int:
    argv = ["valgrind", "--tool=cachegrind", "--cache-sim=no",
            "--cachegrind-out-file=/dev/null", sys.executable, __file__, "--child", kind,
            str(requests)]
    # A fixed hash seed: the same dict layouts in every run, so counts repeat exactly.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True,
                         timeout=600)
    found = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if found is None:
        raise SystemExit(f"bench_serve_cost: no instruction count from valgrind:\n{out.stderr}")
    return int(found.group(1).replace(",", ""))


def cpu_per_request(kind: str, requests: int) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(requests)],
                         capture_output=True, text=True, check=True, timeout=600)
    return float(out.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, nargs=2, default=(5000, 15000),
                        metavar=("N1", "N2"))
    parser.add_argument("--child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("bench_serve_cost: valgrind not found (apt-get install valgrind)",
              file=sys.stderr)
        return 2
    n1, n2 = args.requests
    if not 0 < n1 < n2:
        parser.error(f"--requests {n1} {n2}: need 0 < N1 < N2 (the cost is their difference)")
    console = Console()
    per_request: dict[str, float] = {}
    for kind in KINDS:
        console.print(f"[dim]{kind}: cachegrind over {n1:,} and {n2:,} requests[/dim]")
        per_request[kind] = (instructions(kind, n2) - instructions(kind, n1)) / (n2 - n1)
    # Without valgrind: CPU time in-process, the two taking turns, best of 5 each (this
    # moves with the machine's other work; the count above does not).
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(5):
        for kind in KINDS:
            times[kind].append(cpu_per_request(kind, 50_000))
    cpu = {kind: min(v) for kind, v in times.items()}
    base = per_request["uvicorn"]
    table = Table(title="GET /ping through uvicorn's httptools protocol, in-process")
    for col in ("server", "instructions/request", "over bare uvicorn",
                "CPU µs/request (best of 5)"):
        table.add_column(col, justify="left" if col == "server" else "right")
    for kind, name in KINDS.items():
        extra = "" if kind == "uvicorn" else f"{per_request[kind] / base - 1:+.1%}"
        table.add_row(name, f"{per_request[kind]:,.0f}", extra, f"{cpu[kind]:.2f}")
    console.print(table)
    ratio = per_request["serve"] / base
    # Where this Python is all the work, requests/s scale as 1 / instructions; the kernel's
    # share of a real request (sockets) is the same for both and only narrows the gap.
    console.print(f"serve: {ratio:.3f}x bare uvicorn's instructions per request, so at "
                  f"least {1 / ratio:.3f}x its requests/s at equal instructions per cycle "
                  f"(goal: >= 0.97x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
