"""The record round-trips, summarises, and names what is wrong with a bad file."""

from __future__ import annotations

from pathlib import Path

import pytest

from drainsafe.verify.load import LoadRun, LoadSpec, RequestResult
from drainsafe.verify.outcome import Kind, Outcome
from drainsafe.verify.record import LifecycleEvent, Record, percentile


def sample() -> Record:
    spec = LoadSpec(url="http://127.0.0.1:9/x", duration=2)
    run = LoadRun(spec=spec, started_at=1000.0, elapsed=2.5, results=[
        RequestResult(0.0, 1.0, Outcome(Kind.OK, 200), 0.01, 0.02, 100, "web-a"),
        RequestResult(0.5, 0.5, Outcome(Kind.REFUSED, None, "connection refused")),
        RequestResult(1.0, 1.8, Outcome(Kind.HTTP, 502, "")),
    ])
    return Record.from_run(run, [LifecycleEvent(0.4, "terminating", "web-a", at=0.0)])


def test_round_trip(tmp_path: Path) -> None:
    record = sample()
    record.write(tmp_path)
    back = Record.read(tmp_path)
    assert back.requests == record.requests and back.events == record.events
    summary = back.summary()
    assert summary.counts == {"ok": 1, "http_502": 1, "refused": 1}
    assert summary.failed == 2 and summary.total_p99 == 1.0


def test_percentile_is_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 99) == 99.0
    assert percentile(values, 50) == 50.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 99) is None


@pytest.mark.parametrize(("content", "message"), [
    ("{", "invalid JSON at line 1"),
    ("[]", "top level is not an object"),
    ('{"version": 9}', "unsupported version 9"),
    ('{"version": 1, "url": "x"}', "missing field 'requests'"),
])
def test_bad_record_is_named(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "record.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=r"record\.json") as info:
        Record.read(path)
    assert message in str(info.value)
