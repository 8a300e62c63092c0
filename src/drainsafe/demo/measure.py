"""What a demo run showed, as pure functions of what it recorded.

- Failed requests by cause. A connection refused or reset before any response is the
  termination race (the seeds: the server stopped listening while proxies still sent it new
  connections); an HTTP 5xx is a proxy's or server's error answer; a stream that had started
  and was cut within `KILL_WINDOW` of a container's exit by SIGKILL (exit code 137, 128 +
  signal 9, as container runtimes report it) was cut by SIGKILL, the seeds' 90 s generation
  under a 30 s grace; drainsafe's explicit SSE error event at its shutdown deadline is its own
  cause. Anything else is "other".
- Capacity: the lowest Ready count and the seconds spent below the desired count, from the
  history of Ready-count changes.
- The verdict: what each kind of run is there to show, and what it did not show.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from drainsafe.verify.load import RequestResult
from drainsafe.verify.outcome import Kind

RACE = "refused/reset"
HTTP_5XX = "5xx"
SIGKILL = "cut by SIGKILL"
MARKER = "drainsafe marker"
OTHER = "other"
CAUSES = (RACE, HTTP_5XX, SIGKILL, MARKER, OTHER)

SIGKILL_EXIT = 137
KILL_WINDOW = (1.5, 0.5)
"""A cut counts as SIGKILL's when it ended at most 1.5 s before the exit was observed
(the kubelet's status write and the watch come after the kill) or 0.5 s after it (the
proxy passes the close on)."""

Expect = Literal["race_and_kills", "no_race_but_dip", "nothing_lost"]


def started_stream(r: RequestResult) -> bool:
    return r.headers_at is not None


def cause(r: RequestResult, kills: Sequence[float]) -> str | None:
    """The cause of one failed request (None: it succeeded)."""
    kind = r.outcome.kind
    if kind is Kind.OK:
        return None
    if kind is Kind.DRAIN_MARKER:
        return MARKER
    if kind is Kind.HTTP:
        return HTTP_5XX if (r.outcome.status or 0) >= 500 else OTHER
    if kind in (Kind.REFUSED, Kind.RESET, Kind.CLOSED) and not started_stream(r):
        return RACE
    if kind in (Kind.TRUNCATED, Kind.RESET, Kind.CLOSED) and started_stream(r):
        before, after = KILL_WINDOW
        if any(k - before <= r.end <= k + after for k in kills):
            return SIGKILL
    return OTHER


def causes(results: Iterable[RequestResult], kills: Sequence[float]) -> dict[str, int]:
    """Failed requests by cause, only the causes that occurred, in CAUSES order."""
    counts = dict.fromkeys(CAUSES, 0)
    for r in results:
        c = cause(r, kills)
        if c is not None:
            counts[c] += 1
    return {k: v for k, v in counts.items() if v}


def truncated(results: Iterable[RequestResult]) -> int:
    """Streams that had started answering and did not finish."""
    return sum(1 for r in results if not r.outcome.ok and started_stream(r))


def seconds_below(history: Sequence[tuple[float, int]], since: float, until: float,
                  want: int) -> float:
    """Seconds in [since, until] with fewer than `want` Ready, from (time, count) changes."""
    total = 0.0
    count = next((c for t, c in reversed(history) if t <= since), want)
    t_prev = since
    for t, c in history:
        if t <= since:
            continue
        if t >= until:
            break
        if count < want:
            total += t - t_prev
        t_prev, count = t, c
    if count < want:
        total += max(until - t_prev, 0.0)
    return total


def lowest(history: Sequence[tuple[float, int]], since: float, until: float) -> int | None:
    """The lowest Ready count in [since, until] (None: no history)."""
    before = [c for t, c in history if t <= since]
    counts = before[-1:] + [c for t, c in history if since < t <= until]
    return min(counts) if counts else None


@dataclass(frozen=True)
class Shown:
    """The figures a verdict reads."""

    causes: dict[str, int]
    min_ready: int
    replicas: int

    @property
    def failed(self) -> int:
        return sum(self.causes.values())


def missing(expect: Expect, shown: Shown) -> list[str]:
    """What a run was there to show and did not (empty: it showed it)."""
    race, kills = shown.causes.get(RACE, 0), shown.causes.get(SIGKILL, 0)
    dip = shown.min_ready < shown.replicas
    out = []
    if expect == "race_and_kills":
        if not race:
            out.append("no request was refused or reset in the termination race")
        if not kills:
            out.append("no stream was cut by SIGKILL")
        if not dip:
            out.append("Ready capacity never dropped")
    elif expect == "no_race_but_dip":
        if race:
            out.append(f"{race} requests were refused or reset in the race")
        if kills:
            out.append(f"{kills} streams were cut by SIGKILL")
        if not dip:
            out.append("Ready capacity never dropped")
    else:
        if shown.failed:
            out.append(f"{shown.failed} requests failed")
        if dip:
            out.append(f"Ready capacity dropped to {shown.min_ready} of {shown.replicas}")
    return out
