"""Fuzz: any kubeconfig file ends in a client or a KubeconfigError naming the file, never
another exception (issue 18). Building a client does no network I/O."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainsafe.kube import KubeClient, KubeconfigError

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=10),
                    st.sampled_from(["https://127.0.0.1:1", "http://127.0.0.1:1", "t",
                                     "/nonexistent/ca.crt", "true"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)


def _base() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": "https://127.0.0.1:1",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "t", "user": {"token": "x"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }


PATHS: list[tuple[Any, ...]] = [
    ("current-context",), ("clusters",), ("clusters", 0), ("clusters", 0, "cluster"),
    ("clusters", 0, "cluster", "server"), ("clusters", 0, "name"), ("users",),
    ("users", 0), ("users", 0, "user"), ("users", 0, "user", "token"),
    ("users", 0, "user", "exec"), ("contexts",), ("contexts", 0),
    ("contexts", 0, "context"), ("contexts", 0, "context", "cluster"),
    ("contexts", 0, "name"),
]


def _load(path: Path) -> None:
    try:
        client = KubeClient.from_kubeconfig(str(path))
    except KubeconfigError:
        return
    asyncio.run(client.aclose())


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    node = doc
    for key in path[:-1]:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return
    try:
        node[path[-1]] = value
    except (IndexError, TypeError):
        return


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PATHS), values), max_size=4))
def test_mutated_kubeconfigs_load_or_fail_cleanly(tmp_path: Path,
                                                  changes: list[tuple[Any, Any]]) -> None:
    doc = _base()
    for path, value in changes:
        _set(doc, path, value)
    f = tmp_path / "kubeconfig"
    f.write_text(yaml.safe_dump(doc))
    _load(f)


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes_fail_cleanly_naming_the_file(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "kubeconfig"
    f.write_bytes(content)
    try:
        _load(f)
    except KubeconfigError as exc:
        assert str(f) in str(exc) or "context" in str(exc)


def test_binary_kubeconfig_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "kubeconfig"
    f.write_bytes(b"\x00\xff\xfe binary")
    try:
        KubeClient.from_kubeconfig(str(f))
    except KubeconfigError as exc:
        assert str(f) in str(exc)
    else:
        raise AssertionError("a binary kubeconfig was accepted")
