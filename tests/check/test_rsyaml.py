"""The yaml-rs reader (rsyaml.py) reads whatever it takes exactly as the libyaml path does.

Property: for any text, either rsyaml refuses it (Unsupported, and libyaml reads it as
before), or both readers give the same objects with the same line spans, and the whole
of `parse` (objects, errors, lines) is the same with and without it. Checked on generated
manifests dumped in every PyYAML style, on YAML-like noise, on scalars where YAML 1.1 and
1.2 disagree, and on the project's own manifests.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from check_manifests import container, deployment, hpa, pdb, service
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from drainsafe.check import fastyaml, rsyaml
from drainsafe.check.load import Loaded, SourceText, parse

pytestmark = pytest.mark.skipif(not rsyaml.AVAILABLE, reason="yaml-rs not installed")

ROOT = Path(__file__).parents[2]
REAL = ROOT.parent / "shared" / "research" / "real-manifests"
PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Scalars where YAML 1.1 (PyYAML, and go-yaml v2 behind sigs.k8s.io/yaml) and YAML 1.2
# read differently, or that PyYAML constructs specially.
TRICKY = ["yes", "No", "ON", "off", "y", "n", "0777", "08", "010", "0o17", "0x1F", "0B1",
          "1_000", "_1", "1:30", "-1:30", "190:20:30.15", "1e3", "1.5e3", "1E+3", "1.e3",
          "+.5", "-.5", ".inf", "-.Inf", ".NaN", "nan", "~", "null", "Null", "", "true",
          "TRUE", "tRue", "2024-01-15", "2001-12-14 21:59:43.10 -5", "2001-12-14t21:59:43Z",
          "=", "<<", "99999999999999999999", "1.", "00", "-0", "+1", "-0.0", "1.2.3",
          "500m", "16Gi", "25%", "10s", "v1", "1,000", "a: b", "- x", "#", "'q'", '"d"',
          "{{ .Values.x }}", "8000", "0.5", "@x", "`x", "%x", "!x", "&a", "*a", "? x"]

scalar_text = st.one_of(
    st.sampled_from(TRICKY),
    st.text(alphabet="0123456789+-._:eExXoObB%aflnrstuyNTZ ~", max_size=8),
    st.text(max_size=10),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=False), scalar_text)
keys = st.one_of(st.text(alphabet="abcdefghijklmnopqrstuvwxyz-./", min_size=1, max_size=10),
                 scalar_text, st.integers(-5, 5), st.booleans())
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=16)

manifests = st.sampled_from([
    deployment("web"), deployment("llm", replicas=3, grace=120, containers=[
        container("vllm", command=["vllm", "serve", "m"], args=["--port", "8000"], gpus=1)]),
    service("web"), pdb("web", min_available=2), hpa("web", min_replicas=2),
])


def _docs(items: list[tuple[Any, ...]]) -> list[tuple[Any, int, int]]:
    return [(repr(data), start, end) for data, start, end, *_ in items]


def _libyaml(text: str) -> list[tuple[Any, int, int]] | str:
    try:
        return _docs(list(fastyaml.documents(text)))
    except fastyaml.Unsupported:
        return "unsupported"
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        return f"error: {type(exc).__name__}"


def _parsed(text: str, quick: bool) -> tuple[list[Any], list[Any]]:
    loaded = Loaded()
    parse(SourceText("m.yaml", text), loaded, quick=quick)
    return ([(repr(d.obj), d.doc_index, d.start_line, d.end_line, d.prefix)
             for d in loaded.documents], loaded.errors)


def assert_same_reading(text: str, *, whole_parse: bool = True) -> bool:
    """Both readers agree on `text` (or rsyaml refuses it); True when rsyaml took it.
    `whole_parse`: compare parse() with and without rsyaml too."""
    try:
        quick = rsyaml.documents(text)
    except rsyaml.Unsupported:
        taken = False
    else:
        taken = True
        docs = list(quick)
        assert _docs(docs) == _libyaml(text), text
        lines = text.splitlines()
        for _, start, end, _, (a, b) in docs:  # what locate reads: the document's lines
            assert text[a:b] == "\n".join(lines[start - 1:min(end, len(lines))]), text
    if whole_parse:
        assert _parsed(text, True) == _parsed(text, False), text
    return taken


@PROPERTY
@given(docs=st.lists(st.one_of(values, manifests), min_size=1, max_size=4),
       flow=st.sampled_from([False, None, True]),
       style=st.sampled_from([None, None, '"', "'", "|", ">"]),
       width=st.sampled_from([20, 80, 10_000]), indent=st.sampled_from([2, 4]),
       start=st.booleans(), end=st.booleans(), comments=st.booleans())
@example(docs=[{"a": 1, "b": [1, 2]}], flow=False, style=None, width=80, indent=2,
         start=False, end=False, comments=False)
def test_generated_manifests_read_alike(docs: list[Any], flow: bool | None, style: str | None,
                                        width: int, indent: int, start: bool, end: bool,
                                        comments: bool) -> None:
    text = yaml.safe_dump_all(docs, default_flow_style=flow, default_style=style, width=width,
                              indent=indent, explicit_start=start, explicit_end=end,
                              sort_keys=False, allow_unicode=True)
    if comments:
        text = "# rendered\n" + text.replace("\n---", "\n# next\n---") + "# end\n"
    assert_same_reading(text)


@PROPERTY
@given(base=st.dictionaries(keys, values, min_size=1, max_size=4),
       inner=st.one_of(st.dictionaries(keys, values, min_size=1, max_size=3),
                       st.lists(values, min_size=1, max_size=3)),
       where=st.lists(st.text(alphabet="abc", min_size=1, max_size=2), min_size=2, max_size=4),
       cycle=st.booleans(), flow=st.sampled_from([False, None]))
def test_anchors_and_aliases_read_alike(base: dict[Any, Any], inner: Any, where: list[str],
                                        cycle: bool, flow: bool | None) -> None:
    """Shared objects become anchors and aliases; a cycle becomes an alias inside its own
    anchored node, which yaml-rs would read as null."""
    node = base
    for key in where:  # hang the shared object at several depths
        node[key] = inner
        child: dict[Any, Any] = {}
        node[key + "x"] = child
        node = child
    if cycle:
        node["loop"] = base
    text = yaml.safe_dump(base, default_flow_style=flow, sort_keys=False)
    # The whole of parse() for a cycle (refused before its aliases are walked); the readers
    # only otherwise (parse() on aliases is compared on the edge documents).
    taken = assert_same_reading(text, whole_parse=cycle)
    assert not (taken and cycle)


def test_plain_kubernetes_yaml_is_taken() -> None:
    """The fast path is not vacuous: ordinary manifests (block style with anchors, as
    PyYAML writes shared objects; flow collections, quantities, percentages, comments)
    go through it."""
    shared = deployment("web")
    shared["spec"]["template"]["metadata"]["labels"] = shared["spec"]["selector"]["matchLabels"]
    text = yaml.safe_dump_all([shared, service("web"), pdb("web", max_unavailable=1)],
                              sort_keys=False)
    assert "*id001" in text and assert_same_reading(text)
    text = ("# a comment, yes\nkind: ConfigMap\nmetadata: {name: c, labels: {app: x}}\n"
            "data:\n  # no shell\n  script: 'sleep 10; exec server'\n  cpu: 500m\n"
            "  mem: 16Gi\n  surge: 25%\n  args: [--port, '8000']\n  empty: {}\n")
    assert assert_same_reading(text)


@PROPERTY
@given(st.lists(st.sampled_from(
    ["\n", " ", "  ", "- ", ": ", "k", "v", "1", "0", "x", "'", '"', "[", "]", "{", "}", ",",
     "#", "&a ", "*a", "&a.b ", "*a.b", "|", ">", "---\n", "...\n", "?", ":", "\t", "\r",
     "\x01", "yes", "on", "07", "1e3", "1:2", "\\", "é", "\u2028", "<<", "!", "%"]), max_size=40))
def test_yaml_like_noise_reads_alike(parts: list[str]) -> None:
    assert_same_reading("".join(parts))


@PROPERTY
@given(header=st.sampled_from(["k: ", "- ", "- k: ", "a:\n  k: ", "a:\n- k: ", "a:\n  - "]),
       indicator=st.sampled_from(["|", "|-", "|+", ">", ">-", ">+", "|2", ">1-", "|-2"]),
       comment=st.booleans(), extra=st.sampled_from([1, 2, 4]),
       lines=st.lists(st.tuples(st.sampled_from([0, 0, 0, 1, 3, -1, -3]), st.sampled_from(
           ["a", "b c", "x: y", "# not a comment", "- item", "tail  ", "q'uote", '"dq"',
            "{x}", "[y]", "a | b", "> gt", "&& exec x", "*.txt", "", "   ", "yes", "0777"])),
           max_size=6),
       after=st.sampled_from(["", "next: 1\n", "- next\n", "  next: 1\n", "---\nb: 2\n"]),
       blank=st.sampled_from(["", "\n", "\n\n", "  \n"]))
def test_block_scalars_read_alike(header: str, indicator: str, comment: bool, extra: int,
                                  lines: list[tuple[int, str]], after: str, blank: str) -> None:
    """Literal and folded scalars (scripts, descriptions): taken when both readers agree,
    refused (empty, leading blank line, odd end, indentation indicator) otherwise."""
    last = header.rsplit("\n", 1)[-1]
    base = len(last) - len(last.lstrip(" -")) + (len(last) - len(last.lstrip(" ")))
    base = len(last.rstrip(" ").rstrip(":").rstrip("k").rstrip()) if "k" in last else base
    body = "".join((" " * max(base + extra + shift, 0) + word if word.strip() else word) + "\n"
                   for shift, word in lines)
    text = header + indicator + (" # c" if comment else "") + "\n" + body + blank + after
    assert_same_reading(text)


@pytest.mark.parametrize("text", [
    "k: |\n  echo a && exec x *.txt\n  # kept\nj: 1\n",
    "- |\n  one\n  two\n- >-\n  folded\n  text\n",
    "a:\n  args:\n    - |\n      set -e\n      exec vllm serve m\n  b: 1\n",
    "k: >\n  a\n\n  b\n   more\nj: 1\n",
])
def test_block_scalars_are_taken(text: str) -> None:
    assert assert_same_reading(text)


@pytest.mark.parametrize(("text", "why"), [
    ("k: |\nj: 1\n", "empty block scalar, or one starting with a blank line"),
    ("k: |\n\n  a\n", "empty block scalar, or one starting with a blank line"),
    ("k: |", "empty block scalar"),
    ("a:\n  k: |\n      x\n    y\n", "block scalar ends at an odd indentation"),
    ("k: a |\n", "block scalar in an unusual form"),
    ("k: &a |\n  x\n", "block scalar in an unusual form"),
    ("k: |2\n   x\n", "token '|2' reads differently in YAML 1.1"),
])
def test_block_scalars_refused(text: str, why: str) -> None:
    assert rsyaml.gate(text) == why
    assert_same_reading(text)


@pytest.mark.parametrize("text", [
    "k: {\n  [x, y]: 1}\n", "k: {a: 1,\n  {x: 1}: 2}\n", "k: {{ .Values.x }}\n",
    "k: [{a: 1,\n  [x]: 2}]\n"])
def test_flow_keys_found_after_their_lines_passed_elsewhere(text: str) -> None:
    """The token check skips lines it passed before; a collection as a flow mapping's key
    is still found, even where it spans lines of which some passed in another text."""
    lines = text.splitlines()
    for line in lines:  # each line alone, where the reader takes it
        with contextlib.suppress(rsyaml.Unsupported):
            list(rsyaml.documents(line + "\n"))
    with pytest.raises(rsyaml.Unsupported):
        list(rsyaml.documents(text))
    assert_same_reading(text)


@pytest.mark.parametrize("scalar", TRICKY)
@pytest.mark.parametrize("form", ["k: {}\n", "- {}\n", "{}: v\n", "k: [{}]\n", "{{a: {}}}\n"])
def test_scalars_where_yaml_versions_differ(scalar: str, form: str) -> None:
    assert_same_reading(form.format(scalar))


@pytest.mark.parametrize("text", [
    "a: 1\n---\nb: 2\n---\n", "---\n---\n", "# c\n---\na: 1\n---\nb: 1\n",
    "a: 1\n---\n# only\n---\nb: 2\n", "a: 1", "\n\n# x\na: 1\n\n# y\n", "---", "", "# c\n",
    "a: 1\n---", "x\n", "---\n\n  a: 1\n# c\n---\n\n", "--- # c\na: 1\n", "--- {a: 1}\n",
    "--- |\n  x\n", "a: 1\n...\n", "%YAML 1.1\n---\na: 1\n", "a: 1\na: 2\n", ": a\n",
    "- : a\n", "[a, b]: c\n", "? a\n: b\n", "k: a\x01b\n", "k: \"a\x7fb\"\n", "k:\tv\n",
    "k: v\r\n", "k: !!str 1\n", "<<: {a: 1}\nb: 2\n", "a: &x [1]\nb: *x\n",
    "k: |\n  a\n---\nj: 2\n", "k: 'a\n---\n b'\n", "k: v\u2028w\n", "\ufeffk: v\n",
    "k: v # yes\n", "k: \"on\"\n", "k: 'yes'\n", "{a:1}\n", '{"a":1}\n',
    # Aliases inside their own anchored node: PyYAML builds a cycle, yaml-rs a null.
    "a: &x\n  b: *x\n", "- &x\n  - *x\n", "a: &x [1, *x]\n", "- &x k: 1\n  j: *x\n",
    "a: &x\n- 1\n- *x\n", "a: &x\n  k: \"v\n\n\"\n  j: *x\n", "&x a: 1\nb: *x\n",
    "a: &x\n  k: 1\nb: *x\n", "- &x\n  k: 1\n- *x\n", "a: &x 1\nb: &x 2\nc: *x\n",
    "a: *x\nb: &x 1\n", "a: &x\n  # c\nb: *x\n", "a: &x1 1\nb: &x 2\nc: *x\n",
    "a" * 1100 + ": v\n", '"' + "k" * 1100 + '": v\n', 'k: "\\/\\L\\P\\ \\_"\n',
    'k: "\\ud800"\n', 'k: "\\q"\n', 'k: "a\\\n  b"\n', "k: 'a\n\n  b'\n", "k: a\n\n  b\n",
    "~: x\n", "1.5: x\n", "k: 1 2\n", "k: 2001-12-14 x\n", "k: 12:00 x\n",
    "k: [a, [b, {c: d}], {}]\n", "k: !!binary aGk=\n",
    "a: &x.y 1\nb: *x.y\n", "a: &x-y 1\nb: *x-y\n", "a: &x:y 1\n", "a: &é 1\nb: *é\n",
])
def test_edge_documents_read_alike(text: str) -> None:
    assert_same_reading(text)


@pytest.mark.parametrize(("text", "why"), [
    ("a: - - x\nb:\n  <<: {c: 1}\n", "nested compact sequences"),
    ("b:\n  <<: {c: 1}\na:\n- - x\n", "merge key"),
    ("a: 1\n<<: {c: 1}\n", "merge key"),
    ("a:\n-   - x\n", "nested compact sequences"),
    ("a: x << y\n", "merge key"),
])
def test_gate_names_the_first_structure_it_refuses(text: str, why: str) -> None:
    assert rsyaml.gate(text) == why


@pytest.mark.parametrize("text", [
    "a: &xy\n  k: 1\nb: &x\n  k: 2\nc: *x\n",  # `&xy` is not the anchor of `*x`
    "a: &x\n  k: 1\nb: &xy 2\nc: *x\n", "a:&x 1\nb: &x\n  k: 1\nc: *x\n",
])
def test_aliases_find_their_own_anchor(text: str) -> None:
    assert_same_reading(text)


@pytest.mark.parametrize("text", ["- " * 20_000 + "x\n", "[" * 20_000, "{a: " * 20_000,
                                  "".join(" " * i + "k:\n" for i in range(300)) + "  v\n",
                                  "-  " * 20_000 + "x\n"])
def test_deep_nesting_is_left_to_libyaml(text: str) -> None:
    """yaml-rs 0.1.6 overflows its stack (the process dies) on ~10,000 nested block
    sequences; the gate must never hand it such input."""
    with pytest.raises(rsyaml.Unsupported):
        list(rsyaml.documents(text))


def _project_manifests() -> list[Path]:
    found = sorted((ROOT / "examples").rglob("*.yaml"))
    found += sorted((ROOT / "tests").rglob("*.yaml"))
    if REAL.is_dir():
        found += sorted(REAL.glob("*.yaml"))
    return found


@pytest.mark.parametrize("path", _project_manifests(), ids=lambda p: p.name)
def test_project_manifests_read_alike(path: Path) -> None:
    assert_same_reading(path.read_text(encoding="utf-8-sig"))


QUOTED_WORDS = st.lists(st.sampled_from(
    [*TRICKY, "*", "* *", "0 3 * * *", "#", " # x", "&a", "*a", "'", "''", '\\"', "\\n",
     "\\x41", "\\u00e9", "\\/", "\\e", "\\N", "\\_", "\\L", "\\P", "\\ ", "\\", ":",
     ": ", ",", "[", "]", "{", "}", "- ", "a b"]), max_size=6)


@PROPERTY
@given(words=QUOTED_WORDS, quote=st.sampled_from(['"', "'"]),
       where=st.sampled_from(["k: {}\n", "- {}\n", "{}: v\n", "k: [{}, x]\n", "{{a: {}}}\n",
                              "k:\n  - {}\n  - b: {} # c\n", "k: {} # x * y\n"]),
       after=st.sampled_from(["", "k2: *a\n", "j: &a {x: 1}\nk2: *a\n", "c: it's * 2\n"]))
def test_quoted_scalars_read_alike(words: list[str], quote: str, where: str,
                                   after: str) -> None:
    # Words inside a quoted scalar are not checked as scalars or syntax (issue 31: a cron
    # schedule sent a whole file to the slow path); what either reader makes of the quoted
    # text, escapes included, must still be the same.
    body = " ".join(words)
    if quote == "'":
        body = body.replace("'", "''")
    else:
        body = body.replace('"', '\\"') if body.count("\\") % 2 == 0 else body
    scalar = f"{quote}{body}{quote}"
    assert_same_reading(where.format(scalar, scalar) + after)


@pytest.mark.parametrize("text", [
    'schedule: "0 3 * * *"\n',
    "a: 'it''s * here'\nb: [\"* *\", '#']\n",
    'k: "x: y # z"\n',
    'k: "tab\\there \\u00e9 * x"\n',
])
def test_quoted_scalars_are_taken(text: str) -> None:
    assert assert_same_reading(text), text
