"""`drainsafe tune`: read the inputs, print the recommendation (text, yaml, json, patch)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from drainsafe.shell import EXIT_FAILED, EXIT_NOT_BOUNDED, EXIT_OK, EXIT_USAGE, console
from drainsafe.verify.propagation import CONFIDENCE, MAX_RESOLUTION
from drainsafe.verify.record import RECORD_FILE, Record
from drainsafe.verify.tune import (
    CannotBound,
    Measurements,
    NotEnoughData,
    Tuning,
    explain,
    from_log_lines,
    from_metrics_text,
    from_record,
    parse_workload,
    patch_body,
    server_flags,
    tune,
)

_METRIC_SUFFIXES = (".prom", ".metrics", ".txt", ".log", ".jsonl")


def read_inputs(sources: list[str], metrics: list[str], *, confidence: float = CONFIDENCE,
                max_resolution: float = MAX_RESOLUTION) -> Measurements:
    found = Measurements()
    for raw in sources:
        path = Path(raw)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and (
                p.name == RECORD_FILE or p.suffix in _METRIC_SUFFIXES))
            if not files:
                raise ValueError(f"--from {raw}: no {RECORD_FILE} or metrics files in it")
            for p in files:
                found.merge(read_file(p, confidence=confidence,
                                      max_resolution=max_resolution))
        else:
            found.merge(read_file(path, confidence=confidence, max_resolution=max_resolution))
    for raw in metrics:
        found.merge(read_file(Path(raw), metrics_only=True))
    return found


def read_file(path: Path, *, metrics_only: bool = False, confidence: float = CONFIDENCE,
              max_resolution: float = MAX_RESOLUTION) -> Measurements:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})") from exc
    if not metrics_only and text.lstrip().startswith("{") and '"requests"' in text[:4096]:
        return from_record(Record.read(path), str(path), confidence=confidence,
                           max_resolution=max_resolution)
    if "drainsafe.phase" in text:
        return from_log_lines(text.splitlines(), str(path))
    return from_metrics_text(text, str(path))


def run(args: argparse.Namespace) -> int:
    err = console(stderr=True)
    if not args.source and not args.metrics:
        err.print("[red]drainsafe tune: give --from DIR (verify --out) and/or --metrics FILE[/]")
        return EXIT_USAGE
    try:
        kind, name = parse_workload(args.workload)
        if not 0 < args.confidence < 1:
            raise ValueError(f"--confidence {args.confidence:g}: must be between 0 and 1")
        if not 0 < args.max_resolution < 1:
            raise ValueError(f"--max-resolution {args.max_resolution:g}: must be between "
                             "0 and 1")
        found = read_inputs(args.source, args.metrics, confidence=args.confidence,
                            max_resolution=args.max_resolution)
        tuning = tune(found, margin=args.margin, buffer=args.buffer,
                      max_request=args.max_request, min_propagation=args.min_propagation,
                      drain_via=args.drain_via)
    except CannotBound as exc:
        err.print(f"[red]drainsafe tune: {exc}[/]", highlight=False)
        err.print(f"to bound it: {exc.what_to_run}", markup=False, highlight=False)
        err.print("no settings recommended (exit 4); --min-propagation S gives settings "
                  "from a declared floor instead", markup=False, highlight=False)
        return EXIT_NOT_BOUNDED
    except NotEnoughData as exc:
        err.print(f"[red]drainsafe tune: {exc}[/]")
        return EXIT_FAILED  # nothing measured
    except ValueError as exc:
        err.print(f"[red]drainsafe tune: {exc}[/]")
        return EXIT_USAGE
    container = args.container or name
    body = patch_body(tuning, container, drain_via=args.drain_via)
    out = sys.stdout
    if args.output == "yaml":
        out.write(yaml.safe_dump(body, sort_keys=False))
    elif args.output == "json":
        json.dump(to_json(tuning, body, args.drain_via), out, indent=2)
        out.write("\n")
    elif args.output == "patch":
        out.write(kubectl_patch(kind, name, args.namespace, body) + "\n")
    else:
        print_text(tuning, body, kind, name, args.namespace, args.drain_via, console())
    for warning in tuning.warnings:
        err.print(f"[yellow]note: {warning}[/]")
    return EXIT_OK


def kubectl_patch(kind: str, name: str, namespace: str | None, body: dict[str, object]) -> str:
    ns = f" -n {shlex.quote(namespace)}" if namespace else ""
    payload = json.dumps(body, separators=(",", ":"))
    return (f"kubectl patch {kind.lower()}/{shlex.quote(name)}{ns} --type strategic "
            f"-p {shlex.quote(payload)}")


def to_json(t: Tuning, body: dict[str, object], drain_via: str) -> dict[str, object]:
    b = t.recommendation.budget
    return {
        "drain_delay_seconds": t.drain_delay_seconds,
        "shutdown_deadline_seconds": t.shutdown_seconds,
        "termination_grace_period_seconds": t.grace_seconds,
        "buffer_seconds": b.buffer,
        "margin": t.recommendation.margin,
        "readiness_probe": {"periodSeconds": t.probe_period,
                            "failureThreshold": t.probe_failure_threshold,
                            "timeoutSeconds": t.probe_timeout},
        "measured": {"propagation_seconds": t.propagation.value,
                     "propagation_basis": t.propagation.basis,
                     "max_request_seconds": t.max_request.value,
                     "max_request_basis": t.max_request.basis},
        "server_flags": server_flags(t, drain_via),
        "patch": body,
        "warnings": list(t.warnings),
    }


def print_text(t: Tuning, body: dict[str, object], kind: str, name: str,
               namespace: str | None, drain_via: str, console: Console) -> None:
    table = Table(title=f"drainsafe tune: {kind.lower()}/{name}", title_justify="left")
    table.add_column("setting")
    table.add_column("value", justify="right")
    table.add_column("from the measurement")
    for setting, value, basis in explain(t):
        table.add_row(setting, value, basis)
    console.print(table)
    console.print(f"budget as applied: {t.applied.arithmetic()}")
    console.print(f"server: run drainsafe serve/run with {server_flags(t, drain_via)} "
                  "(or the server's own deadline flag with the same value)")
    console.print("patch (strategic merge):")
    console.print(yaml.safe_dump(body, sort_keys=False), markup=False, highlight=False)
    console.print(kubectl_patch(kind, name, namespace, body), markup=False, highlight=False,
                  soft_wrap=True)
