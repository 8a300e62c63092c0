"""drainsafe serve's durations, taken on looks at the requests in flight.

Requests are generated with true start and end times and looked at on an irregular clock, as
the event loop's tick is; the histogram must count each answered request once, never put a
request in a bucket below its true duration, and be off by at most two look intervals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

from hypothesis import example, given, settings
from hypothesis import strategies as st

from drainsafe.server.runtime import DURATION_BUCKETS, DurationHistogram
from drainsafe.server.ticktimer import Outcome, TickTimer


@dataclass(eq=False)
class Request:
    start: float
    end: float
    answered: bool
    """False: the client left (or the deadline cut it) at `end`."""

    def at(self, t: float) -> Outcome:
        if t < self.end:
            return Outcome.RUNNING
        return Outcome.ANSWERED if self.answered else Outcome.LOST


class Recording(DurationHistogram):
    """The real histogram, also keeping each duration recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.recorded: list[float] = []

    def observe(self, seconds: float) -> None:
        self.recorded.append(seconds)
        super().observe(seconds)

    def observe_many(self, seconds: float, n: int) -> None:
        self.recorded.extend([seconds] * n)
        super().observe_many(seconds, n)


def drive(requests: list[Request], looks: list[float], probes: int = 0) -> Recording:
    """Look at `requests` at each time in `looks`, as DrainServer does on its tick; `probes`
    answered requests that are not the app's are in the server's count from the start."""
    histogram = Recording()
    now = looks[0]
    timer: TickTimer[Request] = TickTimer(histogram, lambda r: r.at(now), now)
    timer.not_timed = probes
    for now in looks[1:]:
        in_flight = {r for r in requests if r.start <= now < r.end}
        answered = probes + sum(1 for r in requests if r.answered and r.end <= now)
        timer.look(now, in_flight, answered)
    return histogram


def cumulative(durations: list[float]) -> list[int]:
    return [sum(1 for d in durations if d <= bound) for bound in (*DURATION_BUCKETS, math.inf)]


requests_st = st.lists(
    st.tuples(st.floats(0.0, 20.0), st.floats(0.0, 12.0), st.booleans()).map(
        lambda t: Request(start=t[0], end=t[0] + t[1], answered=t[2])),
    max_size=40)
gaps_st = st.lists(st.floats(0.01, 0.4), min_size=1, max_size=400)


@given(requests_st, gaps_st)
# The tightest case: begun just after one look, answered just before another.
@example([Request(start=0.1001, end=0.2999, answered=True)], [0.1, 0.1, 0.1])
@settings(max_examples=300, deadline=None)
def test_every_answered_request_counts_once_at_or_above_its_duration(
        requests: list[Request], gaps: list[float]) -> None:
    looks = [0.0]
    for gap in gaps:
        looks.append(looks[-1] + gap)
    looks.append(40.0)  # every request is over by the last look
    done = [r for r in requests if r.answered]
    h = drive(requests, looks, probes=3)
    recorded = [int(n) for _, n in h.cumulative()]
    true = cumulative([r.end - r.start for r in done])
    assert recorded[-1] == h.count == len(done)  # once each; probes and lost ones left out
    # Upper bounds: no more requests at or below any bound than there truly are.
    assert all(rec <= tr for rec, tr in zip(recorded, true, strict=True))
    # Each recorded duration bounds a true one from above, by at most two look intervals:
    # then so do the sorted lists, element by element.
    widest = max(b - a for a, b in pairwise(looks))
    for rec, tr in zip(sorted(h.recorded), sorted(r.end - r.start for r in done), strict=True):
        assert tr - 1e-9 <= rec <= tr + 2 * widest + 1e-9
    assert math.isclose(h.sum, sum(h.recorded), abs_tol=1e-6)


def test_at_uvicorns_tick_short_requests_land_in_the_tick_bucket_and_long_ones_close_by() -> None:
    ticks = [0.1003 * i for i in range(0, 200)]  # a 0.1 s sleep and the loop's lag
    requests = [Request(start=1.001 + 0.01 * i, end=1.002 + 0.01 * i, answered=True)
                for i in range(50)]  # 1 ms each
    requests.append(Request(start=2.05, end=9.25, answered=True))  # 7.2 s stream
    requests.append(Request(start=3.05, end=4.0, answered=False))  # client left
    h = drive(requests, ticks)
    rows = dict(h.cumulative())
    # Shorter than a tick: recorded as the tick, a little over 0.1 s, so in le=0.25.
    assert rows["0.1"] == 0 and rows["0.25"] == 50
    assert rows["5.0"] == 50 and rows["7.5"] == 51  # 7.2 s, at most two ticks more recorded
    assert rows["+Inf"] == 51


def test_a_request_out_of_view_but_running_is_timed_when_it_ends() -> None:
    # A pipelined request's predecessor: the server shows only the newest cycle.
    histogram = DurationHistogram()
    hidden = Request(start=0.05, end=3.0, answered=True)
    now = 0.0
    timer: TickTimer[Request] = TickTimer(histogram, lambda r: r.at(now), now)
    for now in (0.1, 0.2):
        timer.look(now, {hidden}, 0)
    for now in (0.3, 2.9):
        timer.look(now, set(), 0)  # out of view, still running: not timed yet
    assert histogram.count == 0
    now = 3.1
    timer.look(now, set(), 1)
    assert histogram.count == 1 and 2.95 <= histogram.sum <= 3.1


def test_a_request_the_runtime_answered_is_neither_timed_nor_counted() -> None:
    histogram = DurationHistogram()
    probe = Request(start=0.05, end=0.3, answered=True)
    now = 0.0
    timer: TickTimer[Request] = TickTimer(histogram, lambda r: r.at(now), now)
    now = 0.1
    timer.look(now, {probe}, 0)  # seen before the app said 404 and the runtime answered
    timer.exclude(probe, answered=True)
    now = 0.4
    timer.look(now, set(), 1)  # the server's count includes the runtime's answer
    assert histogram.count == 0 and timer.received == 0
