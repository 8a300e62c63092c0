"""What a rule reports: a finding about one object, with its fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, NamedTuple

from drainsafe.budget import Budget

if TYPE_CHECKING:
    from drainsafe.check.load import Document

Path = tuple[str | int, ...]
"""Keys from a document's root to a field, e.g. ("spec", "template", "spec", "containers", 0)."""


class Severity(IntEnum):
    INFO = 1
    WARNING = 2
    ERROR = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown severity {text!r}: expected one of info, warning, error"
            ) from None


class _Seconds(dict[float, str]):
    """Durations as messages write them (`:g`), each distinct one formatted once: a fleet's
    findings repeat a few (30, 0, 5, 120), and a lookup costs ~40 % of formatting one."""

    def __missing__(self, seconds: float) -> str:
        text = f"{seconds:g}"
        # 0.0 and -0.0 are one key but written apart (-0 from an annotation "-0"): zero is
        # never kept. Bounded: the input decides how many distinct values there are.
        if seconds and len(self) < 4096:
            self[seconds] = text
        return text


SECONDS = _Seconds()
"""SECONDS[x] == f"{x:g}"."""


class ObjectRef(NamedTuple):
    """An object by kind, namespace and name. A named tuple: immutable and hashable like a
    frozen dataclass, made at half the cost (one per object read)."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(slots=True)
class Edit:
    """A safe change --fix can make: set the field at `path` (relative to the document) to value.
    Not changed once made; not frozen, as Finding (two rules make one per finding)."""

    path: Path
    value: Any


@dataclass(slots=True)
class Finding:
    """Not changed once made; not frozen, since a frozen dataclass sets each of its fields
    through object.__setattr__ (three times the cost, and a run makes thousands)."""

    rule: str
    severity: Severity
    object: ObjectRef
    file: str
    line: int
    message: str
    fix: str
    """A YAML snippet showing the change."""
    doc_index: int = 0
    """Which document of the file the object came from (for --fix)."""
    path: Path = ()
    """The field the finding is about, relative to the document (gives the line)."""
    budget: Budget | None = None
    """The grace-budget arithmetic behind the finding, when there is one."""
    edits: tuple[Edit, ...] = field(default=())
    """Present only when the fix is safe to apply automatically."""
    doc: Document | None = field(default=None, repr=False, compare=False)
    """The document whose `line` is still to be found (engine.place_lines finds it once all
    rules have run, then clears this); None once placed."""

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity.label,
            "object": {
                "kind": self.object.kind,
                "namespace": self.object.namespace,
                "name": self.object.name,
            },
            "file": self.file,
            "line": self.line,
            "message": self.message,
            "fix": self.fix,
        }
