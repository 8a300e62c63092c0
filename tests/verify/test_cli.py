"""drainsafe verify end to end against a real uvicorn: exit codes, record, summary, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drainsafe.cli import main
from drainsafe.verify.record import Record
from verify.conftest import Target


def test_clean_run_exits_zero_and_writes_record(target: Target, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", f"{target.url}/sse?tokens=3", "--duration", "0.6", "-c", "4",
                 "--out", str(tmp_path), "-o", "json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["failed"] == 0 and summary["total"] > 0
    record = Record.read(tmp_path)
    assert len(record.requests) == summary["total"]
    assert all(r.outcome.ok and r.bytes > 0 and r.ttfb is not None for r in record.requests)
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
    assert "data:image/png;base64," in (tmp_path / "timeline.html").read_text()


def test_failures_exit_one_with_the_code_named(target: Target,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", f"{target.url}/status/503", "--duration", "0.3", "-c", "2",
                 "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1
    assert "http_503" in out and "failed" in out


def test_stream_without_end_marker_fails(target: Target) -> None:
    assert main(["verify", f"{target.url}/sse-cut?tokens=2", "--duration", "0.3",
                 "-o", "json"]) == 1
    # With the marker check disabled the same stream passes.
    assert main(["verify", f"{target.url}/sse-cut?tokens=2", "--duration", "0.3",
                 "--stream-end", "", "-o", "json"]) == 0


def test_open_loop_sends_at_the_rate(target: Target, tmp_path: Path) -> None:
    assert main(["verify", f"{target.url}/ok", "--duration", "1", "--rate", "50",
                 "--out", str(tmp_path), "-o", "json"]) == 0
    record = Record.read(tmp_path / "record.json")
    assert record.mode == "open"
    assert 45 <= len(record.requests) <= 51


@pytest.mark.parametrize(("argv", "message"), [
    (["verify", "ftp://x/"], "must start with http"),
    (["verify", "http://127.0.0.1:1/", "--header", "nocolon"], "NAME:VALUE"),
    (["verify", "http://127.0.0.1:1/", "--body-file", "/nonexistent/b"], "--body-file"),
    (["verify", "http://127.0.0.1:1/", "--duration", "0"], "duration"),
    (["verify", "http://127.0.0.1:1/", "--selector", "app=x"], "--namespace"),
    (["verify", "http://127.0.0.1:1/", "-n", "default", "--kubeconfig", "/nonexistent/kc"],
     "/nonexistent/kc"),
])
def test_bad_input_is_a_usage_error(argv: list[str], message: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err
