"""Line numbers for findings, found by a cheap text pass over the document's lines.

The fast parser keeps no marks below the document, so the line of a field is looked up
only for the findings that need one: follow the path key by key, each one deeper than the
last. Flow style or JSON falls back to the nearest line found (at worst the document's start).

A key is looked up with one regular expression over the document's lines, each after a "\\n"
(the first line below the parent that could hold it), bounded by the first line that
leaves the parent's block: C speed instead of a Python loop per line.
"""

from __future__ import annotations

import re

from drainsafe.check.findings import Path
from drainsafe.check.load import Document

_ITEM = re.compile(r"^(\s*)-(\s|$)")
_KEYS: dict[str, re.Pattern[str]] = {}
_EXITS: dict[int, re.Pattern[str]] = {}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _key_pattern(key: str) -> re.Pattern[str]:
    """A line holding `key:` (plain or quoted), after its indent and any `- ` item marks.
    It starts at the line break before the line: a literal start, which the regex engine
    skips to quickly."""
    pattern = _KEYS.get(key)
    if pattern is None:
        forms = "|".join(re.escape(f) for f in (key, f'"{key}"', f"'{key}'"))
        pattern = _KEYS[key] = re.compile(rf"\n( *)((?:- +)*)(?:{forms}):(?:[ \t]|$)", re.M)
    return pattern


def _exit_pattern(parent: int) -> re.Pattern[str]:
    """A line that leaves a block indented `parent`: content (not a comment) indented no
    more, found from the line break before it."""
    pattern = _EXITS.get(parent)
    if pattern is None:
        pattern = _EXITS[parent] = re.compile(rf"\n {{0,{parent}}}[^ \n#]")
    return pattern


def locate(doc: Document, path: Path) -> int:
    source = doc.source
    lines = source.lines
    start = doc.start_line - 1
    end = min(doc.end_line, len(lines))
    text = source.document_texts.get(start)
    if text is None:  # every line, the first too, follows a line break (see _key_pattern)
        text = source.document_texts[start] = "\n" + "\n".join(lines[start:end])
    memo = source.located
    full = (*doc.prefix, *path)
    # Findings of one object share path prefixes (spec.template.spec.containers.0...).
    depth, state = 0, (start, -1, 1)
    for d in range(len(full), 0, -1):
        hit = memo.get((start, full[:d]))
        if hit is not None:
            depth, state = d, hit
            break
    pos, parent_indent, offset = state
    if pos < 0:
        return -pos
    for d in range(depth, len(full)):
        key = full[d]
        if isinstance(key, int):
            found = _nth_item(lines, pos, end, parent_indent, key, offset)
        else:
            found = _key(text, pos, offset, parent_indent, key)
        if found is None:
            # Not found below here: remember the nearest line (negated) for this path.
            memo[(start, full[:d + 1])] = (-(pos + 1) if d else -doc.start_line, 0, 0)
            return pos + 1 if d else doc.start_line
        pos, parent_indent, offset = found
        memo[(start, full[:d + 1])] = found
    return pos + 1 if full else doc.start_line


def _key(text: str, pos: int, offset: int, parent: int, key: str
         ) -> tuple[int, int, int] | None:
    """The first line from `pos` (at `offset` in text) holding `key` deeper than `parent`,
    before a later line leaves the parent's block: (line, key indent, line offset)."""
    if "\n" in key:
        return None  # a line never holds one
    pattern = _key_pattern(key)
    match = pattern.search(text, offset - 1)
    # Only the parent's own line can hold the key no deeper than the parent (on a later
    # line such a match is itself a line that leaves the block: found below).
    while match is not None and match.end(2) - match.start(1) <= parent:
        match = pattern.search(text, match.end())
    if match is None:
        return None
    at = match.start() + 1
    if parent >= 0:
        # Lines after the parent's, up to the key's own (`- key:` can sit no deeper than
        # the parent, e.g. the next item of a list): does one leave the block?
        after = text.find("\n", offset)
        if -1 < after < at and _exit_pattern(parent).search(
                text, after, at + parent + 1) is not None:
            return None
    return pos + text.count("\n", offset, at), match.end(2) - match.start(1), at


def _nth_item(lines: list[str], pos: int, end: int, parent: int, n: int, offset: int
              ) -> tuple[int, int, int] | None:
    seen, item_indent = -1, None
    for i in range(pos + 1, end):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ITEM.match(line)
        if not match:
            if _indent(line) <= parent:
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
                return i, indent, offset + sum(len(lines[j]) + 1 for j in range(pos, i))
    return None
