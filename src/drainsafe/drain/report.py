"""What a drain reports, per pod and per node, and its rendering for people (rich) and
machines (JSON).

Each pod's outcome is a typed value (`Outcome`), as kubectl's pkg/drain reports a typed
status per pod; the counts of 429s keep a budget's, the eviction guard's hold and API
throttling apart (drain.evict's codes).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from drainsafe.drain.filters import Action, Strategy
from drainsafe.drain.ownership import CordonRecord, SurgedWorkload
from drainsafe.drain.plan import DrainPlan

Outcome = Literal[
    "pending",  # not its turn yet (or the drain stopped before it)
    "evicted",  # the server accepted our eviction (or an earlier run's, per the record)
    "already-gone",  # gone before or instead of our eviction
    "skipped",  # stays on the node (DaemonSet, mirror pod)
    "waited",  # already terminating: waited for, never sent an eviction
    "failed",
]


@dataclass
class PodReport:
    namespace: str
    name: str
    uid: str
    workload: str | None
    action: Action
    reason: str
    outcome: Outcome = "pending"
    strategy: Strategy | Literal[""] = ""  # for pods that need a replacement
    evicted_at: float | None = None
    terminated_at: float | None = None
    endpoints_clear_at: float | None = None
    replacement: str | None = None
    replacement_node: str | None = None
    replacement_ready_at: float | None = None
    budget_429s: int = 0
    guard_holds: int = 0  # 429s of drainsafe's eviction guard (held for a stand-in)
    rate_429s: int = 0
    transient_errors: int = 0
    detail: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class NodeReport:
    node: str
    started_at: float
    plan: DrainPlan | None = None
    cordoned_at: float | None = None
    finished_at: float | None = None
    ok: bool = False
    refused: bool = False
    failure: str = ""
    pods: list[PodReport] = field(default_factory=list)
    done_checks: dict[str, bool] = field(default_factory=dict)
    surge_nodes: list[str] = field(default_factory=list)  # where placeholders found room
    scaled: dict[str, str] = field(default_factory=dict)  # workload -> what the surge did

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["plan"] = self.plan.to_dict() if self.plan else None
        return out


def pod_reports(plan: DrainPlan) -> list[PodReport]:
    """A report line per pod of the plan, before anything happened."""
    strategies = {w.workload: w.strategy for w in plan.workload_plans}
    return [
        PodReport(namespace=p.namespace, name=p.name, uid=p.uid, workload=p.workload,
                  action=p.action, reason=p.reason,
                  outcome="skipped" if p.action == "skip" else "pending",
                  strategy=strategies.get(p.workload or "", "") if p.needs_replacement
                  else "")
        for p in plan.pods
    ]


def iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S.%f")[:-3]


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
        unit = "disruption(s)" if budget.group_size is None else \
            f"whole group(s) of {budget.group_size} pods"
        console.print(
            f"PDB {budget.key}: {budget.replicas} pods, allows "
            f"{budget.best_case_disruptions} {unit} when all are Ready "
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
            surge = f"+{w.surge}" + ("" if w.group_size is None else
                                     f" group(s) of {w.group_size}")
            if w.group_size is not None and floor != "-":
                floor += " groups"
            wt.add_row(w.workload, w.strategy, str(len(w.pods)), surge, floor,
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
                "replacement Ready", "where", "429 budget/guard/rate", "detail"):
        table.add_column(col)
    for p in report.pods:
        if p.action == "skip":
            continue
        table.add_row(
            p.key, p.outcome, _secs(start, p.evicted_at), _secs(start, p.terminated_at),
            _secs(start, p.endpoints_clear_at), _secs(start, p.replacement_ready_at),
            f"{p.replacement or ''} {('on ' + p.replacement_node) if p.replacement_node else ''}",
            f"{p.budget_429s}/{p.guard_holds}/{p.rate_429s}", p.detail[:60],
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
