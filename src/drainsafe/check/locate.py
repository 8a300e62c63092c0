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
    memo = doc.source.located
    full = (*doc.prefix, *path)
    # Findings of one object share path prefixes (spec.template.spec.containers.0...).
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
            found = _nth_item(lines, pos, end, parent_indent, key)
        else:
            found = _key(lines, pos, end, parent_indent, key)
        if found is None:
            # Not found below here: remember the nearest line (negated) for this path.
            memo[(start, full[:d + 1])] = (-(pos + 1) if d else -doc.start_line, 0)
            return pos + 1 if d else doc.start_line
        pos, parent_indent = found
        memo[(start, full[:d + 1])] = found
    return pos + 1 if full else doc.start_line


def _key(lines: list[str], pos: int, end: int, parent: int, key: str) -> tuple[int, int] | None:
    quoted = (f'"{key}"', f"'{key}'")
    for i in range(pos, end):
        line = lines[i]
        content = line.lstrip(" ")
        if not content or content[0] == "#":
            continue
        if i > pos and len(line) - len(content) <= parent:
            return None  # left the parent's block
        body = content
        while body[:2] == "- ":
            body = body[2:].lstrip(" ")
        for form in (key, *quoted):
            if body.startswith(form) and body[len(form):len(form) + 1] == ":":
                rest = body[len(form) + 1:len(form) + 2]
                if rest in ("", " ", "\t"):
                    # The key's own indent is where its text starts (after any "- ").
                    key_indent = len(line) - len(body)
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
