"""verify and tune against the real drainsafe serve (streaming workload), SIGTERMed under load.

With no proxy in front, traffic keeps arriving through the whole drain delay, so verify must
see: ok answers, streams ended by the explicit drain marker at the shutdown deadline (exactly
as many as the server says it cut), and refused connections once the listener closed. tune,
reading the server's phase log, must notice that the last request came as late as the drain
delay allowed (a lower bound, not a measurement) and say so.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from drainsafe.verify.load import LoadSpec, run_load
from drainsafe.verify.record import Record
from drainsafe.verify.tune import CannotBound, from_log_lines, from_record, tune
from verify.conftest import stop_process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_drainsafe_serve_drain_seen_by_verify_and_tune(tmp_path: Path) -> None:
    port, admin = free_port(), free_port()
    admin_url = f"http://127.0.0.1:{admin}"  # drainsafe serve's readiness and metrics
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "drainsafe", "serve", "drainsafe.workload.streaming:app",
             "--port", str(port), "--admin-host", "127.0.0.1", "--admin-port", str(admin),
             "--drain-delay", "1", "--shutdown-timeout", "1",
             "--no-access-log", "--log-level", "info"],
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{admin_url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()
            await asyncio.sleep(0.05)

        body = json.dumps({"stream": True, "max_tokens": 15, "token_interval": 0.1}).encode()
        # Open loop, 1.5 s streams, SIGTERM at 1 s: streams started before 1.5 s finish,
        # those started in the last half second before the listener closes (2 s) are still
        # running at the deadline (3 s), later ones are refused.
        spec = LoadSpec(url=f"{url}/v1/completions", method="POST", body=body, duration=3.0,
                        rate=8, timeout=10,
                        headers=(("content-type", "application/json"),))

        async def terminate() -> None:
            await asyncio.sleep(1.0)
            os.killpg(process.pid, signal.SIGTERM)

        killer = asyncio.create_task(terminate())
        run = await run_load(spec)
        await killer
        await asyncio.to_thread(process.wait, 20)
    finally:
        stop_process(process)

    record = Record.from_run(run)
    counts = record.summary().counts
    phase_lines = [json.loads(line) for line in log.read_text().splitlines()
                   if '"drainsafe.phase"' in line]
    exit_line = next(p for p in phase_lines if p["phase"] == "exit")
    assert counts["ok"] > 0, counts
    assert counts.get("drain_marker", 0) == exit_line["cut_at_deadline"] > 0, counts
    assert counts.get("refused", 0) > 0, counts
    assert set(counts) <= {"ok", "drain_marker", "refused"}, counts

    found = from_log_lines(log.read_text().splitlines(), "serve.log")
    found.merge(from_record(record, "record"))
    assert found.propagation[0].censored  # requests kept arriving until the listener closed
    with pytest.raises(CannotBound):  # a server's last request is a sample, not a bound
        tune(found, drain_via="server")
    tuning = tune(found, drain_via="server", min_propagation=0.5)
    assert any("still received traffic" in w for w in tuning.warnings)
    assert tuning.drain_delay_seconds > 1.0
    assert tuning.max_request.value >= 1.5  # the 1.5 s streams that completed
