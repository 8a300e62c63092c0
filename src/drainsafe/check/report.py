"""Output: human text grouped by object (rich), JSON, and SARIF 2.1.0."""

from __future__ import annotations

import codecs
import io
import json
from collections.abc import Iterable, Iterator
from functools import partial
from itertools import groupby
from json import encoder
from pathlib import Path
from typing import IO, Any

from drainsafe import __version__
from drainsafe.check.context import Context
from drainsafe.check.engine import PIECE_CHARS, LineRenderer, Result
from drainsafe.check.findings import Finding, ObjectRef, Severity
from drainsafe.check.rules import Rule

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def text(result: Result, context: Context, out: IO[str], *, color: bool | None = None) -> None:
    from rich.console import Console
    from rich.emoji import Emoji
    from rich.markup import escape
    from rich.table import Table

    from drainsafe.shell import PIPE_WIDTH

    # In a pipe or CI log the width is fixed, not COLUMNS (which cut the summary table).
    width = None if hasattr(out, "isatty") and out.isatty() else PIPE_WIDTH
    console = Console(file=out, force_terminal=color, no_color=color is False,
                      highlight=False, soft_wrap=True, width=width)
    # Without colour (a pipe, a CI log) rich prints the text as it stands: written directly,
    # a finding costs a write instead of a markup parse and a render (text output took 3-6x
    # the time of -o json). A line rich would change (control characters it strips, tabs it
    # expands, emoji codes it replaces) goes through rich as before.
    plain = console.color_system is None
    # Printable lines are gathered and written together, their emoji codes replaced in one
    # pass: rich's replacement cannot match across a line break (a code holds no white
    # space), so it gives what it gives line by line, without a call per line (those calls,
    # and the markup escaped for lines rich never saw, were two thirds of -o text).
    pending: list[str] = []

    def flush() -> None:
        if pending:
            out.write(Emoji.replace("".join(pending)))
            pending.clear()

    def written(text: str) -> bool:
        """Whether `text` was written as a plain line; if not, rich prints its markup."""
        if plain and text.isprintable():
            pending.append(text + "\n")
            if len(pending) > 4096:
                flush()
            return True
        flush()
        return False

    fixes: dict[str, tuple[str, bool]] = {}  # a fix text as shown, and whether it is printable
    key = lambda f: (f.file, str(f.object))  # noqa: E731
    for (_file, _obj), group in groupby(sorted(result.findings, key=key), key=key):
        items = sorted(group, key=lambda f: (-f.severity, f.line, f.rule))
        first = items[0]
        where = f"{first.file}:{min(f.line for f in items)}"
        if not written(f"{first.object}  {where}"):
            console.print(f"[bold]{escape(str(first.object))}[/]  [dim]{escape(where)}[/]")
        shown_budget = False
        for f in items:
            if not written(f"  {f.severity.label:<7} {f.rule} line {f.line}  {f.message}"):
                console.print(f"  [{_STYLE[f.severity]}]{f.severity.label:<7}[/] "
                              f"[bold]{f.rule}[/] [dim]line {f.line}[/]  {escape(f.message)}")
            if f.budget is not None and not shown_budget:
                arithmetic = f.budget.arithmetic()
                budget = "          budget: drain delay + shutdown deadline + buffer <= grace: "
                if not written(budget + arithmetic):
                    console.print(f"{budget}[bold]{escape(arithmetic)}[/]")
                shown_budget = True
            shown = fixes.get(f.fix)
            if shown is None:
                fix = "\n".join("            " + text for text in f.fix.splitlines())
                shown = fixes[f.fix] = (fix, all(text.isprintable() for text in fix.split("\n")))
            label = f"          fix{' (auto, --fix)' if f.edits else ''}:"
            if not written(label):
                console.print(label, style="dim")
            fix, printable = shown
            if plain and printable:
                pending.append(fix + "\n")
            else:
                flush()
                console.print(escape(fix), style="green")
        if not written(""):
            console.print("")
    flush()
    counts = {s: sum(1 for f in result.findings if f.severity == s) for s in Severity}
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("inputs", justify="right")
    table.add_column("objects checked", justify="right")
    for s in sorted(Severity, reverse=True):
        table.add_column(s.label + "s", justify="right", style=_STYLE[s])
    table.add_column("input errors", justify="right")
    table.add_row(str(result.inputs), str(result.checked),
                  *(str(counts[s]) for s in sorted(Severity, reverse=True)),
                  str(len(result.errors)))
    console.print(table)
    if not result.findings and not result.errors:
        console.print("[green]no drain-safety findings[/]")


def to_json(result: Result) -> dict[str, Any]:
    return {"findings": [f.to_json() for f in result.findings]}


JSON_SEPARATOR = ",\n  "
"""What joins -o json's findings (one per line)."""
SARIF_SEPARATOR = ",\n        "
"""What joins -o sarif's results: one per line, at the indentation of the run's "results"
(write_sarif)."""


def write_json(result: Result, out: IO[str], *, piece: int = PIECE_CHARS) -> None:
    # One finding per line: it reads and diffs well, and json's C encoder only runs without
    # indent (indent=2 took a quarter of the CLI's time on 10,000 objects).
    texts = result.texts(json_lines, JSON_SEPARATOR, piece)
    first = next(texts, None)
    if first is None:
        out.write('{"findings": []}\n')
        return
    out.write('{"findings": [\n  ')
    _write(out, first)
    for more in texts:
        _write(out, more)
    out.write("\n]}\n")


def _write(out: IO[str], text: str | memoryview) -> None:
    """Text, or text a worker wrote (UTF-8): as bytes when `out` encodes so (no str made),
    else decoded."""
    if isinstance(text, str):
        out.write(text)
        return
    if isinstance(out, io.TextIOWrapper) and codecs.lookup(out.encoding).name == "utf-8":
        out.flush()
        out.buffer.write(text)
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    for at in range(0, len(text), PIECE_CHARS):
        out.write(decoder.decode(text[at:at + PIECE_CHARS]))
    out.write(decoder.decode(b"", final=True))


_TEXTS_KEPT = 8192
"""Encoded messages and fixes json_lines keeps (a few MiB at most)."""


def json_lines(findings: Iterable[Finding]) -> Iterator[str]:
    """Each finding as json.dumps (its defaults) writes Finding.to_json(), written directly:
    the object and file parts, the same for all of an object's findings, are encoded once,
    and no dict is built per finding (dict and encoder walk were most of -o json's cost).
    tests/check/test_report.py compares the two."""
    quote = getattr(encoder, "c_encode_basestring_ascii", None) or encoder.encode_basestring_ascii
    heads: dict[tuple[str, Severity], str] = {}
    objects: dict[tuple[ObjectRef, str], str] = {}
    # A fleet's findings repeat their messages and fixes (24,000 findings of the
    # findings-heavy corpus hold 700 distinct messages and 2,700 fixes): a string is hashed
    # and looked up at half the cost of encoding it again. Emptied when full, so that
    # output of distinct texts is still never held whole.
    texts: dict[str, str] = {}
    for f in findings:
        if len(texts) >= _TEXTS_KEPT:
            texts.clear()
        head = heads.get((f.rule, f.severity))
        if head is None:
            head = heads[(f.rule, f.severity)] = (
                f'{{"rule": {quote(f.rule)}, "severity": {quote(f.severity.label)}, ')
        where = objects.get((f.object, f.file))
        if where is None:
            kind, namespace, name = f.object
            where = objects[(f.object, f.file)] = (
                f'"object": {{"kind": {quote(kind)}, "namespace": {quote(namespace)}, '
                f'"name": {quote(name)}}}, "file": {quote(f.file)}, "line": ')
        message = texts.get(f.message)
        if message is None:
            message = texts[f.message] = quote(f.message)
        fix = texts.get(f.fix)
        if fix is None:
            fix = texts[f.fix] = quote(f.fix)
        yield f'{head}{where}{int.__repr__(f.line)}, "message": {message}, "fix": {fix}}}'


def _uri(file: str) -> str:
    if file.startswith("<"):
        return "stdin"
    path = Path(file)
    return path.as_posix() if not path.is_absolute() else path.as_uri()


def to_sarif(result: Result, rules: dict[str, Rule], *, with_results: bool = True
             ) -> dict[str, Any]:
    ids = list(rules)
    descriptors = [
        {
            "id": r.id,
            "name": "".join(part.capitalize() for part in r.id.split("-")),
            "shortDescription": {"text": r.summary},
            "fullDescription": {"text": r.explain},
            "help": {"text": r.explain},
            "defaultConfiguration": {"level": SARIF_LEVEL[r.severity]},
        }
        for r in rules.values()
    ]
    index = {rule_id: n for n, rule_id in enumerate(ids)}
    uris: dict[str, str] = {}  # one per file, not one pathlib parse per finding
    results = [_sarif_result(f, index, uris) for f in result.findings] if with_results else []
    notifications = [
        {
            "level": "error",
            "message": {"text": e.message},
            "locations": [_location(e.file, e.line or 1)],
        }
        for e in result.errors
    ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "drainsafe",
                "version": __version__,
                "rules": descriptors,
            }},
            "invocations": [{
                "executionSuccessful": not result.errors,
                "toolExecutionNotifications": notifications,
            }],
            "results": results,
        }],
    }


def _location(file: str, line: int, uri: str | None = None) -> dict[str, Any]:
    return {"physicalLocation": {
        "artifactLocation": {"uri": _uri(file) if uri is None else uri},
        "region": {"startLine": max(line, 1)},
    }}


def _sarif_result(f: Finding, index: dict[str, int], uris: dict[str, str]) -> dict[str, Any]:
    uri = uris.get(f.file)
    if uri is None:
        uri = uris[f.file] = _uri(f.file)
    location = _location(f.file, f.line, uri)
    location["logicalLocations"] = [{
        "name": f.object.name,
        "fullyQualifiedName": f"{f.object.namespace}/{f.object.kind}/{f.object.name}",
        "kind": "object",
    }]
    item: dict[str, Any] = {
        "ruleId": f.rule,
        "level": SARIF_LEVEL[f.severity],
        "message": {"text": f"{f.object}: {f.message}\nFix:\n{f.fix}"},
        "locations": [location],
        "properties": {"fix": f.fix, "object": {"kind": f.object.kind,
                                                "namespace": f.object.namespace,
                                                "name": f.object.name}},
    }
    n = index.get(f.rule)
    if n is not None:
        item["ruleIndex"] = n
    return item


def sarif_lines(findings: Iterable[Finding], index: dict[str, int]) -> Iterator[str]:
    """Each finding's SARIF result as json.dumps (its defaults) writes _sarif_result(),
    written directly, as json_lines does: the parts an object's findings share (location,
    logical location, object) are encoded once per object and file. JSON escapes each
    character alone, so a string's encoding is the encodings of its pieces joined."""
    quote = getattr(encoder, "c_encode_basestring_ascii", None) or encoder.encode_basestring_ascii
    rules: dict[tuple[str, Severity], tuple[str, str]] = {}
    objects: dict[tuple[ObjectRef, str], tuple[str, str, str, str]] = {}
    uris: dict[str, str] = {}  # a file's URI, encoded (pathlib parses it: once per file)
    texts: dict[str, str] = {}
    for f in findings:
        rule = rules.get((f.rule, f.severity))
        if rule is None:
            n = index.get(f.rule)
            rule = rules[(f.rule, f.severity)] = (
                f'{{"ruleId": {quote(f.rule)}, "level": {quote(SARIF_LEVEL[f.severity])}, '
                '"message": {"text": ',
                "}" if n is None else f', "ruleIndex": {n}}}')
        parts = objects.get((f.object, f.file))
        if parts is None:
            kind, namespace, name = f.object
            uri = uris.get(f.file)
            if uri is None:
                uri = uris[f.file] = quote(_uri(f.file))
            parts = objects[(f.object, f.file)] = (
                quote(f"{f.object}: ")[:-1],
                '}, "locations": [{"physicalLocation": {"artifactLocation": {"uri": '
                f'{uri}}}, "region": {{"startLine": ',
                f'}}}}, "logicalLocations": [{{"name": {quote(name)}, "fullyQualifiedName": '
                f'{quote(f"{namespace}/{kind}/{name}")}, "kind": "object"}}]}}], '
                '"properties": {"fix": ',
                f', "object": {{"kind": {quote(kind)}, "namespace": {quote(namespace)}, '
                f'"name": {quote(name)}}}}}')
        if len(texts) >= _TEXTS_KEPT:  # as json_lines: repeated texts encoded once
            texts.clear()
        fix = texts.get(f.fix)
        if fix is None:
            fix = texts[f.fix] = quote(f.fix)
        message = texts.get(f.message)
        if message is None:
            message = texts[f.message] = quote(f.message)
        yield (f'{rule[0]}{parts[0]}{message[1:-1]}\\nFix:\\n{fix[1:]}{parts[1]}'
               f'{int.__repr__(max(f.line, 1))}{parts[2]}{fix}{parts[3]}{rule[1]}')


def sarif_renderer(rules: dict[str, Rule]) -> LineRenderer:
    """sarif_lines for these rules (their order gives each result's ruleIndex)."""
    return partial(sarif_lines, index={rule_id: n for n, rule_id in enumerate(rules)})


def write_sarif(result: Result, rules: dict[str, Rule], out: IO[str], *,
                piece: int = PIECE_CHARS, renderer: LineRenderer | None = None) -> None:
    """`renderer`: the sarif_renderer the findings were rendered with, if they were."""
    # The run's envelope indented, its results one per line, as -o json writes findings:
    # json's C encoder runs only without indent (indent=2 over every result took over half
    # of the command's time on a findings-heavy input). The same JSON document.
    sarif = to_sarif(result, rules, with_results=False)
    text = json.dumps(sarif, indent=2)
    at = text.rfind('"results": []')  # the run's last key; inside strings quotes are \"
    indent = " " * (at - text.rfind("\n", 0, at) - 1)
    separator = f",\n{indent}  "  # SARIF_SEPARATOR
    texts = result.texts(renderer or sarif_renderer(rules), separator, piece)
    first = next(texts, None)
    if first is None:
        out.write(text)
        out.write("\n")
        return
    out.write(f'{text[:at]}"results": [\n{indent}  ')
    _write(out, first)
    for more in texts:
        _write(out, more)
    out.write(f"\n{indent}]{text[at + 13:]}\n")


def explain(rule: Rule) -> str:
    return (f"{rule.id} ({rule.severity.label})\n{rule.summary}\n\n{rule.explain}\n")


def rule_table(rules: Iterable[Rule], out: IO[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="drainsafe check rules")
    table.add_column("rule")
    table.add_column("severity")
    table.add_column("what it finds")
    for r in rules:
        table.add_row(r.id, r.severity.label, r.summary)
    Console(file=out, soft_wrap=False, width=120).print(table)
