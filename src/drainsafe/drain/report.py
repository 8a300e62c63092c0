"""Rendering plans and drain reports for people (rich) and machines (JSON)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from drainsafe.drain.execute import NodeReport, iso
from drainsafe.drain.ownership import CordonRecord
from drainsafe.drain.plan import DrainPlan


def _secs(start: float, ts: float | None) -> str:
    return "" if ts is None else f"+{ts - start:.1f}s"


def render_plan(console: Console, plan: DrainPlan) -> None:
    table = Table(title=f"Drain plan for {', '.join(plan.nodes)}", title_justify="left")
    for col in ("pod", "action", "reason", "PDB", "grace", "GPU", "replacement on"):
        table.add_column(col)
    for p in plan.pods:
        table.add_row(
            p.key, p.action, p.reason, ", ".join(p.pdbs) or "-", f"{p.grace_seconds}s",
            ", ".join(f"{k}={v}" for k, v in p.gpus.items()) or "-", p.replacement_on or "-",
        )
    console.print(table)
    for budget in plan.budgets:
        console.print(
            f"PDB {budget.key}: {budget.replicas} replicas, allows "
            f"{budget.best_case_disruptions} disruption(s) when all are Ready "
            f"(now: {budget.disruptions_allowed_now})"
        )
    if plan.queues:
        console.print("Order (queues run in parallel; within one, one pod at a time, "
                      "the next after the previous one's replacement is Ready):")
        for q in plan.queues:
            console.print(f"  {q.workload or 'no workload'}: {' -> '.join(q.pods)}")
    console.print(f"Longest grace period: {plan.longest_grace}s; slowest queue up to "
                  f"{plan.longest_queue_grace}s of termination plus replacement start-up.")
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    for b in plan.blockers:
        console.print(f"[red]refused:[/] {b.object}: {b.message}\n  fix: {b.fix}")


def render_report(console: Console, report: NodeReport) -> None:
    start = report.started_at
    table = Table(title=f"Drain of {report.node}", title_justify="left")
    for col in ("pod", "outcome", "evicted", "terminated", "endpoints clear",
                "replacement Ready", "where", "429 budget/rate", "detail"):
        table.add_column(col)
    for p in report.pods:
        if p.action == "skip":
            continue
        table.add_row(
            p.key, p.outcome, _secs(start, p.evicted_at), _secs(start, p.terminated_at),
            _secs(start, p.endpoints_clear_at), _secs(start, p.replacement_ready_at),
            f"{p.replacement or ''} {('on ' + p.replacement_node) if p.replacement_node else ''}",
            f"{p.budget_429s}/{p.rate_429s}", p.detail[:60],
        )
    console.print(table)
    evicted = sum(1 for p in report.pods if p.outcome in ("evicted", "already-gone"))
    stayed = sum(1 for p in report.pods if p.action == "skip")
    took = (report.finished_at or start) - start
    console.print(
        f"{report.node}: {'[green]drained[/]' if report.ok else '[red]NOT drained[/]'} in "
        f"{took:.1f}s (started {iso(start)} UTC); {evicted} pod(s) moved, {stayed} stayed "
        "(DaemonSet/mirror)."
    )
    for name, ok in report.done_checks.items():
        console.print(f"  {'ok' if ok else 'FAILED'}: {name}")
    if report.failure:
        console.print(f"[red]{'refused' if report.refused else 'failed'}:[/] {report.failure}")
        if not report.refused:
            console.print(
                f"The node stays cordoned and recorded; run the same command again to continue,"
                f" or `drainsafe uncordon {report.node}` to give up."
            )


def reports_json(reports: Sequence[NodeReport]) -> str:
    doc: dict[str, Any] = {
        "ok": all(r.ok for r in reports) and bool(reports),
        "nodes": [r.to_dict() for r in reports],
    }
    return json.dumps(doc, indent=2, default=str)


def render_audit(console: Console, records: Sequence[CordonRecord]) -> None:
    if not records:
        console.print("No cordoned nodes.")
        return
    table = Table(title="Cordoned nodes", title_justify="left")
    for col in ("node", "cordoned", "since", "by", "reason", "drain", "takes work", "pods"):
        table.add_column(col)
    for r in records:
        table.add_row(r.node, "yes" if r.cordoned else "no", r.since or "?", r.owner or "-",
                      r.reason or "-", r.drain_state or "-", "yes" if r.takes_work else "NO",
                      f"{r.pods} ({r.daemon_pods} DaemonSet/mirror)")
    console.print(table)
