"""Findings before and after a change to `drainsafe check`, compared field by field.

A speed change must not change what check says. This records, for each input set, every
field of every finding (rule, severity, object, file, line, message, fix, document index,
path, budget, edits), the input errors and notes, the counts, and the bytes of the three
outputs (json, sarif, text) and of `--diff`; then compares two such records.

Input sets: examples/, tests/, deploy/ (each as one run, and each of their manifests alone),
the public inference manifests of shared/research/real-manifests/ where present, and the
bench's mixed and findings-heavy corpora at --objects (generated as bench_check.py generates
them, deterministic).

    python bench/check_findings_compare.py record before.json     # on the old code
    python bench/check_findings_compare.py record after.json      # on the new code
    python bench/check_findings_compare.py compare before.json after.json
    python bench/check_findings_compare.py record par.json --jobs 2  # checked in 2 processes
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_check  # noqa: E402

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def _inputs(objects: int) -> dict[str, list[str]]:
    sets: dict[str, list[str]] = {}
    for top in ("examples", "tests", "deploy"):
        sets[top] = [top]
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in MANIFEST_SUFFIXES and path.is_file() \
                    and "__pycache__" not in path.parts:
                rel = str(path.relative_to(ROOT))
                sets[rel] = [rel]
    # beside the checkout (as tests/check/test_real_manifests.py finds them), or a worktree's
    candidates = [Path(os.environ.get("DRAINSAFE_REAL_MANIFESTS", "/nonexistent"))] + [
        up / "shared" / "research" / "real-manifests" for up in (ROOT.parent, ROOT.parent.parent)]
    real = next((c for c in candidates if c.is_dir()), None)
    for path in sorted(real.glob("*.yaml")) if real is not None else ():
        sets[f"real/{path.name}"] = [str(path)]
    mixed = HERE / "out" / "compare-mixed"
    heavy = HERE / "out" / "compare-heavy"
    bench_check.generate_mixed(objects, mixed)
    bench_check.generate_heavy(objects, heavy)
    sets["corpus-mixed"] = [str(mixed.relative_to(ROOT))]
    sets["corpus-heavy"] = [str(heavy.relative_to(ROOT))]
    return sets


def _digest(text: str) -> dict[str, Any]:
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "chars": len(text)}


def _finding(f: Any) -> dict[str, Any]:
    return {
        "rule": f.rule, "severity": f.severity.label, "object": list(f.object),
        "file": f.file, "line": f.line, "message": f.message, "fix": f.fix,
        "doc_index": f.doc_index, "path": list(f.path),
        "budget": None if f.budget is None else repr(f.budget),
        "edits": [[list(e.path), repr(e.value)] for e in f.edits],
    }


JOBS: list[str] = []
"""--jobs for the command's runs (none: its default)."""


def _cli(argv: list[str]) -> dict[str, Any]:
    from drainsafe.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", "--no-config", *JOBS, *argv])
    return {"exit": code, "stdout": _digest(out.getvalue()), "stderr": _digest(err.getvalue())}


def record(objects: int, jobs: int = 1) -> dict[str, Any]:
    from drainsafe.check.context import Context
    from drainsafe.check.parallel import run

    os.chdir(ROOT)  # file names in findings are as given: relative to the repository
    records: dict[str, Any] = {}
    for name, paths in _inputs(objects).items():
        result = run(paths, Context(), jobs=jobs)
        records[name] = {
            "findings": [_finding(f) for f in result.findings],
            "errors": [repr(e) for e in result.errors],
            "notes": list(result.notes),
            "documents": result.documents, "inputs": result.inputs,
            "checked": result.checked,
            "outputs": {output: _cli(["-o", output, *paths])
                        for output in ("json", "sarif", "text")},
            "diff": _cli(["--diff", *paths]) if not name.startswith("corpus") else None,
        }
    return records


def compare(before: dict[str, Any], after: dict[str, Any], limit: int = 20) -> int:
    problems: list[str] = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is None or b is None:
            problems.append(f"{name}: only in {'after' if a is None else 'before'}")
            continue
        for key in ("errors", "notes", "documents", "inputs", "checked", "outputs", "diff"):
            if a[key] != b[key]:
                problems.append(f"{name}: {key} differ: {a[key]!r:.300} != {b[key]!r:.300}")
        fa, fb = a["findings"], b["findings"]
        if len(fa) != len(fb):
            problems.append(f"{name}: {len(fa)} findings before, {len(fb)} after")
        for i, (x, y) in enumerate(zip(fa, fb, strict=False)):
            for key in x.keys() | y.keys():
                if x.get(key) != y.get(key):
                    problems.append(f"{name}: finding {i} ({x['rule']} {x['object']}) field "
                                    f"{key}: {x.get(key)!r:.200} != {y.get(key)!r:.200}")
    for problem in problems[:limit]:
        print(problem)
    total = sum(len(r["findings"]) for r in before.values())
    if problems:
        print(f"DIFFERENT: {len(problems)} differences")
        return 1
    print(f"identical: {len(before)} input sets, {total:,} findings, field by field, "
          "and the json, sarif, text and --diff outputs byte for byte")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out")
    rec.add_argument("--objects", type=int, default=10_000)
    rec.add_argument("--jobs", type=int, default=None,
                     help="worker processes, in-process and for the command (default: 1 "
                     "in-process, the command's own default)")
    cmp = sub.add_parser("compare")
    cmp.add_argument("before")
    cmp.add_argument("after")
    args = parser.parse_args()
    if args.command == "record":
        if args.jobs is not None:
            JOBS[:] = ["--jobs", str(args.jobs)]
        Path(args.out).write_text(json.dumps(record(args.objects, args.jobs or 1)))
        return 0
    return compare(json.loads(Path(args.before).read_text()),
                   json.loads(Path(args.after).read_text()))


if __name__ == "__main__":
    sys.exit(main())
