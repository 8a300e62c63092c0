"""Timeline arithmetic alone: bins keep every request, lanes follow the events."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from drainsafe.verify.load import LoadRun, LoadSpec, RequestResult
from drainsafe.verify.outcome import Kind, Outcome
from drainsafe.verify.record import LifecycleEvent, Record
from drainsafe.verify.timeline import bin_outcomes, in_flight, pod_lanes, render_png

LABELS = [Outcome(Kind.OK, 200), Outcome(Kind.REFUSED), Outcome(Kind.HTTP, 503)]


@given(st.lists(st.tuples(st.floats(0, 50), st.floats(0, 5), st.integers(0, 2)), max_size=200))
def test_bins_keep_every_request(rows: list[tuple[float, float, int]]) -> None:
    requests = [RequestResult(s, s + d, LABELS[k]) for s, d, k in rows]
    bins = bin_outcomes(requests, 30.0)
    assert len(bins.edges) <= 60
    for outcome in LABELS:
        n = sum(1 for r in requests if r.outcome.label == outcome.label)
        assert round(sum(bins.rates.get(outcome.label, [0.0])) * bins.width) == n
    times = [0.0, 10.0, 60.0]
    assert in_flight(requests, times) == [
        sum(1 for r in requests if r.start <= t < r.end) for t in times]


def test_lanes_and_other_events(tmp_path: Path) -> None:
    events = [LifecycleEvent(1.0, "terminating", "web-a-x1"), LifecycleEvent(1.1, "ready", "web-b"),
              LifecycleEvent(3.0, "exited", "web-a-x1", "server exit 0"),
              LifecycleEvent(3.2, "deleted", "web-a-x1"),
              LifecycleEvent(0.5, "drain_started", "node-1")]  # not a pod: a marked line
    lanes = pod_lanes(events)
    assert [lane.pod for lane in lanes] == ["web-a-x1", "web-b"]
    assert (lanes[0].terminating, lanes[0].exited, lanes[0].gone) == (1.0, 3.0, 3.2)
    run = LoadRun(LoadSpec(url="http://127.0.0.1:9/", duration=4), 0.0,
                  [RequestResult(0.1, 0.2, LABELS[0]), RequestResult(2.0, 2.0, LABELS[1])],
                  0, 4.0)
    png = render_png(Record.from_run(run, events), tmp_path / "t.png")
    assert png.stat().st_size > 20_000
