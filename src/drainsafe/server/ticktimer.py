"""Request durations from periodic looks at the requests in flight, at no cost per request.

`drainsafe serve` cannot afford two clock reads and a histogram update per request: on a
trivial endpoint they cost about 2 % of uvicorn's own work, and serve's goal is >= 0.97x
bare uvicorn (docs/server.md, "Tests and figures"). It already looks at uvicorn's request cycles on
every tick of the runtime (0.1 s) to count work in flight, so it times requests there:

- a request first seen in flight began after the previous look; when a later look finds it
  answered, it took at most the time from that previous look to now;
- a request never seen in flight began and was answered between two looks, so it took at
  most the time between them; how many there were comes from the server's count of
  answered requests.

Every duration recorded is therefore an upper bound, at most two look intervals above the
true one (one for requests shorter than an interval). That is the safe side for what the
histogram is for: `drainsafe tune` sets the shutdown deadline from its p99 bucket, and the
buckets that matter there are seconds apart. Requests that were not answered in full
(their client left, or the deadline ended them) are not durations and are left out.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Hashable
from typing import Generic, TypeVar

from drainsafe.server.runtime import DurationHistogram

R = TypeVar("R", bound=Hashable)


class Outcome(enum.Enum):
    RUNNING = "running"
    ANSWERED = "answered"
    """The response was sent in full."""
    LOST = "lost"
    """Ended otherwise: the client left, or the deadline cut it."""


class TickTimer(Generic[R]):
    """Feeds `histogram` from looks at the requests in flight (see the module's notes)."""

    def __init__(self, histogram: DurationHistogram, outcome: Callable[[R], Outcome],
                 now: float) -> None:
        self.histogram = histogram
        self.outcome = outcome
        self.last_look = now
        self.began_after: dict[R, float] = {}
        """Requests seen in flight -> the look before they were first seen."""
        self.answered = 0
        """Answered requests accounted for so far (the server's count at the last look)."""
        self.not_timed = 0
        """Answered requests that are not the app's (probes, scrapes): never recorded."""
        self.lost = 0
        """Requests seen in flight that ended without a full answer."""

    def look(self, now: float, in_flight: Collection[R], answered: int) -> None:
        """`in_flight`: the requests still owed a response; `answered`: how many the server
        has answered in full since it started, the ones in `not_timed` included."""
        observe = self.histogram.observe
        seen_answered = 0
        for request, since in list(self.began_after.items()):
            if request in in_flight:
                continue
            outcome = self.outcome(request)
            if outcome is Outcome.RUNNING:
                continue  # out of view for now (e.g. the runtime is answering it)
            del self.began_after[request]
            if outcome is Outcome.ANSWERED:
                observe(now - since)
                seen_answered += 1
            else:
                self.lost += 1
        for request in in_flight:
            self.began_after.setdefault(request, self.last_look)
        answered -= self.not_timed
        unseen = answered - self.answered - seen_answered
        if unseen > 0:
            self.histogram.observe_many(now - self.last_look, unseen)
        self.answered = answered
        self.last_look = now

    def exclude(self, request: R, *, answered: bool) -> None:
        """`request` is not the app's (the runtime answered it): never timed or counted."""
        self.began_after.pop(request, None)
        if answered:
            self.not_timed += 1

    @property
    def received(self) -> int:
        """Requests received so far, as far as looks can tell: answered, ended otherwise
        after a look saw them, or in flight. One whose client left before any answer and
        before a look saw it is not counted."""
        return self.answered + self.lost + len(self.began_after)
