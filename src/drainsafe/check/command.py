"""The check command's shell: settings, run, output, exit code."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, BinaryIO

from drainsafe import shell
from drainsafe.check import report
from drainsafe.check.context import ConfigError, Context, apply_config, find_config, load_config
from drainsafe.check.engine import LineRenderer, gc_paused
from drainsafe.check.findings import Finding
from drainsafe.check.parallel import await_workers, default_jobs, run
from drainsafe.check.rules import Rule, all_rules

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def settings(args: argparse.Namespace, known: frozenset[str]) -> Context:
    context = Context()
    config_path = None if args.no_config else (
        Path(args.config) if args.config else find_config(Path.cwd()))
    if args.config and not Path(args.config).is_file():
        raise ConfigError(f"--config: no such file {args.config}")
    if config_path is not None:
        context = apply_config(context, load_config(config_path), str(config_path), known)
        context = replace(context, config_file=str(config_path))
    flags: dict[str, Any] = {
        "cluster-version": args.cluster_version,
        "max-request-seconds": args.max_request_seconds,
        "propagation-seconds": args.propagation_seconds,
        "max-grace-seconds": args.max_grace_seconds,
        "buffer-seconds": args.buffer_seconds,
        "fail-on": args.fail_on,
        "disable": ",".join(args.disable) or None,
    }
    return apply_config(context, flags, "command line", known)


def main(args: argparse.Namespace, stdin: BinaryIO, out: IO[str], err: IO[str]) -> int:
    """Run as the program (`args.program`, see drainsafe.cli), the process ends once the
    output is written, while the run's objects are still alive: nothing frees them one by
    one."""
    rules = all_rules()
    if args.list_rules:
        report.rule_table(rules.values(), out)
        return EXIT_OK
    if args.explain:
        rule = rules.get(args.explain)
        if rule is None:
            err.write(f"drainsafe check: unknown rule {args.explain!r}; known: "
                      f"{', '.join(rules)}\n")
            return EXIT_USAGE
        out.write(report.explain(rule))
        return EXIT_OK
    if not args.paths:
        err.write("drainsafe check: no input; give files, directories or - for stdin\n")
        return EXIT_USAGE
    try:
        context = settings(args, frozenset(rules))
    except ConfigError as exc:
        err.write(f"drainsafe check: {exc}\n")
        return EXIT_USAGE
    # The collector stays paused while the output is made too: findings' dicts and strings
    # would otherwise start collections that walk every object read (re-enabled, the run's
    # objects are old but uncounted), 15-20 % of the command at 100,000 objects.
    with gc_paused():
        return _check(args, context, rules, stdin, out, err,
                      end_process=getattr(args, "program", False))


def _check(args: argparse.Namespace, context: Context, rules: dict[str, Rule], stdin: BinaryIO,
           out: IO[str], err: IO[str], *, end_process: bool) -> int:
    jobs = getattr(args, "jobs", None)
    # json and sarif lines are written by the workers that made the findings (see
    # check.parallel); text output groups and counts them, --diff needs them as objects.
    renderer: LineRenderer | None = None
    separator = "\n"
    if not (args.diff or args.fix):
        if args.output == "json":
            renderer, separator = report.json_lines, report.JSON_SEPARATOR
        elif args.output == "sarif":
            renderer, separator = report.sarif_renderer(rules), report.SARIF_SEPARATOR
    result = run(args.paths, context, stdin, jobs=default_jobs() if jobs is None else jobs,
                 renderer=renderer, separator=separator)
    if result.worker_failure is not None:  # the findings are complete: the exit code stays
        err.write(f"drainsafe check: {result.worker_failure}\n")
    for note in result.notes:
        err.write(f"note: {note}\n")
    for error in result.errors:
        err.write(f"error: {error}\n")
    if args.diff or args.fix:
        return _fix(result.findings, context, apply=args.fix, out=out, err=err,
                    input_errors=bool(result.errors))
    if args.output == "json":
        report.write_json(result, out)
    elif args.output == "sarif":
        report.write_sarif(result, rules, out, renderer=renderer)
    else:
        report.text(result, context, out)
    code = result.exit_code(context)
    if end_process:
        out.flush()
        await_workers()
        shell.end_process(code)
    return code


def _fix(findings: list[Finding], context: Context, *, apply: bool, out: IO[str],
         err: IO[str], input_errors: bool) -> int:
    from drainsafe.check.fix import fix_files  # only --diff and --fix need it (and difflib)

    fixes, problems = fix_files(findings)
    for problem in problems:
        err.write(f"error: {problem}\n")
    for fix in fixes:
        if apply:
            try:
                _replace(Path(fix.file), fix.after)
            except OSError as exc:
                err.write(f"error: {fix.file}: not fixed: {exc.strerror or exc}\n")
                return EXIT_USAGE
            err.write(f"fixed {fix.file}\n")
        else:
            out.write(fix.diff())
    if not fixes:
        err.write("no safe automatic fixes\n")
    if problems or input_errors:
        return EXIT_USAGE
    fixed = {f.file for f in fixes} if apply else set()
    remaining = [f for f in findings if not (f.edits and f.file in fixed)]
    threshold = context.fail_on
    failing = threshold is not None and any(f.severity >= threshold for f in remaining)
    return EXIT_FINDINGS if failing else EXIT_OK


def _replace(path: Path, text: str) -> None:
    """Write the fixed text beside the file, then rename it over: an interrupted --fix leaves
    the old file or the new one, never half of one. newline="": the text already has the
    file's own line endings (see fix.fix_files). The file keeps its permission bits, and a
    symbolic link stays a link (its target is replaced)."""
    import os
    import tempfile

    path = Path(os.path.realpath(path))
    mode = path.stat().st_mode & 0o7777
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".drainsafe", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
