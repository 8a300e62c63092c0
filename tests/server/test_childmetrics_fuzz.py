"""Fuzz: the child's Prometheus text in signal mode ends in a count or UnreadableMetrics."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainsafe.server.childmetrics import UnreadableMetrics, in_flight

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WANTED = ("vllm:num_requests_running", "inflight")

names = st.sampled_from([*WANTED, "other", "inflight_total", "x{"])
values = st.sampled_from(["1", "0", "-3", "NaN", "+Inf", "-Inf", "1e300", "2.5", "abc", ""])
labels = st.sampled_from(["", '{a="b"}', '{le="+Inf"}', '{a="\\"}', "{", '{a="b",}'])
lines = st.one_of(
    st.builds(lambda n, lab, v: f"{n}{lab} {v}", names, labels, values),
    st.builds(lambda n, t: f"# TYPE {n} {t}", names,
              st.sampled_from(["gauge", "counter", "histogram", "bogus", ""])),
    st.builds(lambda n: f"# HELP {n} help", names),
    st.text(max_size=30),
)


def _check(text: str) -> None:
    try:
        count = in_flight(text, WANTED)
    except UnreadableMetrics:
        return
    assert isinstance(count, int) and count >= 0


@FUZZ
@given(st.lists(lines, max_size=8))
def test_metric_lines_end_in_a_count_or_a_clean_error(parts: list[str]) -> None:
    _check("\n".join(parts) + "\n")


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text_ends_in_a_count_or_a_clean_error(text: str) -> None:
    _check(text)


def test_a_sum_that_is_not_a_finite_count_is_unreadable_never_idle() -> None:
    # An unknown figure must not read as 0 (idle): the supervisor would SIGTERM at once.
    for bad in ("NaN", "+Inf", "-4"):
        with pytest.raises(UnreadableMetrics):
            in_flight(f'inflight{{a="1"}} {bad}\nvllm:num_requests_running 2\n', WANTED)
    assert in_flight('inflight{a="4"} 3\nvllm:num_requests_running 2.5\n', WANTED) == 6
