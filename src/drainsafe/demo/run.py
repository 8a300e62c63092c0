"""The demo's shell: one lab per run (in a temporary directory), live progress, the table,
results.json, the pictures and the HTML report, and the cordons the drains left, shown by
`drainsafe audit` and lifted with `drainsafe uncordon`."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from drainsafe.demo import names
from drainsafe.shell import EXIT_FAILED, EXIT_OK
from drainsafe.shell import console as make_console

if TYPE_CHECKING:
    from drainsafe.demo.report import RunReport
    from drainsafe.demo.runs import DemoRun
    from drainsafe.demo.scenario import Progress, ScenarioResult


@dataclass
class Line:
    """One run's line in the live view."""

    phase: str = "waiting"
    ready: int | None = None
    want: int = 2
    ok: int = 0
    failed: int = 0


class Board:
    """The live view: every run's phase, Ready count and requests so far. It starts before
    the lab code is imported (a second on a busy machine), so it shows within 2 s."""

    def __init__(self, run_names: list[str], scale: float,
                 log: Console | None = None) -> None:
        self.scale = scale
        self.log = log  # off a terminal the view is drawn once, at the end: log phases
        self.lines: dict[str, Line] = {n: Line() for n in run_names}
        self.progress: dict[str, Progress] = {}
        self.started = time.monotonic()
        self.current: str | None = None
        self.status = "loading the lab"

    def __rich__(self) -> Group:
        elapsed = time.monotonic() - self.started
        real = "" if self.scale == 1 else f" (~{elapsed * self.scale:.0f} s of the real thing)"
        rows = [Text(f"drainsafe demo, {elapsed:.0f} s{real}: {self.status}", style="bold")]
        for name, line in self.lines.items():
            p = self.progress.get(name)
            if p is not None:
                line.phase, line.ready, line.ok, line.failed = p.phase, p.ready, p.ok, p.failed
            mark = ">" if name == self.current else " "
            ready = "" if line.ready is None else f"Ready {line.ready}/{line.want}"
            low = line.ready is not None and line.ready < line.want and name == self.current
            rows.append(Text(
                f"{mark} {name:<38} {ready:<10} ok {line.ok:<5} failed {line.failed:<4} "
                f"{line.phase}", style="red" if low else ""))
        return Group(*rows)


def picture_title(name: str, result: ScenarioResult) -> str:
    """What the timeline shows: which run drained which node."""
    node = f"node {result.node}" if result.node else "a GPU node"
    return (f"drainsafe demo: {name}, drain of {node} ({result.replicas} "
            f"{result.capacity_unit})")


async def one(run: DemoRun, board: Board, *, after: asyncio.Event | None = None,
              taken: asyncio.Event | None = None, done: asyncio.Event | None = None,
              ) -> tuple[ScenarioResult, list[str]]:
    """One run in its own lab; returns its result and the audit/uncordon transcript. It
    starts its lab and deploys at once; its load and drain wait for `after` (the previous
    run's load stopped). It sets `taken` when its turn comes and `done` when its load
    stops (both at the latest when it ends)."""
    from drainsafe.demo.scenario import Progress, run_drain_under_load
    from drainsafe.lab.cluster import Lab

    progress = board.progress[run.name] = Progress(phase="starting")
    board.lines[run.name].want = run.settings.replicas

    def say(message: str) -> None:
        progress.phase = message
        if board.log is not None:
            board.log.print(f"{time.monotonic() - board.started:6.1f} s  {run.name}: "
                            f"{message}", markup=False, highlight=False)

    s = run.settings
    prepare = None
    if run.controller:
        from drainsafe.demo import controller
        from drainsafe.demo.scenario import NAMESPACE, kubectl_binary

        os.environ["PATH"] = controller.lab_path()  # the lab's pods start `drainsafe`
        kubectl = kubectl_binary() or "kubectl"

        async def prepare(lab: Any) -> list[dict[str, Any]]:
            say("installing the drainsafe controller: kubectl apply -k deploy/controller")
            return await controller.install(lab, kubectl, NAMESPACE)

    async def turn() -> None:
        if after is not None and not after.is_set():
            say("deployed; waiting for the previous run's drain")
            await after.wait()
        board.current = run.name
        if taken is not None:
            taken.set()

    def load_stopped() -> None:
        if done is not None:
            done.set()

    say(f"starting a lab: {s.nodes} GPU nodes")
    slug = run.name.split(" (")[0].replace(" ", "-").replace("+", "")
    try:
        with tempfile.TemporaryDirectory(prefix=f"drainsafe-demo-{slug}-") as tmp:
            async with Lab(Path(tmp) / "lab", nodes=s.nodes, gpus_per_node=1,
                           propagation_seconds=s.propagation, ingress=False) as lab:
                result = await run_drain_under_load(
                    lab, run.tool, s, say=say, progress=progress, prepare=prepare,
                    turn=turn, on_load_stopped=load_stopped)
                say("drainsafe audit, drainsafe uncordon, drainsafe audit")
                transcript = await cordon_transcript(lab.kubeconfig, result.node)
    finally:
        for event in (taken, done):
            if event is not None:
                event.set()
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
    console = make_console(stderr=args.output == "json")
    scale = 1.0 if args.real_time else float(args.scale)
    wanted = [names.ALL[i - 1] for i in args.runs] if args.runs else list(names.ALL)
    board = Board(wanted, scale, log=None if console.is_terminal else console)
    with Live(board, console=console, refresh_per_second=4, transient=False):
        reports, transcripts, notes = await _runs(args, board, scale)
        board.current = None
        board.status = "drawing the pictures"
        files = _write(Path(args.out), reports, notes, transcripts, scale)
        board.status = "done"
    if not console.is_terminal:
        console.line()  # off a terminal the live view's last frame ends without a newline
    return _show(args, console, reports, transcripts, notes, scale, files)


async def _runs(args: argparse.Namespace, board: Board, factor: float
                ) -> tuple[list[RunReport], list[tuple[str, list[str]]], list[str]]:
    from drainsafe.demo import measure
    from drainsafe.demo.report import RunReport
    from drainsafe.demo.runs import Scale, demo_runs
    from drainsafe.demo.scenario import kubectl_binary

    chosen = [r for r in demo_runs(Scale(factor)) if r.name in board.lines]
    notes: list[str] = []
    have_kubectl = kubectl_binary() is not None
    todo = []
    for r in chosen:
        why = r.unavailable or ("" if r.tool != "kubectl" or have_kubectl
                                else "kubectl is not installed")
        if why:
            notes.append(f"{r.name}: not run: {why}")
            board.lines[r.name].phase = f"not run: {why}"
        else:
            todo.append(r)
    board.status = "running"
    reports: list[RunReport] = []
    transcripts: list[tuple[str, list[str]]] = []
    for demo_run, (result, transcript) in zip(todo, await _in_turn(todo, board), strict=True):
        shown = measure.Shown(causes=result.causes, min_ready=result.lowest_ready,
                              replicas=result.replicas)
        reports.append(RunReport(demo_run.name, demo_run.shows, result,
                                 missing=measure.missing(demo_run.expect, shown)))
        transcripts.append((demo_run.name, transcript))
    return reports, transcripts, notes


async def _in_turn(todo: list[DemoRun], board: Board
                   ) -> list[tuple[ScenarioResult, list[str]]]:
    """The runs, each in its own lab, each drained alone and in order: a run's lab starts
    and deploys while the run before it drains (a model load is mostly waiting), and its
    load and drain start once that run's load has stopped (its streams in flight still
    finishing). Measured on a shared 2-core machine: 142 s one run after the other, 104 s
    in turn."""
    tasks: list[asyncio.Task[tuple[ScenarioResult, list[str]]]] = []
    try:
        after: asyncio.Event | None = None
        for demo_run in todo:
            taken, done = asyncio.Event(), asyncio.Event()
            task = asyncio.ensure_future(one(demo_run, board, after=after, taken=taken,
                                             done=done))
            tasks.append(task)
            after = done
            await taken.wait()  # the next lab starts once this run drains
            if task.done():  # it ended before its turn: its error is raised below
                break
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:  # the first failed run's error, in run order
            if task.done() and (error := task.exception()) is not None:
                raise error
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _write(out: Path, reports: list[RunReport], notes: list[str],
           transcripts: list[tuple[str, list[str]]], scale: float) -> list[Path]:
    """Timelines, the capacity picture, the page and results.json; returns the last three."""
    from drainsafe.demo.report import (
        CAPACITY_FILE,
        REPORT_FILE,
        RESULTS_FILE,
        render_capacity,
        render_html,
    )
    from drainsafe.verify.timeline import render_png

    out.mkdir(parents=True, exist_ok=True)
    for report in reports:
        number = names.ALL.index(report.name) + 1
        if report.result.record is not None:
            report.timeline = render_png(report.result.record, out / f"timeline-{number}.png",
                                         title=picture_title(report.name, report.result))
    capacity = render_capacity(reports, out / CAPACITY_FILE, scale=scale)
    page = render_html(reports, out / REPORT_FILE, scale=scale, capacity=capacity,
                       notes=notes, transcripts=transcripts)
    results = out / RESULTS_FILE
    results.write_text(json.dumps([r.to_json() for r in reports], indent=2))
    return [results, capacity, page]


def _show(args: argparse.Namespace, console: Console, reports: list[RunReport],
          transcripts: list[tuple[str, list[str]]], notes: list[str], scale: float,
          files: list[Path]) -> int:
    from drainsafe.demo.report import table

    if args.output == "json":
        print(files[0].read_text())
    console.print(table(reports, scale))
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
    results, capacity, page = files
    console.print(f"\nresults: {results}\ncapacity: {capacity}\nreport: {page}")
    failed_to_show = any(r.missing for r in reports)
    return EXIT_FAILED if failed_to_show or not reports else EXIT_OK
