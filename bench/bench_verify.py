"""Benchmark: drainsafe verify's own capacity, side by side with hey on the same target.

Target: real uvicorn (httptools, one process) serving drainsafe.workload.streaming:app, pinned
to CPU 0; the load generator (verify or hey) is pinned to CPU 1, so "on one core" holds for
both. In one run:
- requests/s: GET /ping (4 bytes), closed loop with C connections, keep-alive, S seconds:
  `hey -z S -c C -cpus 1` vs `drainsafe verify -c C --duration S`;
- concurrent streams: C SSE streams held open at once (POST /v1/completions, one token every
  0.5 s, 4 s per stream): completed streams, failures, and the load generator's CPU seconds,
  for verify (which also checks every stream for [DONE]) and hey (which cannot).

CPU time is the child's user+system time (os.wait4), so figures compare the clients, not the
server. The machine is shared, so figures are indicative.

    python bench/bench_verify.py                       # about a minute
    python bench/bench_verify.py --seconds 10 --concurrency 100 --streams 100 500 1000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

PY = sys.executable
STREAM_BODY = json.dumps({"stream": True, "max_tokens": 8, "token_interval": 0.5})


@dataclass
class Result:
    tool: str
    test: str
    concurrency: int
    completed: int
    failed: int
    seconds: float
    cpu: float

    @property
    def rate(self) -> float:
        return self.completed / self.seconds if self.seconds else 0.0


def taskset(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if shutil.which("taskset") and os.cpu_count() else []


def start_target() -> tuple[str, subprocess.Popen[bytes]]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    port = sock.getsockname()[1]
    cmd = [*taskset(0), PY, "-m", "uvicorn", "drainsafe.workload.streaming:app", "--fd",
           str(sock.fileno()), "--log-level", "warning", "--no-access-log",
           "--backlog", "4096", "--http", "httptools"]
    proc = subprocess.Popen(cmd, pass_fds=(sock.fileno(),))
    sock.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ping", timeout=1).status_code == 200:
                return url, proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("target did not start")


def run_child(cmd: list[str], timeout: float) -> tuple[str, float, float]:
    """Run, return (stdout, wall seconds, CPU seconds of the child)."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wall = time.monotonic() - started
    if wall > timeout:
        print(f"warning: {cmd[0]} took {wall:.0f}s", file=sys.stderr)
    return out.decode(), wall, usage.ru_utime + usage.ru_stime


def hey(url: str, seconds: float, concurrency: int, *, stream: bool, test: str) -> Result:
    cmd = [*taskset(1), "hey", "-z", f"{seconds:g}s", "-c", str(concurrency), "-cpus", "1",
           "-t", "30"]
    if stream:
        cmd += ["-m", "POST", "-T", "application/json", "-d", STREAM_BODY]
    out, _, cpu = run_child([*cmd, url], seconds + 60)
    ok = sum(int(n) for n in re.findall(r"\[2\d\d\]\s+(\d+) responses", out))
    bad = sum(int(n) for n in re.findall(r"\[[3-5]\d\d\]\s+(\d+) responses", out))
    errors = out.split("Error distribution:")[-1] if "Error distribution:" in out else ""
    bad += sum(int(n) for n in re.findall(r"^\s+\[(\d+)\]", errors, re.M))
    total = re.search(r"Total:\s+([\d.]+) secs", out)
    return Result("hey", test, concurrency, ok, bad, float(total.group(1)) if total else seconds,
                  cpu)


def verify(url: str, seconds: float, concurrency: int, *, stream: bool, test: str) -> Result:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [*taskset(1), PY, "-m", "drainsafe", "verify", url, "--duration", f"{seconds:g}",
               "-c", str(concurrency), "--no-progress", "-o", "json", "--timeout", "30"]
        if stream:
            cmd += ["-m", "POST", "-H", "content-type: application/json", "-d", STREAM_BODY]
        out, _, cpu = run_child(cmd, seconds + 60)
        del tmp
    summary = json.loads(out)
    ok = summary["counts"].get("ok", 0)
    elapsed = summary["total"] / summary["requests_per_second"] if summary[
        "requests_per_second"] else seconds
    return Result("drainsafe verify", test, concurrency, ok, summary["failed"], elapsed, cpu)


def startup_cpu(url: str) -> float:
    """CPU seconds of a verify process that sends one request: its fixed start-up cost."""
    cmd = [*taskset(1), PY, "-m", "drainsafe", "verify", url, "--duration", "0.001", "-c", "1",
           "--no-progress", "-o", "json"]
    return min(run_child(cmd, 60)[2] for _ in range(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement [5]")
    parser.add_argument("--concurrency", type=int, default=50, help="for requests/s [50]")
    parser.add_argument("--streams", type=int, nargs="+", default=[100, 400],
                        help="concurrent streams to hold [100 400]")
    args = parser.parse_args()
    if shutil.which("hey") is None:
        raise SystemExit("hey is not installed (apt-get install hey)")
    url, target = start_target()
    results: list[Result] = []
    try:
        fixed = startup_cpu(f"{url}/ping")
        for run in (hey, verify):
            results.append(run(f"{url}/ping", args.seconds, args.concurrency, stream=False,
                               test="requests/s"))
        stream_seconds = max(args.seconds, 8.0)  # at least two 4 s streams per connection
        for n in args.streams:
            for run in (hey, verify):
                results.append(run(f"{url}/v1/completions", stream_seconds, n, stream=True,
                                   test="streams"))
    finally:
        target.terminate()
        target.wait(10)

    table = Table(title=f"drainsafe verify vs hey, one core each, {os.cpu_count()} CPUs "
                  "(shared machine: indicative)")
    for column in ("test", "tool", "concurrency", "completed", "failed", "per second",
                   "client CPU s", "CPU ms per request*", "core busy*"):
        table.add_column(column, justify="right" if column not in ("test", "tool") else "left")
    for r in results:
        work = r.cpu - fixed if r.tool != "hey" else r.cpu
        per = 1000 * work / r.completed if r.completed else float("nan")
        busy = 100 * work / r.seconds if r.seconds else float("nan")
        table.add_row(r.test, r.tool, str(r.concurrency), str(r.completed), str(r.failed),
                      f"{r.rate:.0f}", f"{r.cpu:.2f}", f"{per:.2f}", f"{busy:.0f}%")
    Console(width=140).print(table)
    print(f"* verify's start-up ({fixed:.2f} CPU s: Python and imports) is left out; hey "
          "starts in milliseconds. 'core busy' is the client's share of its one core: below "
          "100% the target, not the client, set the pace (one-core ceiling ~ per second / busy).")
    print("verify checks every stream for its end marker and names each failure; hey counts "
          "a stream cut short with a clean 200 as a success (tests/verify/test_hey.py).")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    main()
