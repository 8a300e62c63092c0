"""Which worker reads which document, when a fleet's namespaces are spread over every file
(check.parallel): a namespace's objects must all be checked in one process, since every
relation the rules follow stays inside one namespace (see check.parallel).

Pure functions of the files' texts, before anything is parsed:

- `segments`: a file's documents as text, between its `---` lines (as rsyaml.documents
  cuts them: a `---` line alone, or with a comment), each with the namespace its text
  names (`namespace:` in block or flow YAML; none: `default`), a guess;
- `assign`: the namespaces to the workers, the largest first to the least loaded worker;
- `view`: a file as one worker reads it: the other workers' documents each replaced by
  `~` (a null document: the same document count, so every document keeps its index) and
  their line breaks (so every line keeps its number);
- `clean_cuts` and `pieces`: where one file can be cut between two workers' shares of the
  files (check.parallel.shares) without a namespace on both sides, and the file as each of
  them reads it (blanked as `view` does).

A guess can be wrong (a namespace key of another object earlier in the document); the
workers check each object read against the assignment, and the run is checked in one
process when one is not where it was guessed (check.parallel).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from drainsafe.check.model import DEFAULT_NAMESPACE

_SEPARATOR = re.compile(r"---[ ]*(?:#[^\n]*)?(?:\n|$)")
"""A `---` line as rsyaml takes it (the marker alone, or with a comment)."""
_NODE = re.compile(r"^[ ]*[^ \n#]", re.M)
"""A line with content: a document has a node (blank lines and comments make none)."""
_NO_NODE = " \n#"
"""What a line with a node cannot start with."""
_NAMESPACE = re.compile(r"""namespace["']?[ \t]*:[ \t]*["']?([A-Za-z0-9.-]+)""")
"""A namespace key and its value, in block or flow YAML (a literal start: C speed)."""
_BEFORE_KEY = frozenset(" \n{,\"'")
"""What may stand before a key (not part of a longer name, as in `x-namespace:`)."""


class Segment(NamedTuple):
    """One document's text: `body` to `end` (the next `---` line, or the text's end).
    A named tuple: one per document, made at a third of a dataclass's cost."""

    body: int
    end: int
    namespace: str | None
    """The namespace its text names; None when it holds no node (no object to assign)."""


def _named(text: str, body: int, end: int) -> str:
    """The first namespace the document's text names; `default` if none."""
    found = _NAMESPACE.search(text, body, end)
    while found is not None:
        at = found.start()
        if at == body or text[at - 1] in _BEFORE_KEY:
            return found[1]
        found = _NAMESPACE.search(text, at + 1, end)
    return DEFAULT_NAMESPACE


def segments(text: str) -> list[Segment] | None:
    """The text's documents, in order; None when its documents may not be what its `---`
    lines tell (content after a marker, a `...` end marker, a directive): then the text
    cannot be split."""
    if text.startswith(("...", "%")) or "\n..." in text or "\n%" in text:
        return None
    starts = [0] if text.startswith("---") else []
    at = text.find("\n---")
    while at != -1:
        starts.append(at + 1)
        at = text.find("\n---", at + 1)
    if any(_SEPARATOR.match(text, at) is None for at in starts):
        return None
    found: list[Segment] = []
    implicit = not starts or starts[0] != 0  # a first document without a `---` line
    bounds = [0, *starts] if implicit else starts
    for n, start in enumerate(bounds):
        end = bounds[n + 1] if n + 1 < len(bounds) else len(text)
        body = start
        if n or not implicit:  # past the `---` line
            body = text.find("\n", start, end) + 1 or end
        # Most documents start with a node on their first line (the regex finds the others).
        if (body == end or text[body] in _NO_NODE) and _NODE.search(text, body, end) is None:
            found.append(Segment(body, end, None))
            continue
        found.append(Segment(body, end, _named(text, body, end)))
    return found


def assign(sizes: dict[str, int], workers: int) -> dict[str, int]:
    """Each namespace's worker (0..workers-1), about equal bytes each: the largest first,
    each to the least loaded (ties: the lower number; names break ties in size)."""
    loads = [0] * workers
    owner: dict[str, int] = {}
    for namespace, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        k = loads.index(min(loads))
        owner[namespace] = k
        loads[k] += size
    return owner


def view(text: str, found: list[Segment], mine: set[str]) -> str | None:
    """The text as the worker holding the namespaces `mine` reads it; None when none of its
    documents is that worker's."""
    if all(s.namespace is None or s.namespace in mine for s in found):
        return text
    if not any(s.namespace in mine for s in found):
        return None
    return _blanked(text, [s for s in found
                           if s.namespace is not None and s.namespace not in mine])


def clean_cuts(found: list[Segment], before: set[str], after: set[str]) -> list[int]:
    """Where the text can be cut (before which of its documents, 1 to len(found) - 1) so that
    no namespace its documents name is on both sides: `before` and `after` are the namespaces
    of the files before and after it (a namespace of both: nowhere)."""
    if before & after:
        return []
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for d, s in enumerate(found):
        if s.namespace is not None:
            first.setdefault(s.namespace, d)
            last[s.namespace] = d
    lo, hi = 1, len(found) - 1
    opened = [0] * (len(found) + 1)  # a cut before document d splits a namespace when
    for name, d in first.items():   # first < d <= last: counted from first + 1 to last
        if name in before:
            lo = max(lo, last[name] + 1)
        if name in after:
            hi = min(hi, d)
        opened[d + 1] += 1
        opened[last[name] + 1] -= 1
    cuts: list[int] = []
    splitting = 0
    for d in range(hi + 1):
        splitting += opened[d]
        if d >= lo and not splitting:
            cuts.append(d)
    return cuts


def pieces(text: str, found: list[Segment], cuts: list[int]) -> list[str]:
    """The text cut before each of its documents `cuts` (ascending): one text per piece,
    the other pieces' documents blanked."""
    bounds = [0, *cuts, len(found)]
    return [_blanked(text, [*found[:bounds[k]], *found[bounds[k + 1]:]])
            for k in range(len(bounds) - 1)]


def _blanked(text: str, gone: list[Segment]) -> str:
    """The text with each document of `gone` (in order) a null document on as many lines."""
    out: list[str] = []
    at = 0
    for s in gone:
        if s.namespace is None:  # no node: nothing to blank
            continue
        out.append(text[at:s.body])
        out.append("~" + "\n" * text.count("\n", s.body, s.end))
        at = s.end
    out.append(text[at:])
    return "".join(out)
