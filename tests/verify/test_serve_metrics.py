"""tune and verify read what the real drainsafe serve exports: the names agree exactly.

verify places each request on the pod named by `x-drainsafe-pod`; tune reads request
durations from the `drainsafe_request_duration_seconds` histogram of a /metrics dump.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from drainsafe.server.runtime import DURATION_BUCKETS, DURATION_METRIC, POD_HEADER
from drainsafe.verify.load import DEFAULT_POD_HEADER, LoadSpec, run_load
from drainsafe.verify.record import Record
from drainsafe.verify.tune import DURATION_SUFFIX, from_metrics_text, tune
from drainsafe.verify.tune_cli import read_file
from verify.conftest import stop_process

POD = "llm-6b7c9d-q2x4z"
STREAM_SECONDS = 1.2


def test_names_agree() -> None:
    assert POD_HEADER == DEFAULT_POD_HEADER
    assert DURATION_METRIC.endswith(DURATION_SUFFIX)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_tune_reads_durations_from_a_real_serve_metrics_dump(tmp_path: Path) -> None:
    port, admin = _free_port(), _free_port()
    url = f"http://127.0.0.1:{port}"
    admin_url = f"http://127.0.0.1:{admin}"  # drainsafe serve's readiness and metrics
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "drainsafe", "serve", "drainsafe.workload.streaming:app",
             "--port", str(port), "--admin-host", "127.0.0.1", "--admin-port", str(admin),
             "--drain-delay", "0.2", "--shutdown-timeout", "2",
             "--no-access-log", "--log-level", "warning"],
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "POD_NAME": POD})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{admin_url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()
            await asyncio.sleep(0.05)
        body = json.dumps({"stream": True, "duration": STREAM_SECONDS,
                           "token_interval": 0.1}).encode()
        spec = LoadSpec(url=f"{url}/v1/completions", method="POST", body=body, duration=1.0,
                        concurrency=3, timeout=10,
                        headers=(("content-type", "application/json"),))
        run = await run_load(spec)
        dump = tmp_path / "serve-metrics.prom"
        dump.write_text(httpx.get(f"{admin_url}/metrics", timeout=5).text)
    finally:
        stop_process(process)

    record = Record.from_run(run)
    assert record.summary().failed == 0 and record.requests, record.summary().counts
    # verify placed every request on the pod that served it.
    assert {r.pod for r in record.requests} == {POD}

    found = read_file(dump)  # what `drainsafe tune --metrics FILE` reads
    assert found.notes == []
    [p99] = found.histogram_p99
    assert DURATION_METRIC in p99.source
    # Every stream took a little over 1.2 s on the server: p99 is the bound of the bucket
    # that holds them (2.0), never below what was measured, nor past the client's view.
    client_longest = max(r.total for r in record.requests)
    holding = min(b for b in DURATION_BUCKETS if b >= client_longest)
    assert STREAM_SECONDS < p99.value <= holding
    assert p99.value in DURATION_BUCKETS

    # The histogram counted exactly the requests verify saw complete.
    text = dump.read_text()
    count = next(float(line.split()[-1]) for line in text.splitlines()
                 if line.startswith(f"{DURATION_METRIC}_count"))
    assert count == len(record.requests)

    # tune's deadline comes from it (the propagation floor stands in for a rollout).
    tuning = tune(from_metrics_text(text, "serve"), min_propagation=1.0)
    assert tuning.max_request.value == p99.value
    assert DURATION_METRIC in tuning.max_request.basis
