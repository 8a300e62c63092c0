"""Fuzz: any scenario (a mapping, or a file of any bytes) ends in a Scenario or a
ScenarioError naming a field, never another exception (issue 18)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainsafe.simulate.scenario import ScenarioError, load_scenario, parse_scenario

from .scenarios import small

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**12, 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["90s", "5m", "24h", "1e300", "150%", "50%", "0", "", "-1", "kubectl",
                     "x" * 50]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)

FIELDS = [
    "name", "seed", "fleet", "fleet.nodes", "fleet.gpus_per_node", "traffic",
    "traffic.duration", "traffic.start_hour", "consumers", "consumers.0",
    "consumers.0.share", "consumers.0.propagation", "consumers.0.propagation.p99",
    "workloads", "workloads.0", "workloads.0.replicas", "workloads.0.gpus",
    "workloads.0.rate", "workloads.0.durations", "workloads.0.durations.p50",
    "workloads.0.durations.max", "workloads.0.startup", "workloads.0.pdb",
    "workloads.0.pdb.maxUnavailable", "workloads.0.max_concurrency",
    "workloads.0.diurnal", "workloads.0.termination", "workloads.0.termination.grace",
    "workloads.0.termination.shutdown_deadline", "upgrade", "upgrade.strategy",
    "upgrade.parallelism", "upgrade.surge_nodes", "upgrade.node_upgrade", "upgrade.start",
]


def _mutated(changes: list[tuple[str, Any]]) -> object:
    data: Any = small()
    for dotted, value in changes:
        try:
            _apply(data, dotted, value)
        except (KeyError, IndexError, TypeError, ValueError):
            continue  # the path is gone after an earlier change
    return data


def _apply(data: Any, dotted: str, value: Any) -> None:
    target = data
    *parents, last = dotted.split(".")
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value


def _parse(data: object) -> None:
    try:
        parse_scenario(data)
    except ScenarioError as exc:
        assert str(exc).startswith(exc.path or "scenario")


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(FIELDS), values), max_size=4))
def test_mutated_scenarios_parse_or_name_the_field(changes: list[tuple[str, Any]]) -> None:
    _parse(_mutated(changes))


@FUZZ
@given(values)
def test_arbitrary_documents_parse_or_name_the_field(data: object) -> None:
    _parse(data)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_files_load_or_fail_cleanly(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_bytes(content)
    with contextlib.suppress(ScenarioError):
        load_scenario(path)
