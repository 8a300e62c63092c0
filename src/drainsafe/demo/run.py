"""The demo's shell: labs in a temporary directory, the scenario, a table and pictures."""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from drainsafe.demo.scenario import ScenarioResult, ScenarioSettings, Tool, kubectl_binary
from drainsafe.shell import console as make_console


async def one(tool: Tool, settings: ScenarioSettings, out: Path, console: Console
              ) -> ScenarioResult:
    from drainsafe.demo.scenario import run_drain_under_load
    from drainsafe.lab.cluster import Lab
    from drainsafe.verify.timeline import render_png

    with (tempfile.TemporaryDirectory(prefix=f"drainsafe-demo-{tool}-") as tmp,
          console.status(f"[{tool}] starting a lab: {settings.nodes} GPU nodes") as status):
        async with Lab(Path(tmp) / "lab", nodes=settings.nodes, gpus_per_node=1,
                       propagation_seconds=settings.propagation, ingress=False) as lab:
            status.update(f"[{tool}] deploying the streaming server, 2 replicas + PDB")
            result = await run_drain_under_load(
                lab, tool, settings, say=lambda m: status.update(f"[{tool}] {m}"))
    if result.record is not None:
        picture = render_png(result.record, out / f"timeline-{tool}.png",
                             title=picture_title(result))
        console.print(f"[{tool}] timeline: {picture}")
    return result


def picture_title(result: ScenarioResult) -> str:
    """What the timeline shows: which tool drained which node, with which pods."""
    node = f"node {result.node}" if result.node else "a GPU node"
    pods = "drain-aware pods" if result.drain_aware else "naive pods"
    return (f"drainsafe demo: {result.tool} drain of {node} "
            f"({result.replicas} replicas, {pods})")


def table(results: list[ScenarioResult]) -> Table:
    t = Table(title="Drain of a GPU node under constant streaming load", title_justify="left")
    t.add_column("")
    for r in results:
        t.add_column(f"{r.tool} drain" + ("" if r.drain_aware else " (naive pods)"))

    def row(name: str, values: list[str]) -> None:
        t.add_row(name, *values)

    def secs(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}s"

    row("requests ok", [str(r.ok) for r in results])
    row("requests failed", [
        str(r.total_failed) + (f" ({', '.join(f'{k} {v}' for k, v in r.failed.items())})"
                               if r.failed else "") for r in results])
    row("truncated streams", [str(r.truncated) for r in results])
    row("drain command returned after", [secs(r.command_seconds) for r in results])
    row("Ready replicas when it returned", [f"{r.ready_at_return}/{r.replicas}"
                                             for r in results])
    row("lowest Ready during the drain", [f"{r.lowest_ready}/{r.replicas}" for r in results])
    row("full Ready capacity after", [secs(r.capacity_seconds) for r in results])
    row("replacement start-up", [secs(r.startup_seconds) for r in results])
    row("lower bound", [secs(r.lower_bound_seconds) for r in results])
    row("exit code", [str(r.exit_code) for r in results])
    return t


async def run(args: argparse.Namespace) -> int:
    console = make_console(stderr=args.output == "json")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = ScenarioSettings(propagation=args.propagation, model_load=args.model_load)
    results = [await one("drainsafe", base, out, console)]
    if args.compare:
        if kubectl_binary() is None:
            console.print("kubectl is not installed; skipping --compare")
        else:
            naive = replace(base, drain_aware=False)
            results.append(await one("kubectl", naive, out, console))
    (out / "results.json").write_text(json.dumps([r.to_dict() for r in results], indent=2))
    if args.output == "json":
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        console.print(table(results))
        console.print(f"results: {out / 'results.json'}")
    ours = results[0]
    return 0 if ours.exit_code == 0 and ours.total_failed == 0 else 1
