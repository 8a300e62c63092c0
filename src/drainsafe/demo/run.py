"""The demo's shell: one lab per run (in a temporary directory), live progress, the table,
results.json, the pictures and the HTML report, and the cordons the drains left, shown by
`drainsafe audit` and lifted with `drainsafe uncordon`."""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from drainsafe.demo.runs import DemoRun, Scale
from drainsafe.demo.scenario import Progress, ScenarioResult, kubectl_binary


class Board:
    """The live view: every run's phase, Ready count and requests so far."""

    def __init__(self, runs: list[DemoRun], scale: float) -> None:
        self.runs = runs
        self.scale = scale
        self.progress: dict[str, Progress] = {r.name: Progress(phase="waiting") for r in runs}
        self.started = time.monotonic()
        self.current: str | None = None

    def __rich__(self) -> Group:
        elapsed = time.monotonic() - self.started
        real = "" if self.scale == 1 else f" (~{elapsed * self.scale:.0f} s of the real thing)"
        lines = [Text(f"drainsafe demo, {elapsed:.0f} s{real}", style="bold")]
        for run in self.runs:
            p = self.progress[run.name]
            mark = ">" if run.name == self.current else " "
            want = run.settings.replicas
            ready = f"Ready {p.ready}/{want}" if p.phase not in ("waiting", "skipped") else ""
            style = "red" if ready and p.ready < want and run.name == self.current else ""
            lines.append(Text(
                f"{mark} {run.name:<38} {ready:<10} ok {p.ok:<5} failed {p.failed:<4} "
                f"{p.phase}", style=style))
        return Group(*lines)


def picture_title(name: str, result: ScenarioResult) -> str:
    """What the timeline shows: which run drained which node."""
    node = f"node {result.node}" if result.node else "a GPU node"
    return f"drainsafe demo: {name}, drain of {node} ({result.replicas} replicas)"


async def one(run: DemoRun, out: Path, board: Board) -> tuple[ScenarioResult, list[str]]:
    """One run in its own lab; returns its result and the audit/uncordon transcript."""
    from drainsafe.demo.scenario import run_drain_under_load
    from drainsafe.lab.cluster import Lab

    progress = board.progress[run.name]
    board.current = run.name

    def say(message: str) -> None:
        progress.phase = message

    s = run.settings
    say(f"starting a lab: {s.nodes} GPU nodes")
    slug = run.name.split(" (")[0].replace(" ", "-").replace("+", "")
    with tempfile.TemporaryDirectory(prefix=f"drainsafe-demo-{slug}-") as tmp:
        async with Lab(Path(tmp) / "lab", nodes=s.nodes, gpus_per_node=1,
                       propagation_seconds=s.propagation, ingress=False) as lab:
            result = await run_drain_under_load(lab, run.tool, s, say=say, progress=progress)
            say("drainsafe audit, drainsafe uncordon, drainsafe audit")
            transcript = await cordon_transcript(lab.kubeconfig, result.node)
    say("done")
    return result, transcript


async def cordon_transcript(kubeconfig: Path, node: str) -> list[str]:
    """The seeds' forgotten cordon: `drainsafe audit`, `drainsafe uncordon` (with --force for a
    cordon kubectl set, which drainsafe refuses to lift without it), `drainsafe audit`."""
    from drainsafe.drain.cordon import NotOwned, audit, uncordon
    from drainsafe.drain.report import render_audit
    from drainsafe.kube import KubeClient

    out: list[str] = []

    def show(records: Any) -> None:
        buf = io.StringIO()
        render_audit(Console(file=buf, width=120, no_color=True), records)
        out.extend(buf.getvalue().rstrip().splitlines())

    async with KubeClient.from_kubeconfig(str(kubeconfig)) as client:
        out.append("$ drainsafe audit")
        show(await audit(client))
        out.append(f"$ drainsafe uncordon {node}")
        try:
            done = await uncordon(client, node)
        except NotOwned as exc:
            out.append(str(exc))
            out.append(f"$ drainsafe uncordon {node} --force")
            done = await uncordon(client, node, force=True)
        out.append(done.message)
        out.append("$ drainsafe audit")
        show(await audit(client))
    return out


async def run(args: argparse.Namespace) -> int:
    from drainsafe.demo import measure
    from drainsafe.demo.report import (
        CAPACITY_FILE,
        REPORT_FILE,
        RESULTS_FILE,
        RunReport,
        render_capacity,
        render_html,
        table,
    )
    from drainsafe.demo.runs import demo_runs

    console = Console(stderr=args.output == "json")
    scale = Scale(1.0 if args.real_time else args.scale)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = demo_runs(scale)
    if args.runs:
        chosen = [chosen[i - 1] for i in args.runs]
    notes: list[str] = []
    if kubectl_binary() is None:
        for r in chosen:
            if r.tool == "kubectl" and not r.unavailable:
                notes.append(f"{r.name}: not run: kubectl is not installed")
        chosen = [r for r in chosen if r.tool != "kubectl"]
    for r in chosen:
        if r.unavailable:
            notes.append(f"{r.name}: not run: {r.unavailable}")
    todo = [r for r in chosen if not r.unavailable]
    board = Board(todo, scale.factor)
    reports: list[RunReport] = []
    transcripts: list[tuple[str, list[str]]] = []
    with Live(board, console=console, refresh_per_second=4, transient=False):
        for demo_run in todo:
            result, transcript = await one(demo_run, out, board)
            shown = measure.Shown(causes=result.causes, min_ready=result.lowest_ready,
                                  replicas=result.replicas)
            reports.append(RunReport(demo_run.name, demo_run.shows, result,
                                     missing=measure.missing(demo_run.expect, shown)))
            transcripts.append((demo_run.name, transcript))
        board.current = None
    from drainsafe.verify.timeline import render_png

    for i, report in enumerate(reports, 1):
        if report.result.record is not None:
            report.timeline = render_png(report.result.record, out / f"timeline-{i}.png",
                                         title=picture_title(report.name, report.result))
    capacity = render_capacity(reports, out / CAPACITY_FILE, scale=scale.factor)
    page = render_html(reports, out / REPORT_FILE, scale=scale.factor, capacity=capacity,
                       notes=notes)
    data = [r.to_json() for r in reports]
    (out / RESULTS_FILE).write_text(json.dumps(data, indent=2))
    if args.output == "json":
        print(json.dumps(data, indent=2))
    console.print(table(reports, scale.factor))
    for note in notes:
        console.print(note)
    for report in reports:
        if report.missing:
            console.print(f"[red]{report.name} did not show what it is there to show "
                          f"({report.shows}): {'; '.join(report.missing)}[/red]")
    console.print("\nThe cordons the drains left (the seeds' forgotten cordon):")
    for name, lines in transcripts:
        console.print(f"[bold]{name}[/bold]")
        for line in lines:
            console.print(f"  {line}", markup=False, highlight=False)
    console.print(f"\nresults: {out / RESULTS_FILE}\ncapacity: {capacity}\nreport: {page}")
    failed_to_show = any(r.missing for r in reports)
    return 1 if failed_to_show or not reports else 0
