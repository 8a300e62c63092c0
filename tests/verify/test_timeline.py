"""The timeline picture, from a real failure: plain uvicorn SIGTERMed under streaming load.

Plain uvicorn closes its listener on SIGTERM and cancels streams at its graceful timeout, so
verify must see refused connections and cut streams; the picture must show them against the
termination and exit the test observed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from drainsafe.verify.load import LoadSpec, RequestResult, run_load
from drainsafe.verify.record import POD_EXITED, POD_TERMINATING, LifecycleEvent, Record
from drainsafe.verify.timeline import bin_outcomes, render_html, render_png
from verify.conftest import start_uvicorn, stop_process


async def test_sigterm_on_plain_uvicorn_is_seen_and_drawn(tmp_path: Path) -> None:
    url, process = start_uvicorn("--timeout-graceful-shutdown", "1", "--log-level", "critical")
    events: list[LifecycleEvent] = []
    first_streams_done = asyncio.Event()
    stop = asyncio.Event()
    oks = 0

    def on_result(result: RequestResult) -> None:
        nonlocal oks
        oks += result.outcome.ok
        if oks >= 8:
            first_streams_done.set()

    try:
        zero = (time.monotonic(), 0.0)

        def now() -> float:
            return round(time.monotonic() - zero[0], 3)

        async def terminate() -> None:
            # SIGTERM while the second round of 2 s streams is in flight, whatever the
            # machine's speed; stop the load shortly after the process is gone.
            try:
                async with asyncio.timeout(30):
                    await first_streams_done.wait()
                await asyncio.sleep(0.3)
                os.killpg(process.pid, signal.SIGTERM)
                events.append(LifecycleEvent(now(), POD_TERMINATING, "web-5d8f7-x2k9q",
                                             "SIGTERM"))
                while process.poll() is None:
                    await asyncio.sleep(0.02)
                events.append(LifecycleEvent(now(), POD_EXITED, "web-5d8f7-x2k9q",
                                             f"exit {process.returncode}"))
                await asyncio.sleep(0.3)
            finally:
                stop.set()

        spec = LoadSpec(url=f"{url}/sse?tokens=20&interval=0.1", duration=60,
                        concurrency=8, timeout=10)
        killer = asyncio.create_task(terminate())
        run = await run_load(spec, clock_zero=zero, on_result=on_result, stop=stop)
        async with asyncio.timeout(15):
            await killer
    finally:
        stop_process(process)
    record = Record.from_run(run, events)
    counts = record.summary().counts
    assert counts["ok"] > 0
    assert counts.get("refused", 0) > 0, counts   # listener closed at SIGTERM
    assert counts.get("truncated", 0) > 0, counts  # streams cancelled at the graceful timeout
    cut = [r for r in record.requests if r.outcome.label == "truncated"]
    assert all(r.bytes > 0 and r.outcome.detail for r in cut)
    terminated_at = events[0].t
    assert all(r.end >= terminated_at for r in record.requests if not r.outcome.ok)

    bins = bin_outcomes(record.requests, record.elapsed)
    assert sum(bins.rates["refused"]) * bins.width == counts["refused"]

    png = render_png(record, tmp_path / "timeline.png")
    page = render_html(record, png, tmp_path / "timeline.html")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 850)  # with a pod lane panel
    assert len(data) > 30_000  # bars, scatter, event lines: far from a blank canvas
    text = page.read_text()
    assert "refused" in text and "web-5d8f7-x2k9q" in text
    if os.environ.get("DRAINSAFE_KEEP_PICTURE"):
        Path(os.environ["DRAINSAFE_KEEP_PICTURE"]).write_bytes(data)
