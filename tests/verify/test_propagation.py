"""The propagation bound on synthetic records: dense, sparse, one pod, many endpoints, no fresh
connection at all, and the gaps that must stop tune (load ended, failures hiding the pod).

Arrivals are drawn as a proxy makes them: each fresh connection goes to a pod chosen at random
among those in rotation at that moment (seeded, so every case is reproducible)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drainsafe.cli import main
from drainsafe.verify.load import LoadRun, LoadSpec, RequestResult
from drainsafe.verify.outcome import Kind, Outcome
from drainsafe.verify.propagation import (
    Arrival,
    Evidence,
    Gap,
    bound,
    bound_pod,
    evidence,
)
from drainsafe.verify.record import LifecycleEvent, Record
from drainsafe.verify.tune import CannotBound, from_record, tune

T0 = 10.0


def draw(rotation: dict[str, tuple[float, float]], rate: float, end: float,
         seed: int) -> list[Arrival]:
    """Poisson arrivals at `rate` over [0, end); each to a random pod in rotation then."""
    rng = random.Random(seed)
    out: list[Arrival] = []
    t = rng.expovariate(rate)
    while t < end:
        live = sorted(p for p, (a, b) in rotation.items() if a <= t < b)
        if live:
            out.append(Arrival(t, rng.choice(live)))
        t += rng.expovariate(rate)
    return out


def ev(arrivals: list[Arrival], terminations: dict[str, float]) -> Evidence:
    return Evidence(tuple(sorted(arrivals, key=lambda a: a.t)), terminations,
                    frozenset(a.pod for a in arrivals if a.pod))


def rollout(lag: float, rate: float, seed: int, pods: int = 2, end: float = 20.0
            ) -> Evidence:
    """`pods` pods in rotation; pod-0 terminates at T0 and leaves rotation `lag` later."""
    rotation = {f"pod-{i}": (0.0, math.inf) for i in range(pods)}
    rotation["pod-0"] = (0.0, T0 + lag)
    return ev(draw(rotation, rate, end, seed), {"pod-0": T0})


def test_dense_fresh_connections_bound_the_lag_closely() -> None:
    result = bound(rollout(lag=2.5, rate=40, seed=1))
    assert result.bounded
    (pod,) = result.pods
    assert 2.2 < pod.last <= 2.5  # a sample: short of the truth
    assert 2.5 <= result.value < 3.0  # the bound: past it, by the resolution
    assert pod.resolution == pytest.approx(math.log(100) / pod.rate)
    assert "last fresh arrival 2." in pod.basis and "fresh connections/s" in pod.basis


def test_sparse_fresh_connections_are_too_coarse_and_say_what_to_run() -> None:
    result = bound(rollout(lag=2.5, rate=1.5, seed=2))
    assert not result.bounded
    assert result.pods[0].gap in (Gap.TOO_COARSE, Gap.NO_FRESH_ARRIVALS)
    assert "--probe-rate" in result.what_to_run()


def test_one_pod_and_its_replacement() -> None:
    # One replica: it is the only pod in rotation until its replacement comes in.
    rotation = {"old": (0.0, T0 + 1.5), "new": (T0 + 1.4, math.inf)}
    result = bound(ev(draw(rotation, 20, 20.0, 3), {"old": T0}))
    assert result.bounded and result.pods[0].endpoints == 2
    assert 1.5 <= result.value < 2.5


def test_many_endpoints_thin_each_pods_share() -> None:
    few = bound(rollout(lag=2.0, rate=30, seed=4, pods=2)).pods[0]
    many = bound(rollout(lag=2.0, rate=30, seed=4, pods=10), max_resolution=0.9).pods[0]
    assert many.endpoints == 10 and few.endpoints == 2
    assert many.rate < few.rate / 3 and many.resolution > 3 * few.resolution
    assert many.value >= 2.0
    # The same share at the default resolution limit is too coarse to tune from.
    assert bound(rollout(lag=2.0, rate=30, seed=4, pods=20)).pods[0].gap is Gap.TOO_COARSE


def test_pods_joining_after_termination_widen_the_bound() -> None:
    # A surge pod enters rotation just after pod-0 began terminating: pod-0's share falls
    # from 1/2 to 1/3, which the bound must allow for.
    rotation = {"pod-0": (0.0, T0 + 2.0), "pod-1": (0.0, math.inf),
                "surge": (T0 + 0.5, math.inf)}
    arrivals = draw(rotation, 30, 20.0, 5)
    result = bound(ev(arrivals, {"pod-0": T0}))
    own = sum(1 for a in arrivals if a.pod == "pod-0" and T0 - 5 <= a.t < T0) / 5
    every = sum(1 for a in arrivals if T0 - 5 <= a.t < T0) / 5
    assert result.pods[0].endpoints == 3
    assert result.pods[0].rate == pytest.approx(every / 3) and result.pods[0].rate < 0.8 * own


def test_no_fresh_connection_at_all() -> None:
    # Keep-alive only: pods answered, but no request opened a connection.
    e = Evidence((), {"pod-0": T0}, frozenset({"pod-0", "pod-1"}))
    result = bound(e)
    assert not result.bounded and result.pods[0].gap is Gap.NO_FRESH_ARRIVALS
    assert "no request on a fresh connection" in result.explain()
    assert "--probe-rate 20" in result.what_to_run()


def test_load_that_ends_before_the_bound_is_not_a_bound() -> None:
    arrivals = [a for a in rollout(lag=2.5, rate=40, seed=6).fresh if a.t < T0 + 1.0]
    result = bound(ev(arrivals, {"pod-0": T0}))
    assert result.pods[0].gap is Gap.LOAD_ENDED and "--linger" in result.what_to_run()


def test_failures_after_the_last_arrival_hide_the_pod() -> None:
    e = rollout(lag=2.5, rate=40, seed=7)
    failed = Arrival(T0 + 2.55, None, failed=True)
    result = bound(ev([*e.fresh, failed], {"pod-0": T0}))
    assert result.pods[0].gap is Gap.STOPPED_ANSWERING
    assert "drain delay well above" in result.what_to_run()


def test_the_bound_covers_the_real_lag_at_its_confidence() -> None:
    """Over 400 seeded rollouts the 99 % bound falls short of the real lag rarely."""
    rng = random.Random(8)
    short = total = 0
    for seed in range(400):
        lag, rate, pods = rng.uniform(0.5, 3.0), rng.uniform(10, 50), rng.randint(2, 5)
        result = bound(rollout(lag, rate, seed, pods), max_resolution=0.99)
        if result.bounded:
            total += 1
            short += result.value < lag
    assert total > 300 and short / total <= 0.02, (short, total)


@settings(max_examples=60, deadline=None)
@given(lag=st.floats(0.0, 4.0), rate=st.floats(5.0, 60.0), pods=st.integers(1, 6),
       seed=st.integers(0, 10_000))
def test_the_bound_is_past_every_fresh_arrival_and_grows_with_confidence(
        lag: float, rate: float, pods: int, seed: int) -> None:
    e = rollout(lag, rate, seed, pods)
    b90 = bound_pod(e, "pod-0", confidence=0.9, max_resolution=0.999)
    b99 = bound_pod(e, "pod-0", confidence=0.99, max_resolution=0.999)
    mine = [a.t - T0 for a in e.fresh if a.pod == "pod-0"]
    if b99.rate > 0:
        assert b99.value >= max(mine) and b99.value >= b99.last
        assert b99.value > b90.value
    else:
        assert b99.gap is Gap.NO_FRESH_ARRIVALS


# -- from verify's record to tune ------------------------------------------------------------

def record(*, probe: bool, lag: float = 2.5) -> Record:
    """Keep-alive streams of 2 s (fresh only when a stream ends at a draining pod) and, with
    `probe`, a probe load of fresh connections at 25/s."""
    rotation = {"a": (0.0, T0 + lag), "b": (0.0, math.inf)}
    ok = Outcome(Kind.OK, 200)
    streams = [RequestResult(s, s + 2.0, ok, pod=p, fresh=s == 0 or T0 < s < T0 + lag)
               for i, p in enumerate(("a", "b") * 4) for s in [(i // 2) * 2.0]]
    probes = [RequestResult(a.t, a.t + 0.01, ok, pod=a.pod, fresh=True)
              for a in draw(rotation, 25, 20.0, 9)]
    spec = LoadSpec(url="http://127.0.0.1:9/v1/completions", duration=20)
    run = LoadRun(spec, 0.0, streams, 0, 20.0)
    probe_run = (LoadRun(LoadSpec(url="http://127.0.0.1:9/", duration=20, rate=25,
                                  keepalive=False, error_status=500), 0.0, probes, 0, 20.0)
                 if probe else None)
    return Record.from_run(run, [LifecycleEvent(T0, "terminating", "a")], probe=probe_run)


def test_tune_bounds_the_lag_from_the_probe_and_refuses_without_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with_probe = record(probe=True)
    t = tune(from_record(Record.from_json(with_probe.to_json()), "run1"))
    assert t.propagation.value >= 2.5
    assert "bound at 99% per pod" in t.propagation.basis and "pod a" in t.propagation.basis
    with pytest.raises(CannotBound) as raised:
        tune(from_record(record(probe=False), "run2"))
    assert "--probe-rate" in raised.value.what_to_run

    record(probe=False).write(tmp_path / "run2")
    assert main(["tune", "--from", str(tmp_path / "run2")]) == 4
    err = capsys.readouterr().err
    assert "not bounded" in err and "to bound it:" in err
    # A declared floor still gives settings, saying it is not a bound.
    assert main(["tune", "--from", str(tmp_path / "run2"), "--min-propagation", "3",
                 "-o", "json"]) == 0
    assert "not bounded" in capsys.readouterr().err
    with_probe.write(tmp_path / "run1")
    assert main(["tune", "--from", str(tmp_path / "run1"), "--confidence", "1.5"]) == 2


def test_record_keeps_the_probe_apart() -> None:
    r = record(probe=True)
    again = Record.from_json(r.to_json())
    assert again.summary().total == 8 and again.probe_summary() is not None
    assert [(p.pod, p.fresh) for p in again.probes] == [(p.pod, p.fresh) for p in r.probes]
    assert again.probe == r.probe
    assert {x.fresh for x in again.requests} == {True, False}
    assert len(evidence(again).fresh) == len(r.probes) + sum(1 for x in r.requests if x.fresh)


def test_the_picture_and_page_show_the_probe_apart(tmp_path: Path) -> None:
    from drainsafe.verify.timeline import render_html, render_png

    r = record(probe=True)
    png = render_png(r, tmp_path / "timeline.png")
    page = render_html(r, png, tmp_path / "timeline.html").read_text()
    assert "<h2>Probe</h2>" in page and "at 25/s, apart from the load above" in page
