"""verify names every failure kind: each one injected by a small real server (issue 6)."""

from __future__ import annotations

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
        spec = LoadSpec(url=url, duration=0.2, concurrency=2, timeout=0.3)
        run = await run_load(spec)
    assert run.results, "no request was sent"
    labels = {r.outcome.label for r in run.results}
    assert labels == {label}, f"{fault}: {labels}"
    assert all(detail in r.outcome.detail for r in run.results)
    if label == "ok":
        assert all(r.ttfb is not None and r.total >= r.ttfb for r in run.results)
