"""The rule registry: a rule's id, severity, one-line summary, explanation and checks.

Its own module so that the rule modules import it without importing the package that
loads them (an import circle otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from drainsafe.budget import Budget
from drainsafe.check.findings import Edit, Finding, Path, Severity

if TYPE_CHECKING:
    from drainsafe.check.context import Context
    from drainsafe.check.model import Index, Subject

Check = Callable[["Index", "Context"], Iterable[Finding]]


@dataclass
class Rule:
    id: str
    severity: Severity
    summary: str
    explain: str
    """Why it matters, with the Kubernetes facts and their sources (for --explain)."""
    checks: list[Check] = field(default_factory=list)
    whole_input: bool = False
    """Asks facts of the whole input (Index.workload_count, has_standalone_workload): a
    worker that checks part of it runs this rule only once the parent has told them
    (check.parallel), the others while the other workers still read."""

    def check(self, fn: Check) -> Check:
        self.checks.append(fn)
        return fn

    def finding(self, subject: Subject, message: str, fix: str, *, path: Path = (),
                budget: Budget | None = None, edits: tuple[Edit, ...] = (),
                severity: Severity | None = None) -> Finding:
        doc = subject.doc
        if edits and doc.prefix:  # edits are not changed once made: new ones, with the prefix
            edits = tuple(Edit((*doc.prefix, *e.path), e.value) for e in edits)
        # Positional, in Finding's field order: a run makes one per finding (24,000 on the
        # findings-heavy corpus), and keywords are matched to parameters one by one.
        return Finding(self.id, severity or self.severity, subject.ref, doc.source.name,
                       0,  # the line: placed by engine.place_lines, document by document
                       message, fix, doc.doc_index, path, budget, edits, doc)

    def run(self, index: Index, context: Context) -> Iterable[Finding]:
        for fn in self.checks:
            yield from fn(index, context)


REGISTRY: dict[str, Rule] = {}


def rule(id: str, severity: Severity, summary: str, explain: str, *,
         whole_input: bool = False) -> Rule:
    if id in REGISTRY:
        raise ValueError(f"rule {id} registered twice")
    REGISTRY[id] = Rule(id, severity, summary, explain.strip(), whole_input=whole_input)
    return REGISTRY[id]
