from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from drainsafe.kube.retry import Backoff


@given(st.integers(0, 50), st.integers(0, 2**32), st.none() | st.floats(0, 100))
def test_backoff_bounded_and_honours_retry_after(attempt: int, seed: int,
                                                 retry_after: float | None) -> None:
    b = Backoff(base=0.5, cap=10.0)
    d = b.delay(attempt, random.Random(seed), retry_after)
    assert d >= 0.25 or (retry_after or 0) > 0
    if retry_after:
        assert retry_after <= d <= max(10.0, retry_after * 1.1) + 1e-9
    else:
        assert d <= 10.0


def test_jitter_spreads_clients() -> None:
    b = Backoff()
    delays = {round(b.delay(3, random.Random(seed)), 6) for seed in range(20)}
    assert len(delays) > 10
