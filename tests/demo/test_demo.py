"""`drainsafe demo`: the README's main command, end to end (real lab, real
processes). The kubectl side of --compare runs the same scenario code as
tests/drain/test_acceptance.py, which asserts the difference."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from PIL import Image

pytestmark = pytest.mark.e2e


async def test_demo(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", "demo", "--out", str(out), "--model-load", "1",
        "-o", "json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"})
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 110)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, stderr.decode()[-3000:]
    [ours] = json.loads(stdout)
    assert ours["tool"] == "drainsafe"
    assert ours["ok"] >= 20 and ours["total_failed"] == 0 and ours["truncated"] == 0
    assert ours["ready_at_return"] == ours["replicas"] == 2
    assert ours["lowest_ready"] == 2 and ours["strategy"] == "surge"  # make before break
    assert (out / "timeline-drainsafe.png").stat().st_size > 10_000
    with Image.open(out / "timeline-drainsafe.png") as picture:  # says what was drained
        assert picture.info["Title"].startswith("drainsafe demo: drainsafe drain of node ")
    assert json.loads((out / "results.json").read_text())[0]["tool"] == "drainsafe"
