"""Fix snippets: the YAML a user pastes, nested at the right place in their object."""

from __future__ import annotations

import marshal
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from drainsafe.check import scalars
from drainsafe.check.findings import Path


def _written(value: Any) -> bytes | str:
    """A key that is equal for two plain-data values only when their reprs are and they share
    the same collections: marshal's bytes name each exact type and value as repr does, at
    under half repr's cost (repr takes ~110 instructions a character, ~16,000 for a fix
    snippet's value), and version 4 writes a collection met twice as a reference to the
    first, which the dump shows as an anchor (version 2 did not: an equal value without
    sharing got the anchored text, or the reverse). Version 4 also flags any object held
    elsewhere, so equal values may differ in bytes: a miss, never a wrong text. Types
    marshal does not write (a date, a subclass) keep their repr, never equal to bytes."""
    try:
        return marshal.dumps(value, 4)
    except ValueError:
        return repr(value)


_NESTED: dict[tuple[Path, bytes | str, tuple[tuple[int, str], ...]], str] = {}


def nest(path: Path, value: Any, item_names: dict[int, str] | None = None) -> str:
    """YAML for `value` placed at `path`; list indices become `- name: ...` items."""
    # Many findings share a snippet: key on the small value, not the whole nested node.
    key = (path, _written(value), tuple(sorted(item_names.items())) if item_names else ())
    text = _NESTED.get(key)
    if text is None:
        text = _nest(path, value, item_names or {})
        if len(_NESTED) < 10_000:
            _NESTED[key] = text
    return text


def _nest(path: Path, value: Any, names: dict[int, str]) -> str:
    node: Any = value
    for position in range(len(path) - 1, -1, -1):
        key = path[position]
        if isinstance(key, int):
            item: dict[str, Any] = {"name": names[position]} if position in names else {}
            if isinstance(node, dict):
                item.update(node)
            node = [item]
        else:
            node = {key: node}
    return dump(node)


_DUMPED: dict[bytes | str, str] = {}


def dump(node: Any) -> str:
    """Block-style YAML, exactly as PyYAML's dumper writes it (sort_keys=False,
    default_flow_style=False, width=100). Fix snippets are small mappings of names and
    numbers: emit() writes those directly (a fleet's snippets differ in names and namespaces,
    so a cache of dumps stops helping, and a dump costs ~0.2 ms); anything it is not sure
    of goes to PyYAML."""
    key = _written(node)  # a repeated snippet (a chart's replicas) is a lookup
    text = _DUMPED.get(key)
    if text is None:
        text = dump_once(node)
        if len(_DUMPED) < 10_000:
            _DUMPED[key] = text
    return text


def dump_once(node: Any) -> str:
    """dump() without its memo, for a snippet that names its own object (a bare Pod's
    Deployment): it never repeats, and its key alone (the whole pod spec's bytes) cost as
    much as a tenth of writing it."""
    text = emit(node)
    if text is None:
        import yaml  # the few snippets emit() leaves: a clean input never loads PyYAML

        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        text = yaml.dump(node, Dumper=dumper, sort_keys=False, default_flow_style=False,
                         width=WIDTH).rstrip("\n")
    return text


_NAME, _NAMESPACE, _TAIL = "x7f3a-object-name", "x7f3a-object-ns", "x7f3a-tail"
"""Stand-ins for an object's name and namespace (neither holds the other), and for a
mapping taken from the input (`tail`)."""
_Pieces = tuple[str, str, str, bool, str]
"""A snippet's text with stand-in names, cut around them: before the first, between,
after (the tail's stand-in line dropped), whether the name comes first, and the stand-in
tail's line (for _tail)."""
_NAMED: dict[tuple[Callable[..., Any], bool, bytes | str], _Pieces | None] = {}
"""By build, tail or not, and its other arguments (None: not written by filling in)."""
_NOT_YET: _Pieces = ("", "", "", False, "(not emitted yet)")
"""What _NAMED.get gives for a snippet not met before (one lookup, not `in` and `[]`)."""


def dump_named(build: Callable[..., Any], name: str, namespace: str, *args: Any,
               tail: dict[str, Any] | None = None) -> str:
    """dump(build(name, namespace, *args)) for a snippet that differs from object to object
    only in the object's name and namespace (a missing PDB's: a fleet's differ in nothing
    else; emitting each whole was ~20 us), and in `tail`, a mapping from the input that
    build() writes last (a bare Pod's spec in the Deployment that replaces it:
    build(name, namespace, *args, tail)).

    The snippet is emitted once with stand-ins, then each object's names are put in as
    emit() writes a string leaf, `_scalar(value)` whatever surrounds it (strings get no
    anchors), and the tail's lines are emitted in place of its stand-in. Anything else (a
    stand-in not met exactly once, a name emit() leaves to PyYAML, a tail that shares a
    collection, with itself or with `args`, which would need anchors) is dumped whole.
    tests/check/test_snippets.py compares the two."""
    # Keyed on what build() is given, not on what it builds: a hit makes no template and
    # marshals only `args` (-60 M instructions on the findings-heavy corpus, 3,300 calls).
    key = (build, tail is not None, _written(args))
    pieces = _NAMED.get(key, _NOT_YET)
    if pieces is _NOT_YET:
        pieces = _cut(build, args, tail is not None)
        if len(_NAMED) < 1_000:
            _NAMED[key] = pieces
    if pieces is None:
        return _whole(build, name, namespace, args, tail)
    before, between, after, name_first, line = pieces
    try:
        written_name = _STRINGS.get(name) or _scalar(name)
        written_namespace = _STRINGS.get(namespace) or _scalar(namespace)
        rest = "" if tail is None else _tail(line, tail, args)
    except _Unsure:
        return _whole(build, name, namespace, args, tail)
    if name_first:
        return before + written_name + between + written_namespace + after + rest
    return before + written_namespace + between + written_name + after + rest


def _cut(build: Callable[..., Any], args: tuple[Any, ...], tail: bool) -> _Pieces | None:
    """emit()'s text of build() with stand-ins, cut around them (see _Pieces)."""
    extra = (_TAIL,) if tail else ()
    text = emit(build(_NAME, _NAMESPACE, *args, *extra))
    if text is None or (text.count(_NAME) != 1 or text.count(_NAMESPACE) != 1
                        or text.count(_TAIL) != len(extra)
                        or not text.endswith(f": {_TAIL}" if extra else "")):
        return None
    line = text[text.rfind("\n") + 1:]
    if tail:  # the stand-in ends the text: its line's `: x7f3a-tail` goes
        text = text[:-len(_TAIL) - 1]
    i, j = text.index(_NAME), text.index(_NAMESPACE)
    if i < j:
        return text[:i], text[i + len(_NAME):j], text[j + len(_NAMESPACE):], True, line
    return text[:j], text[j + len(_NAMESPACE):i], text[i + len(_NAME):], False, line


def _whole(build: Callable[..., Any], name: str, namespace: str, args: tuple[Any, ...],
           tail: dict[str, Any] | None) -> str:
    if tail is None:
        return dump(build(name, namespace, *args))
    return dump_once(build(name, namespace, *args, tail))  # never repeats: no memo


_TAILS: dict[tuple[str, bytes], str | None] = {}
"""_tail's answers (None: _Unsure) by the stand-in's line and marshal's version 4 bytes of
(args, tail)."""
_UNWRITTEN = "(not written yet)"


def _tail(line: str, tail: dict[str, Any], args: tuple[Any, ...]) -> str:
    """`tail`'s lines, from a line break, as emit() writes them where the stand-in's line
    (the text's last) holds it."""
    if type(tail) is not dict or not tail:
        raise _Unsure
    # A fleet's bare Pods share their specs: each distinct one is written once (walking
    # it for anchors and writing it was ~100,000 instructions a Pod). Version 4, unlike
    # _written's 2, writes a collection met again as a reference to the first: equal bytes
    # are equal values shared alike, hence the same anchors (bytes that differ only by
    # reference counts are a miss, never a wrong answer).
    try:
        key = (line, marshal.dumps((args, tail), 4))
    except ValueError:  # a type marshal does not write: no memo
        return _tail_once(line, tail, args)
    found = _TAILS.get(key, _UNWRITTEN)
    if found is _UNWRITTEN:
        try:
            found = _tail_once(line, tail, args)
        except _Unsure:
            found = None
        if len(_TAILS) < 1_000:
            _TAILS[key] = found
    if found is None:
        raise _Unsure
    return found


def _tail_once(line: str, tail: dict[str, Any], args: tuple[Any, ...]) -> str:
    seen: set[int] = set()
    for arg in args:  # a collection of args met again in the tail would be anchored
        if type(arg) is dict or type(arg) is list:
            _find_anchors(arg, seen, {})
    anchors: dict[int, str] = {}
    _find_anchors(tail, seen, anchors)
    if anchors:
        raise _Unsure
    key = line.lstrip(" ")
    if key.startswith("-"):  # a list item's first key: not built so here
        raise _Unsure
    lines = [""]
    _mapping(tail, " " * (len(line) - len(key) + 2), lines, None)
    return "\n".join(lines)


WIDTH = 100
_PLAIN = re.compile(
    r"-*[A-Za-z0-9_./$][A-Za-z0-9_./=@+$-]*(?:[ :][A-Za-z0-9_./=@+$-]+)*|--")
"""Strings written plain or single-quoted here: no indicator first (`--flag` is not one, nor
`--` ending a command's options), no quote, no `#`, no `: ` or trailing colon, no flow
indicator, single spaces. PyYAML writes such a string plain, or single-quoted when plain it
would read as another type ("1", "true")."""
_SHORT = 60
"""Strings with a space longer than this go to PyYAML, which folds plain scalars past the
width (a key and its indentation come before the value)."""


class _Unsure(Exception):
    """A value emit() leaves to PyYAML."""


def emit(node: Any) -> str | None:
    """PyYAML's block-style text for a mapping of mappings, lists, and plain-safe strings,
    ints, booleans and nulls; None for anything else (tests/check/test_snippets.py compares
    the two, and reads the text back). A collection met twice is written as PyYAML does:
    an anchor (`&id001`, numbered in the order the second meetings are found) where it is
    first written, an alias (`*id001`) after."""
    if type(node) is not dict or not node:
        return None
    lines: list[str] = []
    try:
        anchors: dict[int, str] = {}
        _find_anchors(node, set(), anchors)
        # Most snippets share no collection: then none asks for a mark, and where some
        # are shared only those do (a call per collection was a tenth of a snippet's cost).
        _mapping(node, "", lines, _Anchors(anchors) if anchors else None)
    except _Unsure:
        return None
    return "\n".join(lines)


class _Anchors:
    __slots__ = ("names", "written")

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        self.written: set[int] = set()

    def mark(self, node: object) -> str | None:
        """`&id001` where a shared collection is first written, `*id001` (an alias: nothing
        more is written) after; None for the others."""
        name = self.names.get(id(node))
        if name is None:
            return None
        if id(node) in self.written:
            return f"*{name}"
        self.written.add(id(node))
        return f"&{name}"


def _find_anchors(node: Any, seen: set[int], anchors: dict[int, str]) -> None:
    """PyYAML's serializer (anchor_node): a collection gets an anchor when it is met a second
    time, in the order of the walk."""
    key = id(node)  # node is a dict or a list: its caller asked
    if key in seen:
        if not node:
            raise _Unsure  # a shared empty collection (`&id001 {}`): PyYAML's own layout
        if key not in anchors:
            anchors[key] = f"id{len(anchors) + 1:03d}"
        return
    seen.add(key)
    for child in (node.values() if type(node) is dict else node):
        kind = type(child)
        if kind is dict or kind is list:  # scalars are never anchored: no call for them
            _find_anchors(child, seen, anchors)


def _mapping(node: dict[Any, Any], pad: str, lines: list[str], anchors: _Anchors | None,
             first: str | None = None) -> None:
    """`first`: the prefix of the first key's line (`- ` items put their first key there)."""
    for key, value in node.items():
        lead = pad if first is None else first
        first = None
        head = f"{lead}{_STRINGS.get(key) or _scalar(key)}:"  # keys recur: looked up inline
        kind = type(value)
        if kind is dict or kind is list:
            mark = (anchors.mark(value) if anchors is not None and id(value) in anchors.names
                    else None)
            if mark is not None:
                if mark[0] == "*":
                    lines.append(f"{head} {mark}")
                    continue
                head = f"{head} {mark}"
            if not value:
                lines.append(head + (" {}" if kind is dict else " []"))
            elif kind is dict:
                lines.append(head)
                _mapping(value, pad + "  ", lines, anchors)
            else:
                lines.append(head)
                _sequence(value, pad, lines, anchors)  # PyYAML indents no sequence here
        elif kind is str and (text := _STRINGS.get(value)) is not None:
            lines.append(f"{head} {text}")  # the usual leaf: a name written before
        elif kind is int:
            lines.append(f"{head} {value}")
        else:
            lines.append(_leaf(value, f"{head} ", pad + "  "))


def _sequence(node: list[Any], pad: str, lines: list[str], anchors: _Anchors | None
              ) -> None:
    for item in node:
        kind = type(item)
        if kind is dict:
            mark = (anchors.mark(item) if anchors is not None and id(item) in anchors.names
                    else None)
            if mark is not None:
                lines.append(f"{pad}- {mark}")
                if mark[0] == "&":  # the mapping follows, on lines of its own
                    _mapping(item, pad + "  ", lines, anchors)
            elif item:
                _mapping(item, pad + "  ", lines, anchors, first=pad + "- ")
            else:
                lines.append(pad + "- {}")
        elif kind is list:
            raise _Unsure  # nested sequences: PyYAML's own layout
        elif kind is str and (text := _STRINGS.get(item)) is not None:
            lines.append(f"{pad}- {text}")  # as in _mapping: a leaf written before
        else:
            lines.append(_leaf(item, f"{pad}- ", pad + "  "))


def _leaf(value: Any, lead: str, indent: str) -> str:
    """A scalar written after `lead` (`key: `, `- `); a string's further lines at `indent`."""
    if type(value) is str and "\n" in value:
        return _broken(value, lead, indent)
    return lead + _scalar(value)


_BROKEN = re.compile(r"[^ \n][\n -~]*(?<! )")
"""Printable ASCII with line breaks, no space first or last."""
_BREAKS = re.compile(r"(\n+)")


def _broken(value: str, lead: str, indent: str) -> str:
    """PyYAML's text of a string with line breaks (a shell script in a container's args):
    single-quoted, each run of n breaks written as n + 1 (a lone break would fold to a
    space), the text going on at `indent` (Emitter.write_single_quoted). Not taken: a space
    beside a break (PyYAML double-quotes those), characters other than printable ASCII, and
    lines past the width (PyYAML folds them at a space)."""
    if _BROKEN.fullmatch(value) is None or " \n" in value or "\n " in value:
        raise _Unsure
    pieces = _BREAKS.split(value.replace("'", "''"))
    text = lead + "'" + "".join(
        piece if n % 2 == 0 else "\n" * (len(piece) + 1) + indent
        for n, piece in enumerate(pieces)) + "'"
    if any(len(line) > WIDTH for line in text.split("\n")):
        raise _Unsure
    return text


_STRINGS: dict[str, str] = {}
"""Strings already written: keys and names recur in every snippet (bounded)."""


def _scalar(value: Any) -> str:
    kind = type(value)
    if kind is str:
        text = _STRINGS.get(value)
        if text is not None:
            return text
        if _PLAIN.fullmatch(value) is None or (" " in value and len(value) > _SHORT) \
                or value.startswith(("---", "...")):  # document markers: quoted
            raise _Unsure
        # Quoted where plain it would read as a number, a bool, null...
        quoted = value.endswith(":") or type(_resolved(value)) is not str
        text = f"'{value}'" if quoted else value
        if len(_STRINGS) < 50_000:
            _STRINGS[value] = text
        return text
    if kind is int:
        return str(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    raise _Unsure  # floats, dates, bytes: PyYAML's own representers


def _resolved(value: str) -> Any:
    try:
        return scalars.plain(value)
    except scalars.Unsupported:  # a timestamp or `=`: not a str read plain
        return None
    except ValueError:  # resolved as a number PyYAML cannot build ("0b_"): not a str either
        return None


_CONTAINER_FIXES: dict[tuple[Path, bytes | str], str] = {}


def container_fix(pod_path: Path, container_name: str, fields: dict[str, Any],
                  pod_fields: dict[str, Any] | None = None) -> str:
    """A snippet that sets pod-level fields and fields of one container."""
    # A fleet's containers share their snippets: keyed on what one is made of, not on the
    # nested node (building it and writing its key was two thirds of a memo hit's cost).
    key = (pod_path, _written((container_name, fields, pod_fields)))
    text = _CONTAINER_FIXES.get(key)
    if text is None:
        pod: dict[str, Any] = dict(pod_fields or {})
        pod["containers"] = [{"name": container_name, **fields}]
        text = nest(_named(pod_path), pod)
        if len(_CONTAINER_FIXES) < 10_000:
            _CONTAINER_FIXES[key] = text
    return text


_POD_FIXES: dict[tuple[Path, bytes | str], str] = {}


def pod_fix(pod_path: Path, fields: dict[str, Any]) -> str:
    key = (pod_path, _written(fields))  # as container_fix's: nest's key, the path as given
    text = _POD_FIXES.get(key)
    if text is None:
        text = nest(_named(pod_path), fields)
        if len(_POD_FIXES) < 10_000:
            _POD_FIXES[key] = text
    return text


@lru_cache(maxsize=1024)  # a few pod paths, asked for every snippet
def _named(path: Path) -> Path:
    # Embedded pod specs may sit in lists (e.g. workerGroupSpecs[0]); keep the keys only.
    return tuple(k for k in path if isinstance(k, str))
