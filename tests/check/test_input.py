"""Reading input: formats, errors named with file and line, limits."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from check_manifests import deployment, pdb, service, to_yaml

from drainsafe.check import load
from drainsafe.check.context import Context
from drainsafe.check.engine import run


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_multi_document_yaml_and_line_spans(tmp_path: Path) -> None:
    f = _write(tmp_path / "a.yaml", "# comment\n---\n" + to_yaml(deployment(), service(), pdb()))
    loaded = load.load([f])
    assert [d.obj["kind"] for d in loaded.documents] == [
        "Deployment", "Service", "PodDisruptionBudget"]
    assert loaded.documents[0].start_line == 3
    assert loaded.documents[1].start_line > loaded.documents[0].start_line


def test_json_and_kind_list(tmp_path: Path) -> None:
    items = {"apiVersion": "v1", "kind": "List", "items": [deployment(), service()]}
    f = _write(tmp_path / "list.json", json.dumps(items))
    loaded = load.load([f])
    assert [d.obj["kind"] for d in loaded.documents] == ["Deployment", "Service"]
    assert loaded.documents[1].prefix == ("items", 1)
    # A List in YAML, and a typed list (DeploymentList) too.
    f2 = _write(tmp_path / "list.yaml", to_yaml(dict(items, kind="DeploymentList")))
    assert len(load.load([f2]).documents) == 2


def test_directories_recursive_skip_hidden_and_other_files(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    _write(tmp_path / "sub" / "deeper" / "d.yml", to_yaml(deployment()))
    _write(tmp_path / "sub" / "s.yaml", to_yaml(service()))
    _write(tmp_path / ".git" / "x.yaml", to_yaml(pdb()))
    _write(tmp_path / "README.md", "# not yaml")
    names, errors = load.expand_paths([str(tmp_path)])
    assert not errors
    assert sorted(Path(n).name for n in names) == ["d.yml", "s.yaml"]


def test_unparsable_file_named_with_line_and_others_still_checked(tmp_path: Path) -> None:
    good = _write(tmp_path / "good.yaml", to_yaml(deployment(replicas=1), service()))
    bad = _write(tmp_path / "bad.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n"
                 "  name: x\n   bad: indent\n")
    result = run([good, bad], Context())
    assert [str(e) for e in result.errors] == [
        f"{bad}:5: invalid YAML: mapping values are not allowed in this context"]
    assert any(f.rule == "single-replica" for f in result.findings)
    assert result.exit_code(Context()) == 2


def test_documents_before_a_broken_one_are_kept(tmp_path: Path) -> None:
    f = _write(tmp_path / "m.yaml", to_yaml(deployment()) + "---\nkind: [unclosed\n")
    result = run([f], Context())
    assert result.documents == 1 and len(result.errors) == 1
    assert result.errors[0].line is not None and result.errors[0].line >= 2


def test_helm_template_reported_as_such(tmp_path: Path) -> None:
    f = _write(tmp_path / "t.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n"
               "  name: {{ include \"x.fullname\" . }}\n  labels:\n"
               "    {{- include \"x.labels\" . | nindent 4 }}\n")
    result = run([f], Context())
    assert len(result.errors) == 1
    message = str(result.errors[0])
    assert "Helm template" in message and "line 4" in message and "helm template" in message


@pytest.mark.parametrize("text", ["", "\n# only a comment\n", "---\n---\n"])
def test_empty_input_is_an_error(tmp_path: Path, text: str) -> None:
    f = _write(tmp_path / "empty.yaml", text)
    result = run([f], Context())
    assert result.exit_code(Context()) == 2
    assert "empty input" in str(result.errors[0])


def test_only_unchecked_kinds_is_an_error(tmp_path: Path) -> None:
    f = _write(tmp_path / "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
    result = run([f], Context())
    assert result.exit_code(Context()) == 2 and "ConfigMap" in str(result.errors[0])


def test_missing_path_and_non_object_documents(tmp_path: Path) -> None:
    f = _write(tmp_path / "scalar.yaml", "just a string\n---\n" + to_yaml(deployment()))
    result = run([f, str(tmp_path / "nope.yaml")], Context())
    texts = [str(e) for e in result.errors]
    assert any("not a Kubernetes object" in t for t in texts)
    assert any("no such file" in t for t in texts)
    assert result.documents == 1


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghij"):
        prev = "abcdefghij"[i]
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n" + "\n".join(
        "  " + line for line in lines) + "\n"
    f = _write(tmp_path / "bomb.yaml", text + "---\n" + to_yaml(deployment()))
    started = time.monotonic()
    result = run([f], Context())
    assert time.monotonic() - started < 10
    assert any("alias" in str(e) for e in result.errors)
    assert result.documents == 1  # the document after the bomb is still checked


def test_self_referencing_alias_is_refused(tmp_path: Path) -> None:
    f = _write(tmp_path / "loop.yaml", "kind: Service\nmetadata: &m {name: x, loop: *m}\n")
    result = run([f], Context())
    assert result.errors  # either refused as recursive or rejected by the parser
    # A block mapping inside itself: PyYAML builds the cycle; refused, the next one checked.
    f = _write(tmp_path / "loop2.yaml", "kind: Service\nmetadata: &m\n  name: x\n  loop: *m\n"
               "---\n" + to_yaml(deployment()))
    result = run([f], Context())
    assert [e.line for e in result.errors] == [1], result.errors  # the document's first line
    assert "self-reference" in str(result.errors[0])
    assert result.documents == 1


def test_huge_file_refused_without_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setattr(load, "MAX_INPUT_BYTES", 1024)
    f = _write(tmp_path / "big.yaml", to_yaml(*[deployment(f"d{i}") for i in range(20)]))
    result = run([f], Context())
    assert "limit" in str(result.errors[0]) and result.exit_code(Context()) == 2


def test_deep_nesting_is_an_error_not_a_crash(tmp_path: Path) -> None:
    f = _write(tmp_path / "deep.yaml", "a: " + "[" * 20000 + "]" * 20000 + "\n")
    result = run([f], Context())
    assert result.errors and result.exit_code(Context()) == 2


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"kind: Service\nmetadata:\n  name: caf\xe9\n")
    result = run([str(path)], Context())
    assert "not UTF-8" in str(result.errors[0]) and result.errors[0].line == 3


def test_a_file_named_twice_is_read_once(tmp_path: Path) -> None:
    f = _write(tmp_path / "app.yaml", to_yaml(deployment(), service(), pdb()))
    result = run([str(tmp_path), f], Context())
    assert result.inputs == 1
    assert not any(x.rule == "pdb-overlap" for x in result.findings)
