"""Scenario limits and bad values (issue 18): each refused before the run, naming the field."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from drainsafe.cli import main
from drainsafe.simulate.scenario import ScenarioError, parse_scenario

from .scenarios import small


@pytest.mark.parametrize(("changes", "path", "words"), [
    # Before: grew toward OOM at ~200 MB/s.
    ({"fleet.nodes": 1_000_000_000}, "fleet.nodes", "must be <= 10,000 (the limit)"),
    ({"fleet.gpus_per_node": 10_000}, "fleet.gpus_per_node", "must be <= 64"),
    # Before: numpy's "lam value too large", no field named.
    ({"workloads.0.startup": 1e300}, "workloads[0].startup", "must be <= 2,592,000"),
    ({"workloads.0.durations": {"p50": 1e300, "p99": 1e301}}, "workloads[0].durations.p50",
     "must be <= 2,592,000"),
    ({"workloads.0.rate": 1e300}, "workloads[0].rate", "must be <= 1,000,000"),
    ({"traffic.duration": "9999h"}, "traffic.duration", "must be <= 2,592,000"),
    ({"upgrade.parallelism": 10**12}, "upgrade.parallelism", "the limit"),
    # Before: accepted; the API server refuses a percentage above 100.
    ({"workloads.0.pdb": {"maxUnavailable": "150%"}}, "workloads[0].pdb",
     "must not be greater than 100%"),
    ({"workloads.0.pdb": {"minAvailable": "101%"}}, "workloads[0].pdb",
     "must not be greater than 100%"),
    # Before: 0 silently meant "no limit".
    ({"workloads.0.max_concurrency": 0}, "workloads[0].max_concurrency", "must be >= 1"),
    ({"consumers": [{"name": f"c{i}", "share": 1 / 1001, "propagation": 1}
                    for i in range(1001)]}, "consumers", "above the limit of 1,000"),
])
def test_limits_and_bad_values_name_the_field(changes: dict[str, Any], path: str,
                                              words: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(small(**changes))
    assert caught.value.path == path
    assert words in str(caught.value)


def test_max_concurrency_one_is_accepted_and_absent_means_no_limit() -> None:
    assert parse_scenario(small(**{"workloads.0.max_concurrency": 1})).workloads[0] \
        .max_concurrency == 1
    assert parse_scenario(small()).workloads[0].max_concurrency is None


def test_huge_fleet_is_refused_at_once_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "big.yaml"
    f.write_text(yaml.safe_dump(small(**{"fleet.nodes": 1_000_000_000})))
    started = time.monotonic()
    assert main(["simulate", str(f)]) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    # One line, not wrapped at 80 columns when stderr is not a terminal.
    assert f"bad scenario {f}: fleet.nodes: must be <= 10,000 (the limit), got " \
        "1,000,000,000\n" in err


def test_out_that_is_a_file_is_refused_before_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(small()))
    taken = tmp_path / "taken"
    taken.write_text("not a directory")
    assert main(["simulate", str(scenario), "--out", str(taken)]) == 2
    captured = capsys.readouterr()
    assert f"--out {taken}: exists and is not a directory" in captured.err
    assert captured.out == ""  # nothing simulated
