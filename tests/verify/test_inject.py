"""verify names every failure kind: each one injected by a small real server (issue 6)."""

from __future__ import annotations

import asyncio

import pytest

from drainsafe.verify.load import LoadSpec, run_load
from verify.faults import fault_server

EXPECTED = {
    "ok_sse": ("ok", ""),
    "ok_plain": ("ok", ""),
    "http_500": ("http_500", ""),
    "http_502": ("http_502", ""),
    "http_503": ("http_503", ""),
    "refused": ("refused", ""),
    "reset": ("reset", "before a response"),
    "reset_mid_stream": ("reset", "after"),
    "closed": ("closed", ""),
    "timeout": ("timeout", ""),
    "truncated_sse": ("truncated", "without [DONE]"),
    "broken_chunked": ("truncated", "broken chunked framing"),
    "cut_chunked": ("truncated", "without its last chunk"),
    "drain_marker": ("drain_marker", ""),
}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
async def test_each_fault_is_named(fault: str) -> None:
    label, detail = EXPECTED[fault]
    async with fault_server(fault) as url:
        # Stopped after a few answers, not after a fixed 0.2 s: on a busy machine the
        # workers' start-up alone can outlast that, and then nothing is sent at all.
        stop = asyncio.Event()
        seen: list[object] = []

        def on_result(result: object) -> None:
            seen.append(result)
            if len(seen) >= 4:
                stop.set()

        spec = LoadSpec(url=url, duration=60, concurrency=2, timeout=0.3)
        run = await run_load(spec, stop=stop, on_result=on_result)
    assert run.results, "no request was sent"
    labels = {r.outcome.label for r in run.results}
    assert labels == {label}, f"{fault}: {labels}"
    assert all(detail in r.outcome.detail for r in run.results)
    if label == "ok":
        assert all(r.ttfb is not None and r.total >= r.ttfb for r in run.results)
