"""locate() finds the same line as its first version, a plain loop over the lines.

The regex version (locate.py) must be a pure speed-up: `reference` below is that first
version, kept verbatim as the specification, and hypothesis compares the two on generated
documents (every PyYAML style, comments, lists, quoted keys) and paths, present or not.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainsafe.check.findings import Path
from drainsafe.check.load import Document, SourceText
from drainsafe.check.locate import locate

_ITEM = re.compile(r"^(\s*)-(\s|$)")
KEY = st.sampled_from(["spec", "containers", "name", "a", "b", "- x", "c d", "e:f", "#g",
                       "'h'", '"i"', "j\tk", "l\nm", "n.o", "p*"])
values = st.recursive(
    st.one_of(st.none(), st.integers(), st.text(alphabet="ab :-#'\"\n\t", max_size=6), KEY),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEY, inner, max_size=3)),
    max_leaves=14)


def _ref_locate(doc: Document, path: Path, memo: dict[Any, tuple[int, int]]) -> int:
    lines = doc.source.text.splitlines()
    start = doc.start_line - 1
    end = min(doc.end_line, len(lines))
    full = (*doc.prefix, *path)
    depth, state = 0, (start, -1)
    for d in range(len(full), 0, -1):
        hit = memo.get((start, full[:d]))
        if hit is not None:
            depth, state = d, hit
            break
    pos, parent_indent = state
    if pos < 0:
        return -pos
    for d in range(depth, len(full)):
        key = full[d]
        if isinstance(key, int):
            found = _ref_nth_item(lines, pos, end, parent_indent, key)
        else:
            found = _ref_key(lines, pos, end, parent_indent, key)
        if found is None:
            memo[(start, full[:d + 1])] = (-(pos + 1) if d else -doc.start_line, 0)
            return pos + 1 if d else doc.start_line
        pos, parent_indent = found
        memo[(start, full[:d + 1])] = found
    return pos + 1 if full else doc.start_line


def _ref_key(lines: list[str], pos: int, end: int, parent: int, key: str
             ) -> tuple[int, int] | None:
    quoted = (f'"{key}"', f"'{key}'")
    for i in range(pos, end):
        line = lines[i]
        content = line.lstrip(" ")
        if not content or content[0] == "#":
            continue
        if i > pos and len(line) - len(content) <= parent:
            return None
        body = content
        while body[:2] == "- ":
            body = body[2:].lstrip(" ")
        for form in (key, *quoted):
            if body.startswith(form) and body[len(form):len(form) + 1] == ":":
                rest = body[len(form) + 1:len(form) + 2]
                if rest in ("", " ", "\t"):
                    key_indent = len(line) - len(body)
                    if key_indent > parent:
                        return i, key_indent
    return None


def _ref_nth_item(lines: list[str], pos: int, end: int, parent: int, n: int
                  ) -> tuple[int, int] | None:
    seen, item_indent = -1, None
    for i in range(pos + 1, end):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ITEM.match(line)
        if not match:
            if len(line) - len(line.lstrip(" ")) <= parent:
                return None
            continue
        indent = len(match.group(1))
        if item_indent is None:
            item_indent = indent
        if indent < item_indent:
            return None
        if indent == item_indent:
            seen += 1
            if seen == n:
                return i, indent
    return None


def _paths(node: Any, prefix: Path = ()) -> list[Path]:
    found = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, str):
                found += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _paths(v, (*prefix, i))
    return found


def test_the_next_list_item_ends_the_search() -> None:
    """`image` is missing from the first container: the search must stop at the second
    one's `- image:` line (no deeper than the first item), not find it there."""
    text = "spec:\n  containers:\n  - name: a\n    ports: []\n  - image: b\n    name: c\n"
    data = yaml.safe_load(text)
    doc = Document(data, SourceText("m.yaml", text), 0, 1, 7)
    path = ("spec", "containers", 0, "image")
    assert locate(doc, path) == _ref_locate(doc, path, {}) == 3


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.dictionaries(KEY, values, min_size=1, max_size=4),
       flow=st.sampled_from([False, None, True]), indent=st.sampled_from([2, 4]),
       style=st.sampled_from([None, '"', "'"]), width=st.sampled_from([20, 80]),
       noise=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 7), st.sampled_from(
           ["# c", "", "x: 1", "- y", "spec: 1", "name:", "'a': 2", "- - b", "\tz", "- "])),
           max_size=4),
       extra=st.lists(st.lists(st.one_of(KEY, st.integers(0, 3)), max_size=4), max_size=4),
       start=st.integers(1, 3))
def test_locate_matches_the_line_loop(data: dict[str, Any], flow: bool | None, indent: int,
                                      style: str | None, width: int,
                                      noise: list[tuple[int, int, str]],
                                      extra: list[list[str | int]], start: int) -> None:
    body = yaml.safe_dump(data, default_flow_style=flow, indent=indent, default_style=style,
                          width=width, sort_keys=False, allow_unicode=True)
    lines = body.splitlines()
    for at, spaces, line in noise:  # comments, blank lines, stray keys
        lines.insert(at % (len(lines) + 1), " " * spaces + line)
    text = "\n" * (start - 1) + "\n".join(lines) + "\n---\nnext: doc\n"
    source = SourceText("m.yaml", text)
    doc = Document(data, source, 0, start, start + len(lines))
    # As yaml-rs reads it (a text whose only line break is \n): with the lines' span.
    spanned = Document(data, SourceText("m.yaml", text), 0, start, start + len(lines),
                       span=(start - 1, text.rindex("\n---\n") + 4))
    only_newlines = len(text.splitlines()) == text.count("\n")
    memo: dict[Any, tuple[int, int]] = {}
    present = _paths(data)
    missing = [(*p, k) for p in present for k in ("name", "a", "spec")]  # e.g. list items
    for path in [*present, *missing, *(tuple(p) for p in extra)]:
        expected = _ref_locate(doc, path, memo)
        assert locate(doc, path) == expected, (text, path)
        if only_newlines:
            assert locate(spanned, path) == expected, (text, path)
