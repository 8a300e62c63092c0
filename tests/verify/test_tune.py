"""tune alone: measurements in, settings out, each number with its basis."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from drainsafe.budget import recommend
from drainsafe.cli import main
from drainsafe.verify.load import LoadRun, LoadSpec, RequestResult
from drainsafe.verify.outcome import Kind, Outcome
from drainsafe.verify.propagation import Gap, PodBound, PropagationBound
from drainsafe.verify.record import LifecycleEvent, Record
from drainsafe.verify.tune import (
    MAX_REQUEST_ANNOTATION,
    SHUTDOWN_ANNOTATION,
    CannotBound,
    Measurements,
    NotEnoughData,
    Sample,
    from_log_lines,
    from_metrics_text,
    histogram_quantile,
    parse_workload,
    patch_body,
    tune,
)


def metrics(last: float | str, delay: float = 5.0) -> str:
    # The names drainsafe serve/run export (drainsafe.server.runtime).
    return (
        "# HELP drainsafe_last_request_after_drain_seconds Seconds from drain start to the "
        "last request received (NaN: none)\n"
        "# TYPE drainsafe_last_request_after_drain_seconds gauge\n"
        f"drainsafe_last_request_after_drain_seconds {last}\n"
        "# HELP drainsafe_drain_delay_seconds Configured drain delay\n"
        "# TYPE drainsafe_drain_delay_seconds gauge\n"
        f"drainsafe_drain_delay_seconds {delay}\n"
    )


def record(durations: list[float], pod_lags: dict[str, float] | None = None) -> Record:
    results = [RequestResult(i * 0.1, i * 0.1 + d, Outcome(Kind.OK, 200))
               for i, d in enumerate(durations)]
    events = []
    for n, (pod, lag) in enumerate((pod_lags or {}).items()):
        events.append(LifecycleEvent(10.0 + n, "terminating", pod))
        results.append(RequestResult(10.0 + n + lag, 10.5 + n + lag, Outcome(Kind.OK, 200),
                                     pod=pod))
    run = LoadRun(LoadSpec(url="http://127.0.0.1:9/", duration=20), 0.0, results, 0, 20.0)
    return Record.from_run(run, events)


def routed(*values: float) -> PropagationBound:
    """Bounds of pods whose last fresh arrival plus resolution make `values`."""
    return PropagationBound(tuple(PodBound(f"pod{v}", 10.0, v - 0.1, 46.0, 2, 0.1, 0.99)
                                  for v in values), 0.99, 0.5)


def test_settings_follow_the_budget_model() -> None:
    m = Measurements(routing=[routed(0.4, 0.7), routed(1.3)],
                     durations=[float(d) for d in range(1, 101)])
    t = tune(m, margin=0.2)
    expected = recommend(propagation=1.3, max_request=99.0, margin=0.2)
    assert t.recommendation == expected
    assert t.drain_delay_seconds == math.ceil(expected.budget.drain_delay) == 2
    assert t.shutdown_seconds == expected.budget.shutdown_deadline == 118.8
    assert t.applied.fits and t.grace_seconds == math.ceil(2 + 118.8 + 5)
    assert t.grace_seconds >= t.drain_delay_seconds + t.shutdown_seconds + 5
    assert t.propagation.value == pytest.approx(1.3)
    assert "bound at 99% per pod, the largest of 3 pod(s); pod pod1.3" in t.propagation.basis
    assert "p99 of 100 completed requests" in t.max_request.basis
    assert t.probe_period * t.probe_failure_threshold <= t.drain_delay_seconds
    assert t.probe_timeout < t.probe_period or t.probe_period == 1


def test_declared_maximum_and_floor_override() -> None:
    m = Measurements(propagation=[Sample(0.2, "x")], durations=[1.0])
    t = tune(m, max_request=90, min_propagation=10)
    assert t.max_request.value == 90 and "declared" in t.max_request.basis
    assert t.propagation.value == 10 and "measured" in t.propagation.basis


def test_missing_measurements_are_named() -> None:
    with pytest.raises(NotEnoughData, match="no propagation measurement"):
        tune(Measurements(durations=[1.0]))
    with pytest.raises(NotEnoughData, match="no request durations"):
        tune(Measurements(routing=[routed(1.0)]))
    with pytest.raises(CannotBound, match="samples of the last request"):
        tune(Measurements(propagation=[Sample(1.0, "x")], durations=[1.0]))


def test_metrics_dump_and_censoring() -> None:
    clear = from_metrics_text(metrics(0.8, delay=5), "pod-a.prom")
    assert clear.propagation[0].value == 0.8 and not clear.propagation[0].censored
    cut = from_metrics_text(metrics(4.9, delay=5), "pod-b.prom")
    assert cut.propagation[0].censored
    none = from_metrics_text(metrics("NaN"), "pod-c.prom")
    assert none.propagation == []
    m = Measurements(durations=[1.0])
    m.merge(clear)
    m.merge(cut)
    t = tune(m, min_propagation=1.0)
    assert t.propagation.value == 4.9 and "not a bound" in t.propagation.basis
    assert any("still received traffic" in w for w in t.warnings)
    # A bound below a server's own figure is raised to it.
    m.routing.append(routed(2.0))
    t = tune(m)
    assert t.propagation.value == 4.9 and "raised to a server's own figure" in \
        t.propagation.basis


def test_histogram_quantile_bounds() -> None:
    rows = [(0.5, 10.0), (1.0, 90.0), (5.0, 99.0), (10.0, 100.0), (math.inf, 100.0)]
    assert histogram_quantile(rows, 0.99) == 5.0
    assert histogram_quantile(rows, 0.5) == 1.0
    assert histogram_quantile([(math.inf, 0.0)], 0.99) is None
    text = ("# TYPE app_request_duration_seconds histogram\n"
            + "".join(f'app_request_duration_seconds_bucket{{le="{le}"}} {n}\n'
                      for le, n in (("1.0", 50), ("30.0", 99), ("90.0", 100), ("+Inf", 100)))
            + "app_request_duration_seconds_count 100\napp_request_duration_seconds_sum 900\n")
    assert from_metrics_text(text, "m").histogram_p99[0].value == 30.0


def test_phase_log_lines() -> None:
    lines = ['{"ts":1,"event":"drainsafe.phase","phase":"draining","drain_delay_s":5}',
             "plain text", '{"ts":7,"event":"drainsafe.phase","phase":"exit",'
             '"last_request_after_drain_s":1.25,"drain_delay_s":5}']
    found = from_log_lines(lines, "pod.log")
    assert [s.value for s in found.propagation] == [1.25]


def test_record_gives_durations_and_per_pod_bounds() -> None:
    from drainsafe.verify.tune import from_record

    found = from_record(record([1.0, 2.0], {"web-a": 0.6, "web-b": 1.1}), "rec")
    # Requests on reused connections: the pods are known, their lag is not bounded.
    (routing,) = found.routing
    assert [(p.pod, p.gap) for p in routing.pods] == [("web-a", Gap.NO_FRESH_ARRIVALS),
                                                      ("web-b", Gap.NO_FRESH_ARRIVALS)]
    assert len(found.durations) == 4


def test_patch_carries_the_annotations_check_reads() -> None:
    from drainsafe.check.context import MAX_REQUEST_ANNOTATION as CHECK_MAX
    from drainsafe.check.context import SHUTDOWN_ANNOTATION as CHECK_SHUTDOWN

    assert (MAX_REQUEST_ANNOTATION, SHUTDOWN_ANNOTATION) == (CHECK_MAX, CHECK_SHUTDOWN)
    t = tune(Measurements(routing=[routed(2.0)], durations=[80.0]))
    body = patch_body(t, "server")
    template = body["spec"]["template"]
    assert template["metadata"]["annotations"] == {MAX_REQUEST_ANNOTATION: "80",
                                                   SHUTDOWN_ANNOTATION: "96"}
    assert template["spec"]["terminationGracePeriodSeconds"] == 3 + 96 + 5
    container = template["spec"]["containers"][0]
    assert container["name"] == "server"
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == 3
    assert "lifecycle" not in patch_body(t, "server", drain_via="server")["spec"]["template"][
        "spec"]["containers"][0]


def test_workload_names() -> None:
    assert parse_workload("deployment/web") == ("Deployment", "web")
    assert parse_workload("statefulsets/db") == ("StatefulSet", "db")
    with pytest.raises(ValueError, match="KIND/NAME"):
        parse_workload("pod/x")


def test_cli_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    record([1.0, 1.5, 2.0]).write(tmp_path)
    (tmp_path / "pod-a.prom").write_text(metrics(0.9))
    argv = ["tune", "--from", str(tmp_path), "--workload", "deployment/web", "-n", "prod",
            "--min-propagation", "1"]
    assert main([*argv, "-o", "yaml"]) == 0
    body = yaml.safe_load(capsys.readouterr().out)
    assert body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 2 + 3 + 5
    assert main([*argv, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["drain_delay_seconds"] == 2 and data["server_flags"] == "--shutdown-timeout 2.4"
    assert main([*argv, "-o", "patch"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("kubectl patch deployment/web -n prod --type strategic -p '{")
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "drain delay" in text and "--min-propagation 1s" in text
    assert "2s + 2.4s + 5s = 9.4s <= 10s" in text


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune"]) == 2
    assert main(["tune", "--from", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    record([1.0]).write(tmp_path)
    assert main(["tune", "--from", str(tmp_path)]) == 1
    assert "no propagation measurement" in capsys.readouterr().err
    assert main(["tune", "--from", str(tmp_path), "--min-propagation", "2",
                 "--workload", "nonsense"]) == 2
