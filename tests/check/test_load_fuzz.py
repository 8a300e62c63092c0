"""Fuzz the whole check pipeline from a file's bytes (issue 18): reading, parsing, field
validation, rules and output end in findings or input errors naming the file, never a
traceback or a hang. (test_fuzz.py fuzzes the parser and the rules on text.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from check_manifests import container, deployment, hpa, pdb, service
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainsafe.check.context import Context
from drainsafe.check.engine import run
from drainsafe.check.report import to_json

FUZZ = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                    st.sampled_from(["inf", "nan", "1e400", "-5", "90s", "two", "150%"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)

FIELDS: list[tuple[str | int, ...]] = [
    ("spec", "replicas"), ("spec", "template", "spec", "containers"),
    ("spec", "template", "spec", "containers", 0),
    ("spec", "template", "spec", "initContainers"),
    ("spec", "template", "spec", "terminationGracePeriodSeconds"),
    ("metadata", "annotations"), ("metadata", "annotations", "drainsafe.io/max-request-seconds"),
    ("metadata", "annotations", "drainsafe.io/shutdown-seconds"),
    ("spec", "template", "metadata", "annotations"),
    ("spec", "template", "metadata", "annotations", "drainsafe.io/shutdown-seconds"),
    ("spec", "minReplicas"), ("spec", "maxReplicas"), ("spec", "maxUnavailable"),
]


def _set(obj: Any, path: tuple[str | int, ...], value: Any) -> None:
    node = obj
    for key in path[:-1]:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return
    try:
        node[path[-1]] = value
    except (IndexError, TypeError):
        return


def _check(files: list[str]) -> None:
    result = run(files, Context(max_request_seconds=90))
    for error in result.errors:
        assert error.file in files and error.message
    to_json(result)
    assert result.exit_code(Context()) in (0, 1, 2)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(FIELDS), values), max_size=5),
       st.sampled_from(["Deployment", "StatefulSet", "Pod", "HorizontalPodAutoscaler",
                        "PodDisruptionBudget", "CronJob"]))
def test_mutated_objects_from_files(tmp_path: Path, mutations: list[tuple[Any, Any]],
                                    kind: str) -> None:
    obj = deployment(grace=60, containers=[container(command=["vllm", "serve", "m"])])
    obj["kind"] = kind
    for path, value in mutations:
        _set(obj, path, value)
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump_all([obj, service(), pdb(), hpa()], sort_keys=False))
    _check([str(f)])


@FUZZ
@given(st.binary(max_size=400), st.sampled_from(["m.yaml", "m.json"]),
       st.integers(0, 3000))
def test_any_bytes_and_any_nesting(tmp_path: Path, content: bytes, name: str,
                                   depth: int) -> None:
    f = tmp_path / name
    f.write_bytes(b"[" * depth + content + b"]" * depth)
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(deployment(replicas=1)))
    _check([str(f), str(other)])
