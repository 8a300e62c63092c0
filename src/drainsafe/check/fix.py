"""--diff and --fix: apply the safe fixes with ruamel.yaml's round-trip mode.

Round-tripping keeps comments, key order and quoting; only the edited values change. Only
plain YAML files are edited (not stdin, not JSON), and only findings that carry edits:
fixes a person should judge (replica counts, PDB shapes, hooks) stay suggestions.
"""

from __future__ import annotations

import difflib
import io
import itertools
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from drainsafe.check.findings import Edit, Finding


@dataclass(frozen=True)
class FileFix:
    file: str
    before: str
    after: str

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
            fromfile=f"a/{self.file}", tofile=f"b/{self.file}"))


class FixError(Exception):
    pass


def plan(findings: Iterable[Finding]) -> dict[str, dict[int, list[Edit]]]:
    edits: dict[str, dict[int, list[Edit]]] = defaultdict(lambda: defaultdict(list))
    for f in findings:
        if not f.edits or f.file.startswith("<") or f.file.endswith(".json"):
            continue
        edits[f.file][f.doc_index].extend(f.edits)
    return edits


def fix_files(findings: Iterable[Finding]) -> tuple[list[FileFix], list[str]]:
    """The files that change, with their text before and after, and per-file problems."""
    fixes, problems = [], []
    for file, by_doc in sorted(plan(findings).items()):
        try:
            # newline="": the file's own line endings, so that a CRLF file stays CRLF
            # (ruamel.yaml writes LF; the edit is made on LF text and converted back).
            with open(file, encoding="utf-8", newline="") as handle:
                before = handle.read()
            crlf = "\r\n" in before
            after = apply(before.replace("\r\n", "\n") if crlf else before, by_doc)
            if crlf:
                after = after.replace("\n", "\r\n")
        except (OSError, UnicodeDecodeError, FixError) as exc:
            problems.append(f"{file}: not fixed: {exc}")
            continue
        if after != before:
            fixes.append(FileFix(file, before, after))
    return fixes, problems


def _yaml(text: str) -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    mapping, sequence, offset = _indentation(text)
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    yaml.explicit_start = text.lstrip().startswith("---")
    return yaml


def _indentation(text: str) -> tuple[int, int, int]:
    """Guess the file's indentation so that untouched lines stay as they are."""
    lines = text.splitlines()
    mapping = 2
    for prev, line in itertools.pairwise(lines):
        if (prev.rstrip().endswith(":") and line.strip()
                and not line.lstrip().startswith(("-", "#"))):
            step = len(line) - len(line.lstrip()) - (len(prev) - len(prev.lstrip()))
            if step > 0:
                mapping = step
                break
    for prev, line in itertools.pairwise(lines):
        match = re.match(r"^(\s*)- ", line)
        if prev.rstrip().endswith(":") and match and not prev.lstrip().startswith("-"):
            offset = len(match.group(1)) - (len(prev) - len(prev.lstrip()))
            return mapping, offset + 2, offset
    return mapping, mapping, 0


def apply(text: str, by_doc: dict[int, list[Edit]]) -> str:
    from ruamel.yaml.error import YAMLError

    yaml = _yaml(text)
    try:
        docs = list(yaml.load_all(text))
    except YAMLError as exc:
        raise FixError(f"cannot round-trip: {exc}") from None
    for index, edits in by_doc.items():
        if index >= len(docs):
            raise FixError(f"document {index + 1} not found")
        for edit in edits:
            _set(docs[index], edit)
    out = io.StringIO()
    yaml.dump_all(docs, out)
    result = out.getvalue()
    if not text.endswith("\n"):
        result = result.rstrip("\n")
    return result


def _set(doc: Any, edit: Edit) -> None:
    node = doc
    for key in edit.path[:-1]:
        if isinstance(key, int):
            if not isinstance(node, list) or key >= len(node):
                raise FixError(f"path {_dotted(edit.path)} not found")
            node = node[key]
        else:
            if not isinstance(node, dict):
                raise FixError(f"path {_dotted(edit.path)} not found")
            if key not in node or node[key] is None:
                node[key] = {}
            node = node[key]
    last = edit.path[-1]
    if not isinstance(node, dict) or isinstance(last, int):
        raise FixError(f"path {_dotted(edit.path)} not found")
    node[last] = edit.value


def _dotted(path: tuple[str | int, ...]) -> str:
    return ".".join(str(k) for k in path)
