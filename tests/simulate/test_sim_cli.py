"""`drainsafe simulate` end to end through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from drainsafe.cli import main

from .scenarios import small


def _write(tmp_path: Path, data: object, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_example_runs_and_reports_failures_with_a_picture(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--example", "-o", "json", "--out", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert code == 1  # the example's settings (no drain delay, grace 30) lose requests
    assert out["scenario"] == "fleet-500x8"
    assert out["failures"]["race"] > 0 and out["failures"]["cut_deadline"] > 0
    assert out["finished"] and out["upgrade_seconds"] > 0
    assert out["requests"] > 10_000_000
    timeline = out["timeline"]
    assert len(timeline["capacity_min"]) == len(timeline["start_seconds"]) == 100
    assert min(timeline["capacity_min"]) == pytest.approx(out["min_capacity"], abs=1e-4)
    for cause, per_window in timeline["failed"].items():
        assert sum(per_window) == out["failures"][cause]
    picture = Path(out["picture"])
    assert picture.parent == tmp_path and picture.stat().st_size > 20_000
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_output_shows_causes_and_upgrade_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", str(_write(tmp_path, small()))])
    text = capsys.readouterr().out
    assert code == 1
    for words in ("refused/reset in the race", "shutdown deadline", "SIGKILL",
                  "lack of capacity", "total upgrade time", "lowest serving capacity"):
        assert words in text


def test_a_safe_scenario_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = small(**{
        "consumers.0.propagation": 1, "consumers.1.propagation": 3,
        "workloads.0.termination": {"grace": 60, "drain_delay": 5, "shutdown_deadline": 45},
    })
    assert main(["simulate", str(_write(tmp_path, data)), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["failed"] == 0


def test_a_bad_scenario_exits_2_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, small(**{"workloads.0.termination.grace": -1}))
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "workloads[0].termination.grace" in err and "must be >= 0" in err


def test_scenario_or_example_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate"]) == 2
    assert "SCENARIO.yaml or --example" in capsys.readouterr().err


def test_print_example_is_a_valid_scenario(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--print-example"]) == 0
    text = capsys.readouterr().out
    assert "fleet-500x8" in text
    assert main(["simulate", str(_write(tmp_path, yaml.safe_load(text))), "--seed", "2",
                 "-o", "json"]) == 1


def test_sweep_finds_settings_that_lose_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = small(**{"consumers.1.propagation": {"p50": 3, "p99": 10, "max": 12}})
    code = main(["simulate", str(_write(tmp_path, data)), "--sweep", "-o", "json",
                 "--out", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    best = out["best"]
    assert best["failed"] == 0 and best["finished"]
    assert out["drain_delay"] >= 10  # must cover the ingress' slow tail, capped at 12 s
    assert best["settings"]["drain_delay"] == out["drain_delay"]
    # Nothing that passed was faster than the pick.
    passing = [t for t in out["trials"] if t["zero_failures"] and t["upgrade_seconds"]]
    assert best["upgrade_seconds"] <= min(t["upgrade_seconds"] for t in passing
                                          if t["settings"]["grace"] == out["grace"])
    # The stages saw failures on the way (the search is not vacuous).
    assert any(t["failed"] > 0 for t in out["trials"] if t["stage"] == "drain delay")
    assert Path(out["picture"]).exists()


def test_sweep_on_a_wedged_layout_still_finds_the_termination_settings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Replacement first on a full fleet wedges without surge nodes; the sweep must not
    # take the wedged run's silence (no pod ever deleted) for "no drain delay needed".
    data = small(**{"workloads.0.replicas": 12, "upgrade.strategy": "surge"})
    code = main(["simulate", str(_write(tmp_path, data)), "--sweep", "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["drain_delay"] > 0
    assert out["best"]["settings"]["surge_nodes"] > 0


def test_sweep_reports_a_budget_that_wedges_every_layout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # maxUnavailable 0 allows no eviction in any layout (make before break included: the
    # disruption controller counts the Deployment's scale, so an extra Ready pod is no slack).
    data = small(**{"workloads.0.pdb": {"maxUnavailable": 0}})
    code = main(["simulate", str(_write(tmp_path, data)), "--sweep"])
    text = capsys.readouterr().out
    assert code == 1
    assert "No layout finishes the upgrade" in text and "PodDisruptionBudget" in text
