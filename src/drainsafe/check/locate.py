"""Line numbers for findings, found by a cheap text pass over the document's lines.

The fast parser keeps no marks below the document, so the line of a field is looked up
only for the findings that need one: follow the path key by key, each one deeper than the
last. Flow style or JSON falls back to the nearest line found (at worst the document's start).
"""

from __future__ import annotations

import re

from drainsafe.check.findings import Path
from drainsafe.check.load import Document

_ITEM = re.compile(r"^(\s*)-(\s|$)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def locate(doc: Document, path: Path) -> int:
    lines = doc.source.lines
    start = doc.start_line - 1
    end = min(doc.end_line, len(lines))
    pos, parent_indent = start, -1
    best = doc.start_line
    for key in (*doc.prefix, *path):
        if isinstance(key, int):
            found = _nth_item(lines, pos, end, parent_indent, key)
        else:
            found = _key(lines, pos, end, parent_indent, key)
        if found is None:
            return best
        pos, parent_indent = found
        best = pos + 1
    return best


def _key(lines: list[str], pos: int, end: int, parent: int, key: str) -> tuple[int, int] | None:
    pattern = re.compile(r"^\s*(?:-\s+)*[\"']?" + re.escape(key) + r"[\"']?\s*:(\s|$)")
    for i in range(pos, end):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if i > pos and _indent(line) <= parent:
            return None  # left the parent's block
        if pattern.match(line):
            # The key's own indent is where its text starts (after any "- " markers).
            key_indent = len(line) - len(line.lstrip(" -"))
            if key_indent > parent:
                return i, key_indent
    return None


def _nth_item(lines: list[str], pos: int, end: int, parent: int, n: int
              ) -> tuple[int, int] | None:
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
                return i, indent
    return None
