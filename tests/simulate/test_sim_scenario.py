"""Scenario format: what parses, and that every mistake names its field."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from drainsafe.pdb import PdbSpec
from drainsafe.simulate.distributions import Constant, Histogram, LogNormal, Uniform
from drainsafe.simulate.scenario import ScenarioError, load_scenario, parse_scenario
from drainsafe.verify.load import RequestResult
from drainsafe.verify.outcome import Kind, Outcome
from drainsafe.verify.record import Record

from .scenarios import small

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "scenarios" / "fleet-500x8.yaml"
BUNDLED = ROOT / "src" / "drainsafe" / "simulate" / "fleet-500x8.yaml"


def test_small_scenario_parses_into_the_model() -> None:
    s = parse_scenario(small())
    assert (s.nodes, s.gpus_per_node, s.seed) == (6, 2, 3)
    w = s.workloads[0]
    assert w.pdb == PdbSpec(max_unavailable=1)
    assert w.durations == LogNormal(p50=2, p99=20, cap=40)
    assert w.startup == Constant(10.0)
    assert w.termination.budget.sigkill_at == 30
    assert [c.name for c in s.consumers] == ["kube-proxy", "ingress"]
    assert s.upgrade.eviction_retry == 5.0  # kubectl's retry on a PDB refusal


def test_durations_accept_units_and_forms() -> None:
    s = parse_scenario(small(**{
        "traffic.duration": "24h",
        "upgrade.start": "8h",
        "upgrade.node_upgrade": {"min": "2m", "max": "10m"},
        "workloads.0.termination.shutdown_deadline": None,
    }))
    assert s.horizon == 86400
    assert s.upgrade.start == 8 * 3600
    assert s.upgrade.node_upgrade == Uniform(120, 600)
    assert math.isinf(s.workloads[0].termination.shutdown_deadline)


@pytest.mark.parametrize("path", sorted((ROOT / "examples" / "scenarios").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_example_scenario_parses(path: Path) -> None:
    assert load_scenario(path).workloads


def test_the_example_parses_and_the_bundled_copy_is_identical() -> None:
    s = load_scenario(EXAMPLE)
    assert (s.nodes, s.gpus_per_node) == (500, 8)
    assert BUNDLED.read_text() == EXAMPLE.read_text()


@pytest.mark.parametrize(("changes", "path", "words"), [
    ({"fleet.nodes": 0}, "fleet.nodes", "must be >= 1"),
    ({"fleet.gpus_per_node": "eight"}, "fleet.gpus_per_node", "expected an integer"),
    ({"workloads.0.termination.grace": "soon"}, "workloads[0].termination.grace",
     "duration like"),
    ({"workloads.0.termination.gracePeriod": 30}, "workloads[0].termination.gracePeriod",
     "unknown field"),
    ({"workloads.0.durations": {"p50": 5, "p99": 2}}, "workloads[0].durations.p99",
     "must be >= p50"),
    ({"workloads.0.durations": {"mean": 5}}, "workloads[0].durations", "expected seconds"),
    ({"workloads.0.pdb": {"minAvailable": 1, "maxUnavailable": 1}}, "workloads[0].pdb",
     "cannot both be set"),
    ({"workloads.0.pdb": {"maxUnavailable": "lots"}}, "workloads[0].pdb", "percentage"),
    ({"workloads.0.gpus": 4}, "workloads[0].gpus", "do not fit on a node"),
    ({"workloads.0.replicas": 13}, "workloads", "need 13 GPUs but the fleet has 12"),
    ({"consumers.1.share": 0.5}, "consumers", "add up to 1"),
    ({"consumers.0.propagation": {"min": 3, "max": 1}}, "consumers[0].propagation.max",
     "must be >= min"),
    ({"upgrade.strategy": "yolo"}, "upgrade.strategy", "kubectl, drainsafe, surge"),
    ({"upgrade.parallelism": 0}, "upgrade.parallelism", "must be >= 1"),
    ({"workloads": []}, "workloads", "non-empty list"),
])
def test_a_bad_scenario_names_the_field(changes: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(small(**changes))
    assert caught.value.path == path
    assert words in str(caught.value)
    assert str(caught.value).startswith(path + ":")


def test_a_missing_section_is_named() -> None:
    data = small()
    del data["fleet"]
    with pytest.raises(ScenarioError, match=r"^fleet: required field is missing"):
        parse_scenario(data)


def test_unreadable_and_invalid_files_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("fleet: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(bad)


def _verify_record(directory: Path, totals: list[float]) -> Path:
    """A record written by drainsafe.verify's own Record (the format's owner)."""
    requests = [RequestResult(start=float(i), end=float(i) + t, outcome=Outcome(Kind.OK, 200))
                for i, t in enumerate(totals)]
    requests.append(RequestResult(start=0.0, end=0.5, outcome=Outcome(Kind.REFUSED)))
    Record(url="http://127.0.0.1:1/", mode="open", settings={}, started_at=0.0,
           elapsed=100.0, requests=requests).write(directory)
    return directory


def test_durations_from_a_verify_record(tmp_path: Path) -> None:
    totals = [1.0, 2.0, 2.0, 3.0, 9.0]
    _verify_record(tmp_path / "run1", totals)
    data = small(**{"workloads.0.durations": {"verify_record": "run1"}})
    s = parse_scenario(data, base_dir=tmp_path)
    dist = s.workloads[0].durations
    assert isinstance(dist, Histogram)
    assert dist.edges[0] == 1.0 and dist.edges[-1] == 9.0
    assert sum(dist.counts) == len(totals)  # the refused request is not a duration
    assert dist.mean == pytest.approx(sum(totals) / len(totals), rel=0.1)


def test_a_bad_verify_record_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "junk.json").write_text("{}")
    data = small(**{"workloads.0.durations": {"verify_record": "junk.json"}})
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, base_dir=tmp_path)
    assert caught.value.path == "workloads[0].durations.verify_record"
    assert "not a drainsafe verify record" in str(caught.value)
