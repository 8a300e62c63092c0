"""Fixtures for every test directory."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from drainsafe.lab.probes import LoopStalls


@pytest.fixture
async def loop_stalls() -> AsyncIterator[LoopStalls]:
    """The test's event loop's measured stalls (the lab's too, when it runs in the test's
    process): timing assertions add the stall they measured over their window, so a busy
    machine widens the margin by the delay it really imposed and no more."""
    stalls = LoopStalls.for_loop()
    stalls.acquire()
    try:
        yield stalls
    finally:
        stalls.release()
