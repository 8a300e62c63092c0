"""The load in a child process: results stream back as they complete, on the caller's clock;
stop lets the requests in flight finish; the child does not outlive its parent."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from drainsafe.verify.load import LoadSpec, RequestResult, now
from drainsafe.verify.loadproc import LoadProcessFailed, run_load_process
from verify.conftest import Target

SRC = Path(__file__).resolve().parents[2] / "src"


async def test_results_stream_back_and_stop_lets_streams_finish(target: Target) -> None:
    # 1 s streams: a stop lands while every worker has one in flight.
    spec = LoadSpec(url=f"{target.url}/sse?tokens=20&interval=0.05", method="POST",
                    body=b'{"prompt": "x"}', headers=(("user-agent", "loadproc/1"),),
                    duration=600, concurrency=3)
    zero = (now(), 0.0)
    first = asyncio.Event()
    received: list[tuple[RequestResult, float]] = []

    def on_result(result: RequestResult) -> None:
        received.append((result, now() - zero[0]))
        first.set()

    stop = asyncio.Event()
    loader = asyncio.ensure_future(run_load_process(spec, on_result=on_result, stop=stop,
                                                    clock_zero=zero))
    await first.wait()
    stopped_at = now() - zero[0]
    stop.set()
    run = await loader
    assert [r for r, _ in received] == run.results and run.started_at == 0.0
    # Streamed as each completed, not at the end: the first came before the stop.
    assert received[0][1] <= stopped_at
    # One clock: the child's end time of each request is before the parent got it.
    assert all(r.end <= got for r, got in received)
    # The stop crosses a pipe: a worker whose stream ended just then may start one more,
    # no worker starts two. What was in flight finished whole (end marker seen).
    assert len([r for r in run.results if r.start > stopped_at]) <= spec.concurrency
    assert all(r.outcome.ok for r in run.results), [r.outcome for r in run.results]
    assert len(run.results) > len([r for r, got in received if got <= stopped_at])
    assert run.elapsed >= max(r.end for r in run.results)


PARENT = textwrap.dedent("""
    import asyncio, os, sys
    from drainsafe.verify.load import LoadSpec
    from drainsafe.verify.loadproc import LoadProcessFailed, run_load_process

    async def main() -> None:
        first = asyncio.Event()
        spec = LoadSpec(url=sys.argv[1], duration=600, concurrency=1)
        loader = asyncio.ensure_future(run_load_process(spec, on_result=lambda r: first.set()))
        await first.wait()
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
            print(f.read().split()[0], flush=True)
        await loader

    asyncio.run(main())
""")


def test_the_child_dies_with_its_parent(target: Target) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, f"{target.url}/ok"],
                              stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        pidfd = os.pidfd_open(child)
    finally:
        parent.kill()
        parent.wait()
    try:
        # A pidfd is readable once its process has exited; the bound only ends a broken run.
        readable, _, _ = select.select([pidfd], [], [], 60)
        assert readable == [pidfd], f"load process {child} outlived its parent"
    finally:
        os.close(pidfd)


async def test_a_load_process_that_dies_is_an_error_not_a_short_run(target: Target) -> None:
    first = asyncio.Event()
    loader = asyncio.ensure_future(run_load_process(
        LoadSpec(url=f"{target.url}/ok", duration=600, concurrency=1),
        on_result=lambda _r: first.set()))
    await first.wait()
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
        children = [int(pid) for pid in f.read().split()]
    [child] = [pid for pid in children
               if b"drainsafe.verify.loadproc" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    os.kill(child, signal.SIGKILL)
    with pytest.raises(LoadProcessFailed) as failed:
        await loader
    assert failed.value.returncode == -signal.SIGKILL
