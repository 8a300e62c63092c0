"""Run the rules over loaded input: index, check, drop ignored findings, place lines."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from drainsafe.check.context import IGNORE_ANNOTATION, Context
from drainsafe.check.findings import Finding, ObjectRef, Severity
from drainsafe.check.load import Document, InputError, Loaded, load
from drainsafe.check.locate import place
from drainsafe.check.model import Index, Subject, WholeInput, build_index
from drainsafe.check.rules import Rule, all_rules
from drainsafe.check.validate import field_errors

if TYPE_CHECKING:
    from drainsafe.check.parallel import WorkerFailure


LineRenderer = Callable[[Iterable[Finding]], Iterator[str]]
"""Findings to output lines, one per finding, in the order given (report.json_lines, a
report.sarif_lines closure): what each finding writes depends on it alone."""


PIECE_CHARS = 32 * 1024
"""Characters (about) joined per write: output is written in pieces as it is made, never
held whole (at 10,000 findings-heavy objects the whole json text and its list of lines were
a quarter of the command's peak memory, sarif's more), and a write per line would cost a call
each. A piece, and its encoding, stay below glibc's mmap threshold (128 KiB): pieces of 256
sarif lines (~270 KB) were each mapped and faulted in anew, twice, 10,300 page faults and
~50 ms of system time for the findings-heavy corpus's 25 MB."""


def pieces(lines: Iterable[str], separator: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """`lines` joined by `separator`, about `size` characters at a time: the pieces written
    one after another are the lines joined by it (each but the first starts with it)."""
    batch: list[str] = []
    start = 0  # the lines in batch from here on (before: the separator's empty start)
    chars = 0
    for line in lines:
        batch.append(line)
        chars += len(line)
        if chars >= size:
            yield separator.join(batch)
            batch, start, chars = [""], 1, 0  # the next piece starts with the separator
    if len(batch) > start:
        yield separator.join(batch)


Block = list[str] | memoryview
"""Lines to join, or text of lines joined already, UTF-8 (a forked worker's: its bytes are
written as they are, never made str objects in the parent)."""


@dataclass
class Rendered:
    """The findings already written as output lines, in the serial run's order: check.parallel
    has each worker write the lines of the findings it made, so that the parent only joins
    them (turning them back into objects, sorting and writing them was the parent's serial
    part, ~0.07 s of 24,000 findings)."""

    blocks: list[Block]
    """The output's lines, in blocks joined by `separator` as their lines are."""
    by: LineRenderer
    """The renderer that wrote them (the output asks for its own)."""
    separator: str
    """What joins the lines."""
    severities: dict[Severity, int]
    """How many findings of each severity (the exit code's threshold)."""


@dataclass
class Result:
    findings: list[Finding] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    index: Index = field(default_factory=Index)
    documents: int = 0
    inputs: int = 0
    notes: list[str] = field(default_factory=list)
    """What was skipped and why (not errors: a FIFO in a walked directory)."""
    objects_checked: int | None = None
    """Set when the input was checked in parts (no one index holds it); else index's."""
    kinds: Callable[[], set[str]] = field(default=set, repr=False)
    """The kinds of the documents read (asked only when none was of a checked kind)."""
    worker_failure: WorkerFailure | None = None
    """Why the input was checked in this process after workers were started for it
    (check.parallel.run): a bug, said on stderr."""
    rendered: Rendered | None = None
    """The findings as output lines instead of `findings` (check.parallel.run, when asked to
    render them)."""
    held: object = field(default=None, repr=False)
    """Objects the run made that the result does not show, kept as long as it is (as the
    serial run's index keeps its objects): check.parallel's own share, whose freeing one by
    one the command skips when it ends its process."""

    @property
    def checked(self) -> int:
        return self.index.checked if self.objects_checked is None else self.objects_checked

    def failed(self, context: Context) -> bool:
        threshold = context.fail_on
        if threshold is None:
            return False
        if self.rendered is not None:
            return any(n for s, n in self.rendered.severities.items() if s >= threshold)
        return any(f.severity >= threshold for f in self.findings)

    def texts(self, renderer: LineRenderer, separator: str,
              size: int = PIECE_CHARS) -> Iterator[str | memoryview]:
        """The findings as `renderer` writes them, joined by `separator`, in pieces to write
        one after another (see pieces): str, or text a worker wrote, UTF-8."""
        if self.rendered is None:
            yield from pieces(renderer(self.findings), separator, size)
            return
        if self.rendered.by != renderer or self.rendered.separator != separator:
            raise ValueError("findings rendered for another output")
        for n, block in enumerate(self.rendered.blocks):
            if n:
                yield separator
            if isinstance(block, memoryview):
                yield block
            else:
                yield from pieces(block, separator, size)

    def exit_code(self, context: Context) -> int:
        if self.errors:
            return 2
        return 1 if self.failed(context) else 0


def _may_ignore(docs: list[Document]) -> bool:
    """Whether any object can carry the ignore annotation: its key is in the text as is, or
    spelled with escapes (a backslash). Most inputs have neither, and their findings then
    need no lookup of the object they are about."""
    seen = None
    for doc in docs:  # a source's documents are read together: each text is looked at once
        if doc.source is not seen:
            seen = doc.source
            if IGNORE_ANNOTATION in seen.text or "\\" in seen.text:
                return True
    return False


def check_documents(docs: list[Document], context: Context, *, index: Index | None = None,
                    whole: WholeInput | None = None) -> tuple[list[Finding], Index]:
    """The findings about `docs`, sorted. `index`: theirs, when already built; `whole`:
    the whole input's facts, when `docs` are part of it (check.parallel)."""
    if index is None:
        index = build_index(docs)
    if whole is not None:
        index.whole = whole
    return placed(found(docs, index, context, all_rules().values())), index


def found(docs: list[Document], index: Index, context: Context,
          rules: Iterable[Rule]) -> list[Finding]:
    """What `rules` find in `index` (of `docs`), less what their objects' annotations
    ignore; neither sorted nor placed on lines (see placed)."""
    subjects: dict[tuple[str, int, ObjectRef], Subject] = {}
    may_ignore = _may_ignore(docs)
    for subject in index.iter_subjects() if may_ignore else ():
        doc = subject.doc
        subjects[(doc.file, doc.doc_index, subject.ref)] = subject
    findings: list[Finding] = []
    for rule in rules:
        if rule.id in context.disabled:
            continue
        if not may_ignore:
            findings.extend(rule.run(index, context))
            continue
        for finding in rule.run(index, context):
            about = subjects.get((finding.file, finding.doc_index, finding.object))
            if about is None:
                findings.append(finding)
                continue
            skip = about.ignored  # read only for objects with findings
            if rule.id in skip or "all" in skip:
                continue
            findings.append(finding)
    return findings


def placed(findings: list[Finding]) -> list[Finding]:
    """The findings on their lines, in the output's order."""
    return in_order(place_lines(findings))


def in_order(findings: list[Finding]) -> list[Finding]:
    """The findings (on their lines) in the output's order: by file and line."""
    # The keys made in one loop, not by a key function, so that an object's text is made
    # once for its findings that come together (place_lines' order: by document), not once
    # per finding (~2,000 instructions each); then sorted by position, stably.
    keys: list[tuple[str, int, str, int, str]] = []
    ref: ObjectRef | None = None
    text = ""
    for f in findings:
        if f.object is not ref:
            ref = f.object
            text = str(ref)
        keys.append((f.file, f.line, text, -f.severity, f.rule))
    order = sorted(range(len(keys)), key=keys.__getitem__)
    findings[:] = [findings[i] for i in order]
    return findings


def place_lines(findings: list[Finding]) -> list[Finding]:
    """Each finding's line, found once all rules have run, document by document: a
    document's text and the keys already found in it stay in the CPU's caches for all of its
    findings. Found as each finding was made, between the rules' own work, they were read
    cold: ~0.1 s of the rules' 0.8 s on 10,000 objects of the findings-heavy corpus.

    Returned by document (by id(): documents made one after another mostly sit at rising
    addresses), which is nearer the output's order than the rules' order: in_order then
    costs ~7 % less."""
    by_document = sorted(findings, key=_document_of)
    place(by_document)
    return by_document


def _document_of(f: Finding) -> int:
    return id(f.doc)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Reading builds millions of small acyclic containers; the cyclic collector's passes over
    them cost 10-30 % and grow with the input, and free nothing until the run ends.

    Re-enabled, the collector would at once walk everything the run allocated (all still
    young, ~80 ms for 10,000 objects), only to find it alive. Moving it to the oldest
    generation first (freeze + unfreeze: no walk) leaves it to the next full collection,
    which a one-shot CLI never reaches and a long-lived caller pays at most once. The
    command keeps it paused through its output as well (see command.main).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if enabled:
            gc.enable()


def check_loaded(loaded: Loaded, context: Context) -> Result:
    """The result for inputs read, checked in this process."""
    findings, index = check_documents(loaded.documents, context)
    # Bad field values are input errors, so that they can never pass as a clean result.
    result = Result(findings, [*loaded.errors, *field_errors(index)], index,
                    len(loaded.documents), loaded.inputs, list(loaded.notes))
    result.kinds = lambda: {str(d.obj.get("kind")) for d in loaded.documents}
    return result


def run(args: Iterable[str], context: Context, stdin: BinaryIO | None = None) -> Result:
    """Check the inputs in this process (check.parallel.run: in worker processes)."""
    args = list(args)
    with gc_paused():
        result = check_loaded(load(args, stdin), context)
    return finish(result, args)


def finish(result: Result, args: list[str]) -> Result:
    """The errors of the input as a whole: nothing read, or nothing of a checked kind."""
    if not result.documents and not result.errors:
        result.errors.append(InputError(
            ", ".join(sorted({*args})) or "input", None,
            "empty input: no Kubernetes objects found (a failed helm template?)"))
    elif result.documents and result.checked == 0 and not result.errors:
        kinds = sorted(result.kinds())
        result.errors.append(InputError(
            ", ".join(sorted({*args})), None,
            f"nothing to check: no object of a checked kind (found {', '.join(kinds)})"))
    return result
