"""`drainsafe demo`'s flags: bad values are named before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "drainsafe", "demo", *args],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(("args", "message"), [
    (("--runs", "5"), "run numbers are 1 to 4"),
    (("--runs", "one"), "expected run numbers like 1,3"),
    (("--scale", "0.5"), "--scale 0.5: must be between 1 and 30"),
    (("--scale", "100"), "--scale 100: must be between 1 and 30"),
])
def test_bad_flags_are_named(args: tuple[str, ...], message: str) -> None:
    done = demo(*args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_an_output_directory_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    done = demo("--out", str(blocker / "out"))
    assert done.returncode == 2, done.stderr
    assert "--out" in done.stderr and str(blocker) in done.stderr
