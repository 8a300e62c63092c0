"""The demo's figures from what a run recorded: causes, capacity, bounds, verdicts."""

from __future__ import annotations

from typing import Any

import pytest

from drainsafe.demo import measure
from drainsafe.demo.measure import RACE, SIGKILL, Shown
from drainsafe.demo.names import CONTROLLER, DRAINSAFE, NAIVE, SEEDS
from drainsafe.demo.report import RunReport, rows
from drainsafe.demo.runs import Scale, demo_runs
from drainsafe.demo.scenario import APP, ReadyTracker, ScenarioResult, lower_bounds
from drainsafe.kube.objects import (
    LWS_GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    LWS_WORKER_INDEX_LABEL,
)
from drainsafe.verify.load import RequestResult
from drainsafe.verify.outcome import Kind, Outcome


def req(start: float, end: float, kind: Kind, *, started: bool = True,
        status: int | None = None) -> RequestResult:
    return RequestResult(start, end, Outcome(kind, status),
                         headers_at=start + 0.01 if started else None)


def test_causes_name_the_race_the_kill_and_the_marker() -> None:
    kills = [6.8]
    results = [
        req(0.0, 0.5, Kind.OK),
        req(4.0, 4.0, Kind.REFUSED, started=False),
        req(4.1, 4.1, Kind.RESET, started=False),  # the proxy's reset before any answer
        req(4.2, 4.2, Kind.CLOSED, started=False),
        req(0.3, 6.6, Kind.TRUNCATED),  # mid-stream, at the kill
        req(0.3, 6.9, Kind.RESET),  # mid-stream reset, at the kill
        req(0.3, 2.0, Kind.TRUNCATED),  # mid-stream, nowhere near a kill
        req(1.0, 9.0, Kind.DRAIN_MARKER),
        req(1.0, 1.1, Kind.HTTP, status=502),
        req(1.0, 1.1, Kind.HTTP, status=429),
        req(1.0, 5.0, Kind.TIMEOUT, started=False),
    ]
    assert measure.causes(results, kills) == {
        RACE: 3, measure.HTTP_5XX: 1, SIGKILL: 2, measure.MARKER: 1, measure.OTHER: 3}
    # Without a kill in the run, a cut is not SIGKILL's.
    assert SIGKILL not in measure.causes(results, [])
    assert measure.truncated(results) == 6  # started answering, did not finish


def test_seconds_below_desired_and_the_lowest_count() -> None:
    history = [(0.0, 2), (4.0, 1), (10.5, 2), (12.0, 3), (13.0, 2)]
    assert measure.seconds_below(history, 3.0, 20.0, 2) == pytest.approx(6.5)
    assert measure.seconds_below(history, 5.0, 8.0, 2) == pytest.approx(3.0)  # inside the dip
    assert measure.seconds_below(history, 11.0, 20.0, 2) == 0.0
    assert measure.seconds_below([(0.0, 1)], 2.0, 5.0, 2) == pytest.approx(3.0)  # never back
    assert measure.lowest(history, 3.0, 20.0) == 1
    assert measure.lowest(history, 11.0, 20.0) == 2
    assert measure.lowest([], 0.0, 1.0) is None


def test_a_run_that_does_not_show_its_point_says_what_is_missing() -> None:
    race_and_kills = Shown({RACE: 3, SIGKILL: 2}, min_ready=1, replicas=2)
    assert measure.missing("race_and_kills", race_and_kills) == []
    assert measure.missing("race_and_kills", Shown({}, min_ready=2, replicas=2)) == [
        "no request was refused or reset in the termination race",
        "no stream was cut by SIGKILL", "Ready capacity never dropped"]
    assert measure.missing("no_race_but_dip", Shown({}, min_ready=1, replicas=2)) == []
    assert measure.missing("no_race_but_dip", race_and_kills) == [
        "3 requests were refused or reset in the race", "2 streams were cut by SIGKILL"]
    assert measure.missing("nothing_lost", Shown({}, min_ready=2, replicas=2)) == []
    assert measure.missing("nothing_lost", Shown({measure.OTHER: 1}, 1, 2)) == [
        "1 requests failed", "Ready capacity dropped to 1 of 2"]


def test_the_runs_scale_the_seeds_numbers() -> None:
    runs = {r.name: r for r in demo_runs(Scale(10))}
    assert list(runs) == [NAIVE, SEEDS, DRAINSAFE, CONTROLLER]
    naive, seeds, ours = runs[NAIVE].settings, runs[SEEDS].settings, runs[DRAINSAFE].settings
    # A 90 s generation under the default 30 s grace: 9 s against 3 s.
    assert (naive.long_seconds, naive.grace, naive.prestop_sleep) == (9.0, 3, 0.0)
    assert not naive.drain_aware and not naive.readiness_gate
    # The seeds: preStop 20 s, grace 150 s covering hook + the longest generation.
    assert (seeds.grace, seeds.prestop_sleep, seeds.readiness_gate) == (15, 2.0, True)
    assert seeds.prestop_sleep > seeds.propagation
    assert seeds.prestop_sleep + seeds.long_seconds < seeds.grace
    # drainsafe serve: the deadline covers the longest generation, the grace the budget.
    assert ours.drain_aware and ours.shutdown_timeout is not None
    assert ours.shutdown_timeout >= ours.long_seconds
    assert ours.drain_delay + ours.shutdown_timeout + 5 <= ours.grace
    assert naive.model_load == seeds.model_load == ours.model_load == 6.0
    real = {r.name: r.settings for r in demo_runs(Scale(1))}
    assert (real[NAIVE].long_seconds, real[NAIVE].grace, real[SEEDS].grace) == (90, 30, 150)


def test_lower_bounds_come_from_the_settings() -> None:
    runs = {r.name: r for r in demo_runs(Scale(10))}
    assert lower_bounds("kubectl", runs[NAIVE].settings) == (0.0, 6.0)
    assert lower_bounds("kubectl", runs[SEEDS].settings) == (2.0, 6.0)
    # Make before break: the stand-in's start-up and the drain delay; capacity never drops.
    assert lower_bounds("drainsafe", runs[DRAINSAFE].settings) == (8.0, 0.0)
    # kubectl drain under the controller is held until the stand-in is Ready: the same.
    assert lower_bounds("kubectl", runs[CONTROLLER].settings) == (8.0, 0.0)


def lws_pod(group: int, worker: int, *, ready: bool = True, deleting: bool = False
            ) -> dict[str, Any]:
    name = f"{APP}-{group}" + (f"-{worker}" if worker else "")
    meta: dict[str, Any] = {"name": name, "labels": {
        "app": APP, LWS_NAME_LABEL: APP, LWS_GROUP_INDEX_LABEL: str(group),
        LWS_WORKER_INDEX_LABEL: str(worker)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T03:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": f"node-{2 * group + worker}"},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]}}


def test_a_leaderworkerset_is_counted_in_whole_ready_groups() -> None:
    """The demo's capacity of an LWS: groups whose every pod is Ready (kube.objects'
    lws_ready_groups, as drain counts them), not Ready pods."""
    tracker = ReadyTracker(lambda: 0.0, group_size=2)
    for g in (0, 1):
        for w in (0, 1):
            tracker.on_event("ADDED", lws_pod(g, w))
    assert tracker.ready() == 2
    tracker.on_event("ADDED", lws_pod(2, 0))  # a stand-in group's leader alone: no group
    assert tracker.ready() == 2
    tracker.on_event("MODIFIED", lws_pod(2, 1))
    assert tracker.ready() == 3
    # A worker evicted (terminating), then gone: its group no longer counts though its
    # leader is still Ready; 3 Ready pods of 5 are 2 whole groups.
    tracker.on_event("MODIFIED", lws_pod(0, 1, deleting=True))
    assert tracker.ready() == 2
    tracker.on_event("DELETED", lws_pod(0, 1, deleting=True))
    tracker.on_event("MODIFIED", lws_pod(1, 1, ready=False))
    assert tracker.ready() == 1
    assert [c for _t, c in tracker.history] == [0, 1, 2, 3, 2, 1]
    # Without a group size the same pods count one by one.
    pods = ReadyTracker(lambda: 0.0)
    for g, w in ((0, 0), (0, 1), (1, 0)):
        pods.on_event("ADDED", lws_pod(g, w))
    assert pods.ready() == 3


def test_the_report_names_groups_for_a_leaderworkerset() -> None:
    def run(unit: str, low: int) -> RunReport:
        return RunReport(unit, "", ScenarioResult(tool="drainsafe", drain_aware=True,
                                                  node="node-0", replicas=2,
                                                  lowest_ready=low, capacity_unit=unit))

    grouped = [run("groups", 2), run("groups", 1)]
    assert ("lowest Ready groups", ["2/2", "1/2"]) in rows(grouped, 1)
    assert grouped[0].to_json()["capacity_unit"] == "groups"
    assert ("lowest Ready replicas", ["2/2"]) in rows([run("replicas", 2)], 1)
