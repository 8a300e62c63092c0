"""verify's counts agree with hey's on the same run, for what hey can see; and where hey is
blind (a stream cut short with a clean 200), verify is not.

hey and verify load the same real uvicorn at the same time. The target answers each client's
n-th request by a fixed pattern (200 / 503 / 500) and keeps a tally of what it sent to each
client (by User-Agent), so both tools are checked against the server's ground truth.
"""

from __future__ import annotations

import asyncio
import re
import shutil

import httpx
import pytest

from drainsafe.verify.load import LoadSpec, run_load
from verify.conftest import Target
from verify.faults import refused_port

pytestmark = pytest.mark.skipif(shutil.which("hey") is None, reason="hey is not installed")
CONCURRENCY = 4


async def run_hey(url: str, seconds: float) -> tuple[dict[int, int], dict[str, int]]:
    proc = await asyncio.create_subprocess_exec(
        "hey", "-z", f"{seconds}s", "-c", str(CONCURRENCY), url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), seconds + 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = out.decode()
    statuses = {int(code): int(n) for code, n in
                re.findall(r"^\s+\[(\d{3})\]\s+(\d+) responses", text, re.M)}
    errors: dict[str, int] = {}
    for n, message in re.findall(r"^\s+\[(\d+)\]\s+(.*)$", text.split("Error distribution:")[-1]
                                 if "Error distribution:" in text else "", re.M):
        kind = "refused" if "connection refused" in message else "reset" if "reset" in message \
            else "other"
        errors[kind] = errors.get(kind, 0) + int(n)
    return statuses, errors


async def test_status_counts_agree_with_hey_and_the_server(target: Target) -> None:
    url = f"{target.url}/pattern"
    spec = LoadSpec(url=url, duration=2.0, concurrency=CONCURRENCY, timeout=10)
    (hey_statuses, hey_errors), run = await asyncio.gather(run_hey(url, 2.0), run_load(spec))
    async with httpx.AsyncClient() as client:
        tally = (await client.get(f"{target.url}/tally")).json()
    sent_to_verify = {int(k): v for k, v in tally["python-httpx"].items()}
    sent_to_hey = {int(k): v for k, v in tally["hey"].items()}

    ours = {200 if r.outcome.ok else int(r.outcome.status or 0): 0 for r in run.results}
    for r in run.results:
        ours[200 if r.outcome.ok else int(r.outcome.status or 0)] += 1
    # verify finishes its requests in flight, so it saw exactly what the server sent it.
    assert ours == sent_to_verify
    assert {r.outcome.label for r in run.results} == {"ok", "http_503", "http_500"}
    # hey may abandon up to one request per worker when its -z time is up.
    assert not hey_errors, hey_errors
    assert set(hey_statuses) == set(ours) == {200, 500, 503}
    for code, n in hey_statuses.items():
        assert sent_to_hey[code] - CONCURRENCY <= n <= sent_to_hey[code]
    # Same pattern, so the same shares (within one pattern period of rounding).
    for code in ours:
        share_ours = ours[code] / sum(ours.values())
        share_hey = hey_statuses[code] / sum(hey_statuses.values())
        assert abs(share_ours - share_hey) < 0.05, (code, share_ours, share_hey)


async def test_refused_is_refused_for_both() -> None:
    async with refused_port() as url:
        (hey_statuses, hey_errors), run = await asyncio.gather(
            run_hey(url, 0.5), run_load(LoadSpec(url=url, duration=0.5, concurrency=2)))
    assert not hey_statuses and set(hey_errors) == {"refused"}
    assert {r.outcome.label for r in run.results} == {"refused"}


async def test_cut_stream_is_200_for_hey_and_truncated_for_verify(target: Target) -> None:
    url = f"{target.url}/sse-cut?tokens=3"
    (hey_statuses, hey_errors), run = await asyncio.gather(
        run_hey(url, 1.0), run_load(LoadSpec(url=url, duration=1.0, concurrency=2)))
    assert set(hey_statuses) == {200} and not hey_errors  # hey: all fine
    assert {r.outcome.label for r in run.results} == {"truncated"}
    assert all(r.outcome.detail == "stream ended without [DONE]" for r in run.results)
