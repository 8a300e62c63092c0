"""Text (rich tables) and JSON renderings of a simulation or a sweep."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from drainsafe.simulate.requests import CAUSES
from drainsafe.simulate.simulation import Result, settings_of
from drainsafe.simulate.sweep import Sweep

CAUSE_TEXT = {
    "race": "refused/reset in the race (listener closed before traffic stopped)",
    "cut_deadline": "cut at the server's shutdown deadline",
    "cut_sigkill": "cut by SIGKILL (grace period too short)",
    "capacity": "rejected for lack of capacity",
}


def duration_text(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "never"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def print_result(result: Result, console: Console) -> None:
    s = result.scenario
    console.print(
        f"[bold]{s.name}[/]: {s.nodes} nodes x {s.gpus_per_node} GPUs, "
        f"{sum(w.pods for w in s.workloads)} pods in {len(s.workloads)} workloads; "
        f"{s.upgrade.strategy} drain, parallelism {s.upgrade.parallelism}, "
        f"surge {s.upgrade.surge_nodes}")
    for w in s.workloads:
        b = w.termination.budget
        if math.isinf(b.shutdown_deadline):
            deadline = "no shutdown deadline"
        else:
            deadline = f"shutdown deadline {b.shutdown_deadline:g}s ({b.arithmetic()})"
        console.print(f"  {w.name}: drain delay {b.drain_delay:g}s, {deadline}, "
                      f"grace {b.grace:g}s, SIGKILL at {b.sigkill_at:g}s")

    table = Table(title="Failed requests by cause", title_justify="left")
    table.add_column("cause")
    table.add_column("failed", justify="right")
    table.add_column("expected", justify="right")
    for cause in CAUSES:
        n = result.counts.failures[cause]
        table.add_row(CAUSE_TEXT[cause], f"[red]{n:,}[/]" if n else "0",
                      f"{result.counts.expected[cause]:,.1f}")
    rate = result.failed / result.counts.requests if result.counts.requests else 0.0
    table.add_row("[bold]total[/]", f"[bold]{result.failed:,}[/]",
                  f"{result.expected_failed:,.1f}",
                  end_section=True)
    console.print(table)
    console.print(f"requests simulated: {result.counts.requests:,} "
                  f"(failure rate {rate:.2e})")

    figures = Table(title="Upgrade", title_justify="left", show_header=False)
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    summary = result.summary()
    figures.add_row("total upgrade time", duration_text(summary["upgrade_seconds"]))
    figures.add_row("all replicas Ready again after", duration_text(summary["restored_seconds"]))
    figures.add_row("lowest serving capacity (GPU-weighted)", f"{result.min_capacity:.1%}")
    for name, n in result.min_ready().items():
        w = next(w for w in s.workloads if w.name == name)
        unit = f" groups (of {w.group_size} pods)" if w.group_size > 1 else ""
        figures.add_row(f"  fewest Ready {name}{unit}", f"{n} of {w.replicas}")
    drains = summary["node_drain_seconds"]
    figures.add_row("node drain (cordon to empty), mean / max",
                    f"{duration_text(drains['mean'])} / {duration_text(drains['max'])}")
    figures.add_row("most pods Pending at once", str(result.lifecycle.pending_max))
    if s.upgrade.maintenance is not None:
        figures.add_row("nodes deferred (preflight refused, retried later)",
                        str(result.lifecycle.deferrals))
    figures.add_row("events simulated", f"{result.lifecycle.events:,} in "
                    f"{result.seconds:.2f} s")
    console.print(figures)
    if not result.finished:
        console.print(f"[bold red]The upgrade never finishes:[/] {result.lifecycle.wedged}")


def print_sweep(sw: Sweep, console: Console) -> None:
    console.print(f"{len(sw.trials)} simulations.")
    if sw.wedged is not None:
        console.print(f"[red]No layout finishes the upgrade, even with "
                      f"{max(t.result.scenario.upgrade.surge_nodes for t in sw.trials)} surge "
                      f"nodes:[/] {sw.wedged}")
        return
    if sw.drain_delay is None:
        console.print("[red]No drain delay among the candidates avoids the race: "
                      "propagation is longer than every candidate.[/]")
        return
    console.print(f"drain delay: {sw.drain_delay:g} s is the shortest with no request "
                  f"refused in the race")
    if sw.grace is None:
        console.print("[red]No grace period among the candidates lets every request "
                      "finish.[/]")
        return
    console.print(f"grace period: {sw.grace:g} s is the shortest with no request cut")
    ranked = sw.ranked()
    if sw.best is None or not ranked:
        console.print("[red]No parallelism/surge/strategy combination finishes without "
                      "failures.[/]")
        return
    table = Table(title="Zero-failure settings: the fastest of each strategy, then the "
                  "fastest others", title_justify="left")
    for col in ("strategy", "parallelism", "surge nodes", "drain delay", "grace",
                "upgrade time", "lowest capacity"):
        table.add_column(col, justify="right")
    for r in ranked:
        st = settings_of(r.scenario)
        table.add_row(r.scenario.upgrade.strategy, str(st["parallelism"]),
                      str(st["surge_nodes"]), f"{st['drain_delay']:g} s", f"{st['grace']:g} s",
                      duration_text(r.upgrade_time), f"{r.min_capacity:.1%}")
    console.print(table)
    console.print("[bold green]Best:[/]")
    print_result(sw.best, console)


def sweep_json(sw: Sweep) -> dict[str, Any]:
    return {
        "runs": len(sw.trials),
        "drain_delay": sw.drain_delay,
        "grace": sw.grace,
        "wedged": sw.wedged,
        "best": sw.best.summary() if sw.best else None,
        "ranked": [r.summary() for r in sw.ranked()],
        "trials": [{"stage": t.stage, "zero_failures": t.zero, **_brief(t.result)}
                   for t in sw.trials],
    }


def _brief(r: Result) -> dict[str, Any]:
    summary = r.summary()
    return {k: summary[k] for k in ("strategy", "settings", "failed", "failures",
                                    "expected_failures", "upgrade_seconds", "min_capacity",
                                    "finished")}
