"""Fuzzed input never crashes check: arbitrary text, and objects with fields of any type."""

from __future__ import annotations

from typing import Any

import yaml
from check_manifests import container, deployment, hpa, pdb, service
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainsafe.check.context import Context
from drainsafe.check.engine import Result, check_documents
from drainsafe.check.load import Loaded, SourceText, parse
from drainsafe.check.report import to_json, to_sarif
from drainsafe.check.rules import all_rules

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["30", "50%", "0%", "100%", "Recreate", "LoadBalancer",
                                     "sleep 10", "/bin/sh", "{{ .Values.x }}"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)

FIELDS = [
    ("spec",), ("spec", "replicas"), ("spec", "selector"), ("spec", "strategy"),
    ("spec", "template"), ("spec", "template", "metadata"), ("spec", "template", "spec"),
    ("spec", "template", "spec", "containers"), ("spec", "template", "spec", "volumes"),
    ("spec", "template", "spec", "terminationGracePeriodSeconds"),
    ("spec", "template", "spec", "containers", 0, "lifecycle"),
    ("spec", "template", "spec", "containers", 0, "command"),
    ("spec", "template", "spec", "containers", 0, "args"),
    ("spec", "template", "spec", "containers", 0, "readinessProbe"),
    ("spec", "template", "spec", "containers", 0, "livenessProbe"),
    ("spec", "template", "spec", "containers", 0, "resources"),
    ("spec", "minAvailable"), ("spec", "maxUnavailable"), ("spec", "minReplicas"),
    ("spec", "scaleTargetRef"), ("spec", "type"), ("metadata",), ("metadata", "annotations"),
    ("metadata", "name"), ("metadata", "namespace"), ("kind",), ("items",),
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


def _run(docs_text: str) -> None:
    loaded = Loaded()
    parse(SourceText("fuzz.yaml", docs_text), loaded)
    findings, index = check_documents(loaded.documents, Context(max_request_seconds=90))
    for f in findings:
        assert f.line >= 1 and f.message and f.rule in all_rules()
    assert len(to_json(Result(findings, [], index))["findings"]) == len(findings)


@FUZZ
@given(st.text(max_size=400))
def test_arbitrary_text_never_crashes(text: str) -> None:
    _run(text)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(FIELDS), values), max_size=6),
       st.sampled_from(["Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet", "Pod",
                        "PodDisruptionBudget", "Service", "HorizontalPodAutoscaler", "List",
                        "RayService"]))
def test_mutated_objects_never_crash(mutations: list[tuple[tuple[str | int, ...], Any]],
                                     kind: str) -> None:
    base = deployment(grace=60, containers=[container(command=["vllm", "serve", "m"])])
    base["kind"] = kind
    for path, value in mutations:
        _set(base, path, value)
    text = yaml.safe_dump_all([base, service(), pdb(), hpa()], sort_keys=False)
    _run(text)


@FUZZ
@given(st.lists(values, min_size=1, max_size=4))
def test_arbitrary_documents_never_crash(docs: list[Any]) -> None:
    _run(yaml.safe_dump_all(docs))


def test_sarif_of_fuzz_like_result_is_json_serialisable() -> None:
    import json

    loaded = Loaded()
    parse(SourceText("x.yaml", yaml.safe_dump(deployment(replicas=1))), loaded)
    findings, index = check_documents(loaded.documents, Context())
    json.dumps(to_sarif(Result(findings, [], index), all_rules()))
