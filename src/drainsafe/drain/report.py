"""Rendering plans and drain reports for people (rich) and machines (JSON)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from drainsafe.drain.execute import NodeReport, iso
from drainsafe.drain.ownership import CordonRecord, SurgedWorkload
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
            + (f"; {budget.best_case_with_surge} with the surge of {budget.surge}"
               if budget.surge else "")
        )
    if plan.workload_plans:
        wt = Table(title="Per workload (workloads run in parallel)", title_justify="left")
        for col in ("workload", "strategy", "pods", "surge", "Ready floor", "expected",
                    "why"):
            wt.add_column(col)
        for w in plan.workload_plans:
            floor = "-" if w.floor is None or not w.replicas else (
                f"{w.floor}/{w.replicas} ({100 * w.floor // w.replicas}%)")
            expected = "?" if w.expected_seconds is None else f"<= {w.expected_seconds:.0f}s"
            if w.startup_seconds is not None:
                expected += f" (start-up {w.startup_seconds:.0f}s)"
            wt.add_row(w.workload, w.strategy, str(len(w.pods)), f"+{w.surge}", floor,
                       expected, w.why + (" [continues an earlier run]" if w.resumed else ""))
        console.print(wt)
    evict_queues = [q for q in plan.queues if (plan.workload_plan(q.workload) is None
                    or plan.workload_plan(q.workload).strategy == "evict")]  # type: ignore[union-attr]
    if evict_queues:
        console.print("Evict-first order (within a queue one pod at a time, the next after "
                      "the previous one's replacement is Ready):")
        for q in evict_queues:
            console.print(f"  {q.workload or 'no workload'}: {' -> '.join(q.pods)}")
    console.print(f"Longest grace period: {plan.longest_grace}s.")
    for n in plan.notes:
        console.print(f"note: {n}")
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
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
    for workload, what in report.scaled.items():
        console.print(f"  surged {workload}: {what}, restored")
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


def render_surged(console: Console, surged: Sequence[SurgedWorkload]) -> None:
    if not surged:
        return
    table = Table(title="Workloads left scaled up by an unfinished drain", title_justify="left")
    for col in ("workload", "replicas now", "before", "HPA", "for node", "by", "since"):
        table.add_column(col)
    for s in surged:
        table.add_row(s.workload, str(s.replicas_now), str(s.replicas_before),
                      s.autoscaler or "-", s.node, s.by, s.since)
    console.print(table)
    console.print("Run the same drain again to finish it, or `drainsafe uncordon NODE` to give "
                  "it up; both restore the recorded scale.")
