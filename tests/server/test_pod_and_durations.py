"""The pod header and the request duration histogram, for drainsafe verify and tune.

Real processes for serve, run (proxy) and the middleware under plain uvicorn: every answer
of the app names the pod, and /metrics counts each request once, in the right bucket.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_harness import start_replica

from drainsafe.server.config import Settings
from drainsafe.server.runtime import (
    DURATION_BUCKETS,
    DURATION_METRIC,
    POD_HEADER,
    DrainRuntime,
    DurationHistogram,
    pod_name,
)

WORKLOAD = "drainsafe.workload.streaming:app"
WRAPPED = "server_apps:wrapped"
"""The workload in drainsafe.asgi's middleware (it sends the pod header itself)."""
CASES = [("serve", WORKLOAD), ("run", WORKLOAD),
         # run in front of a child that names the pod too: the header must not double.
         ("run", WRAPPED),
         # plain: the user's own uvicorn running the app wrapped in drainsafe.asgi.
         ("plain", WRAPPED)]
STREAM = {"stream": True, "duration": 0.8, "token_interval": 0.1}


def test_pod_name_from_pod_name_then_hostname() -> None:
    assert pod_name({"POD_NAME": "llm-7d9f-abcde", "HOSTNAME": "other"}) == "llm-7d9f-abcde"
    assert pod_name({"HOSTNAME": "llm-7d9f-xyz12"}) == "llm-7d9f-xyz12"
    assert pod_name({"POD_NAME": "  ", "HOSTNAME": "h"}) == "h"  # set but empty: unset
    assert pod_name({}) is None


def test_a_pod_name_that_is_no_header_value_is_refused_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="drainsafe.server"):
        assert pod_name({"POD_NAME": "a b\r\nx-evil: 1", "HOSTNAME": "h"}) is None
    assert "POD_NAME" in caplog.text and POD_HEADER in caplog.text


def test_histogram_buckets_are_inclusive_and_cumulative() -> None:
    h = DurationHistogram()
    for seconds in (0.0, 0.05, 0.051, 1.0, 89.0, 121.0):
        h.observe(seconds)
    rows = dict(h.cumulative())
    assert rows["0.05"] == 2  # le is inclusive: 0.05 belongs to le="0.05"
    assert rows["0.1"] == 3
    assert rows["1.0"] == 4
    assert rows["90.0"] == 5 and rows["120.0"] == 5
    assert rows["+Inf"] == 6 == h.count
    assert list(rows) == [*(repr(b) for b in DURATION_BUCKETS), "+Inf"]
    assert math.isclose(h.sum, 0.05 + 0.051 + 1.0 + 89.0 + 121.0)


def test_runtime_exports_the_histogram_and_the_pod() -> None:
    from prometheus_client import generate_latest

    rt = DrainRuntime(Settings(drain_delay=1, shutdown_timeout=1),
                      environ={"HOSTNAME": "pod-b"})
    assert rt.pod == "pod-b" and rt.pod_header == (b"x-drainsafe-pod", b"pod-b")
    assert DrainRuntime(Settings(), environ={}).pod_header is None
    rt.durations.observe(0.3)
    rt.durations.observe(2.5)
    counts = _duration_counts(generate_latest(rt.registry()).decode())
    assert counts["0.25"] == 0 and counts["0.5"] == 1 and counts["3.0"] == 2
    assert counts["+Inf"] == 2 and counts["count"] == 2


def _duration_counts(text: str) -> dict[str, float]:
    """le -> cumulative count (and count, sum) of drainsafe's duration histogram."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != DURATION_METRIC:
            continue
        for s in family.samples:
            if s.name.endswith("_bucket"):
                found[s.labels["le"]] = s.value
            else:
                found[s.name.rsplit("_", 1)[1]] = s.value
    return found


@pytest.mark.parametrize(("kind", "app"), CASES)
async def test_responses_name_the_pod_and_the_histogram_counts_requests(
        kind: str, app: str, tmp_path: Path) -> None:
    replica = start_replica(kind, tmp_path, app=app,
                            env={"POD_NAME": f"llm-{kind}-0", "HOSTNAME": "not-this"})
    base = f"http://{replica.address}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            pings = [await client.get("/ping") for _ in range(5)]
            async with client.stream("POST", "/v1/completions", json=STREAM) as stream:
                body = await stream.aread()
            posted = await client.post("/v1/completions", json={"max_tokens": 2,
                                                                "token_interval": 0})
            # Probes and scrapes are on the admin port: not requests of the app.
            await client.get(f"{replica.admin}/readyz")
            await client.get(f"{replica.admin}/metrics")
            metrics = (await client.get(f"{replica.admin}/metrics")).text
    finally:
        replica.stop()
    want = [f"llm-{kind}-0"]
    for response in [*pings, stream, posted]:
        assert response.status_code == 200
        # Exactly once: under run the proxy replaces any header of the child's.
        assert response.headers.get_list(POD_HEADER) == want, response.headers
    assert body.endswith(b"data: [DONE]\n\n")
    counts = _duration_counts(metrics)
    assert counts["count"] == 7 == counts["+Inf"], metrics
    received = next(s.value for f in text_string_to_metric_families(metrics)
                    if f.name == "drainsafe_requests" for s in f.samples)
    assert received == 7, metrics  # the probe and the scrapes are not the app's
    # The 0.8 s stream is above 0.5 s; the pings and the 2-token answer are well below.
    assert counts["0.5"] == 6 and counts["2.0"] == 7, counts
    assert counts["sum"] >= 0.75


@pytest.mark.parametrize(("kind", "app"), [c for c in CASES if c != ("run", WRAPPED)])
async def test_no_pod_name_no_header(kind: str, app: str, tmp_path: Path) -> None:
    replica = start_replica(kind, tmp_path, app=app,
                            env={"POD_NAME": "", "HOSTNAME": ""})
    try:
        async with httpx.AsyncClient(base_url=f"http://{replica.address}",
                                     timeout=10) as client:
            response = await client.get("/ping")
            ready = await client.get(f"{replica.admin}/readyz")
    finally:
        replica.stop()
    assert response.status_code == 200 and ready.status_code == 200
    assert POD_HEADER not in response.headers and POD_HEADER not in ready.headers


def _sample(text: str, name: str) -> float:
    return next(s.value for f in text_string_to_metric_families(text) if f.name == name
                for s in f.samples)


async def test_serve_sees_a_request_running_behind_a_pipelined_one(tmp_path: Path) -> None:
    # uvicorn shows only a connection's newest request; the one running before it must
    # still count as in flight and be timed in full, not as a request shorter than a tick.
    replica = start_replica("serve", tmp_path)
    host, port = replica.address.split(":")
    body = json.dumps(STREAM).encode()
    pipelined = (b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
                 b"\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
                 + b"GET /ping HTTP/1.1\r\nhost: x\r\n\r\n")
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(pipelined)
        await writer.drain()
        async with httpx.AsyncClient(base_url=f"http://{replica.address}",
                                     timeout=10) as client:
            received = b""

            async def read_all() -> None:
                nonlocal received
                while b"data: [DONE]" not in received or not received.endswith(b"pong"):
                    chunk = await reader.read(65536)
                    assert chunk, received
                    received += chunk

            reading = asyncio.ensure_future(read_all())
            # Sampled while the stream runs (not at a fixed 0.35 s, which a busy machine
            # may not have reached the stream by): both requests must count as in flight.
            samples: list[float] = []
            while not reading.done() and 2 not in samples:
                samples.append(_sample((await client.get(f"{replica.admin}/metrics")).text,
                                       "drainsafe_in_flight_requests"))
            async with asyncio.timeout(10):
                await reading
            writer.close()
            after = (await client.get(f"{replica.admin}/metrics")).text
    finally:
        replica.stop()
    assert received.count(b"HTTP/1.1 200") == 2
    assert 2 in samples, samples  # running + queued
    assert max(samples) == 2, samples
    counts = _duration_counts(after)
    # Both took ~0.8 s (the ping waited behind the stream): neither is a short request.
    assert counts["count"] == 2 and counts["0.5"] == 0 and counts["2.0"] == 2, counts


async def test_serve_times_the_apps_own_answer_on_a_runtime_path(tmp_path: Path) -> None:
    replica = start_replica("serve", tmp_path, app="server_apps:slow_own_readyz")
    try:
        async with httpx.AsyncClient(base_url=f"http://{replica.address}",
                                     timeout=10) as client:
            ready = [await client.get("/readyz") for _ in range(2)]
            await client.get(f"{replica.admin}/livez")  # the admin port: not the app's work
            metrics = (await client.get(f"{replica.admin}/metrics")).text
    finally:
        replica.stop()
    assert all(r.text == "the app's own, slow readiness" for r in ready)
    counts = _duration_counts(metrics)
    assert counts["count"] == 2 and counts["0.5"] == 0, counts  # 0.6 s each, not a tick
    assert _sample(metrics, "drainsafe_requests") == 2
