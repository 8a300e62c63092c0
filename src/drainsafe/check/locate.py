"""Line numbers for findings, found by a cheap text pass over the document's lines.

The fast parser keeps no marks below the document, so the line of a field is looked up
only for the findings that need one: follow the path key by key, each one deeper than the
last. Flow style or JSON falls back to the nearest line found (at worst the document's start).

A key is looked up as text (`key:`, then checked to start its line's content) from the
parent's line on, and the lines before it are searched once for one that leaves the
parent's block: C speed instead of a Python loop per line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, Protocol

from drainsafe.check.findings import Path
from drainsafe.check.load import Document

_ITEM = re.compile(r"^(\s*)-(\s|$)")


_BODY = re.compile(r" *(?:- +)*")
"""What may stand before a key on its line: the indent and any `- ` item marks."""


@lru_cache(maxsize=256)
def _exit_pattern(parent: int) -> re.Pattern[str]:
    """A line that leaves a block indented `parent`: content (not a comment) indented no
    more, found from the line break before it."""
    return re.compile(rf"\n {{0,{parent}}}[^ \n#]")


@lru_cache(maxsize=256)
def _deeper(parent: int) -> str:
    """A line break and the indent of a line deeper than `parent`."""
    return "\n" + " " * (parent + 1)


_Place = tuple[int, int, int]
"""Where a key was found: (0-based line, its indent, the line's offset in the text); a
negative line -n when it was not found, n being the nearest line found (1-based)."""


class _Located:
    """One document's text and the keys already found in it, as a tree of path keys:
    findings of one object share path prefixes (spec.template.spec.containers.0...)."""

    __slots__ = ("below", "quoted", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.below: dict[str | int, tuple[_Place, dict[str | int, Any]]] = {}
        # A quoted key needs `":` or `':` somewhere: asked once here, not at every key.
        # (A quote looked for first: one character is found with memchr, many times quicker
        # than a search for two, and most documents' keys are never quoted.)
        self.quoted = ('"' in text and '":' in text) or ("'" in text and "':" in text)


class _Placed(Protocol):
    """What place() fills in: a finding, or locate()'s one question."""

    doc: Document | None
    path: Path
    line: int


class _Question:
    __slots__ = ("doc", "line", "path")

    def __init__(self, doc: Document, path: Path) -> None:
        self.doc: Document | None = doc
        self.path, self.line = path, 0


def locate(doc: Document, path: Path) -> int:
    """The line of the field at `path` (relative to the document's object)."""
    question = _Question(doc, path)
    place([question])
    return question.line


def place(findings: Iterable[_Placed]) -> None:
    """Each one's line, found in its `doc`, which is then cleared (None: already placed).
    One loop for all of them, the walk and the searches inline: findings of one document
    come together (engine.place_lines), and its text and key tree are looked up once for
    them; a call of locate() per finding cost ~20 M instructions more on the findings-heavy
    corpus (24,000 findings)."""
    doc: Document | None = None
    text, quoted, start = "", False, 0
    root: dict[str | int, tuple[_Place, dict[str | int, Any]]] = {}
    prefix: Path = ()
    for f in findings:
        its = f.doc
        if its is None:
            continue
        f.doc = None
        if its is not doc:
            doc = its
            source = doc.source
            start = doc.start_line - 1
            located = source.located.get(start)
            if located is None:  # every line, the first too, follows a line break
                located = source.located[start] = _Located("\n" + _lines(doc))
            text, quoted, root, prefix = located.text, located.quoted, located.below, doc.prefix
        full = (*prefix, *f.path) if prefix else f.path
        # Follow the keys found before as far as they go.
        pos, parent_indent, offset = start, -1, 1
        below = root
        depth = 0
        for key in full:
            seen = below.get(key)
            if seen is None:
                break
            (pos, parent_indent, offset), below = seen
            if pos < 0:
                break
            depth += 1
        if pos < 0:  # known to be missing from here: the nearest line found
            f.line = -pos
            continue
        for d in range(depth, len(full)):
            key = full[d]
            if isinstance(key, int):
                found = _nth_item(text, pos, parent_indent, key, offset)
            else:
                found = _key(text, pos, offset, parent_indent, key, quoted)
            if found is None:
                # Not found below here: remember the nearest line (negated) for this path.
                line = pos + 1 if d else doc.start_line
                below[key] = ((-line, 0, 0), {})
                f.line = line
                break
            pos, parent_indent, offset = found
            deeper: dict[str | int, Any] = {}
            below[key] = (found, deeper)
            below = deeper
        else:
            f.line = pos + 1 if full else doc.start_line


# Field names are few (those of CRDs' pod templates come from input). One argument each:
# lru_cache then keys on the string itself, where (key, quoted) built and hashed a tuple
# per search.
@lru_cache(maxsize=4096)
def _plain_forms(key: str) -> tuple[str, ...]:
    """`key:` as written plain; none for a key no line holds."""
    return () if "\n" in key else (f"{key}:",)


@lru_cache(maxsize=4096)
def _quoted_forms(key: str) -> tuple[str, ...]:
    """`key:` as written plain, double- and single-quoted (the text has quoted keys)."""
    return () if "\n" in key else (f"{key}:", f'"{key}":', f"'{key}':")


def _key(text: str, pos: int, offset: int, parent: int, key: str, quoted: bool
         ) -> tuple[int, int, int] | None:
    """The first line from `pos` (at `offset` in text) holding `key` deeper than `parent`,
    before a later line leaves the parent's block: (line, key indent, line offset).
    A quoted form is looked for (when the text has any) only before the plain one's line."""
    forms = _quoted_forms(key) if quoted else _plain_forms(key)
    at, key_indent = -1, 0  # the line offset and key indent of the first line holding it
    limit = size = len(text)
    for form in forms:
        found = text.find(form, offset, limit)
        width = len(form)
        while found != -1:
            end = found + width  # `key:` ends a key when a blank or the line's end follows
            if end == size or text[end] in " \t\n":
                line = text.rfind("\n", 0, found) + 1
                # Only the parent's own line can hold the key no deeper than the parent (on
                # a later line such a match is itself a line that leaves the block: below).
                # Mostly indentation alone: one count in C, before the regex's set-up.
                if found - line > parent and (
                        text.count(" ", line, found) == found - line
                        or _BODY.fullmatch(text, line, found) is not None):
                    at, key_indent, limit = line, found - line, line
                    break
            found = text.find(form, found + 1, limit)
    if at == -1:
        return None
    breaks = text.count("\n", offset, at)  # from the parent's line to the key's
    # Does a line after the parent's, up to the key's own (`- key:` can sit no deeper than
    # the parent, e.g. the next item of a list), leave the block? Not when each of them
    # starts deeper than the parent (one more count in C, the usual case); else the regex
    # tells (blank lines and comments may sit anywhere).
    if parent >= 0 and breaks and text.count(
            _deeper(parent), offset, at + parent + 1) != breaks:
        after = text.find("\n", offset)
        if _exit_pattern(parent).search(text, after, at + parent + 1) is not None:
            return None
    return pos + breaks, key_indent, at


def _lines(doc: Document) -> str:
    """The document's lines (start_line..end_line), joined: sliced from the text where the
    reader noted them (no split of the whole file into lines)."""
    if doc.span is not None:
        return doc.source.text[doc.span[0]:doc.span[1]]
    lines = doc.source.lines
    return "\n".join(lines[doc.start_line - 1:min(doc.end_line, len(lines))])


def _nth_item(text: str, pos: int, parent: int, n: int, offset: int
              ) -> tuple[int, int, int] | None:
    """Item `n` of the block sequence on the lines after line `pos` (at `offset` in text)."""
    seen, item_indent = -1, None
    i, at = pos, text.find("\n", offset) + 1
    while at:
        i += 1
        after = text.find("\n", at)
        line = text[at:] if after == -1 else text[at:after]
        body = line.lstrip(" ")
        if body[:2] == "- " or body == "-":  # an item, the usual line here: told without _ITEM
            indent = len(line) - len(body)
        else:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):  # blank lines and comments
                at = after + 1
                continue
            match = _ITEM.match(line)
            if match is None:
                if len(line) - len(body) <= parent:
                    return None  # content no deeper than the parent: the block has ended
                at = after + 1
                continue
            indent = len(match.group(1))
        if item_indent is None:
            item_indent = indent
        if indent < item_indent:
            return None
        if indent == item_indent:
            seen += 1
            if seen == n:
                return i, indent, at
        at = after + 1
    return None
