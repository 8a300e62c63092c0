"""The demo's results: one table (terminal and HTML), results.json, the capacity picture.

The capacity picture puts every run's Ready count on one axis, each run's time counted from
its drain's start, so the dips (evict first) and the bump (make before break: the stand-in
before the eviction) line up.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from drainsafe.demo.measure import CAUSES
from drainsafe.demo.scenario import ScenarioResult

RESULTS_FILE = "results.json"
CAPACITY_FILE = "capacity.png"
REPORT_FILE = "report.html"


@dataclass
class RunReport:
    """One run of the demo as shown: its name, what it is there to show, what it measured,
    and what it did not show (empty: it showed it)."""

    name: str
    shows: str
    result: ScenarioResult
    missing: list[str] = field(default_factory=list)
    timeline: Path | None = None

    def to_json(self) -> dict[str, Any]:
        r = self.result
        return {
            "name": self.name, "tool": r.tool, "node": r.node, "shows": self.shows,
            "ok": r.ok, "failed": dict(r.causes), "failed_total": sum(r.causes.values()),
            "failed_by_outcome": dict(r.failed), "truncated": r.truncated,
            "replicas": r.replicas, "min_ready": r.lowest_ready,
            "capacity_unit": r.capacity_unit,
            "seconds_below_desired": round(r.seconds_below_desired, 3),
            "drain_seconds": round(r.command_seconds, 3),
            "drain_lower_bound_seconds": r.lower_bound_seconds,
            "full_capacity_seconds": (None if r.capacity_seconds is None
                                      else round(r.capacity_seconds, 3)),
            "full_capacity_lower_bound_seconds": r.capacity_bound_seconds,
            "replacement_startup_seconds": (None if r.startup_seconds is None
                                            else round(r.startup_seconds, 3)),
            "left_cordoned": r.left_cordoned, "exit_code": r.exit_code, "detail": r.detail,
            "shown": not self.missing, "missing": list(self.missing),
        }


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def capacity_unit(runs: Sequence[RunReport]) -> str:
    """What the runs' Ready counts count: replicas, or a LeaderWorkerSet's whole groups."""
    units = sorted({r.result.capacity_unit for r in runs})
    return " or ".join(units) if units else "replicas"


def rows(runs: Sequence[RunReport], scale: float) -> list[tuple[str, list[str]]]:
    """The table's rows as text, shared by the terminal and the HTML table. Seconds are the
    demo's; with scale > 1 each also shows the real thing's (x scale)."""

    def secs(v: float | None) -> str:
        if v is None or scale == 1:
            return _secs(v)
        return f"{_secs(v)} (~{v * scale:.0f} s)"

    def each(f: Callable[[RunReport], str]) -> list[str]:
        return [f(r) for r in runs]

    out = [
        ("requests ok", each(lambda r: str(r.result.ok))),
        ("requests failed", each(lambda r: str(sum(r.result.causes.values())))),
    ]
    for cause in CAUSES:
        out.append((f"  {cause}", [str(r.result.causes.get(cause, 0)) for r in runs]))
    out += [
        ("truncated streams", each(lambda r: str(r.result.truncated))),
        (f"lowest Ready {capacity_unit(runs)}",
         each(lambda r: f"{r.result.lowest_ready}/{r.result.replicas}")),
        ("seconds below desired", each(lambda r: secs(r.result.seconds_below_desired))),
        ("drain command time", each(lambda r: secs(r.result.command_seconds))),
        ("  lower bound (settings)", each(lambda r: secs(r.result.lower_bound_seconds))),
        ("time until full Ready capacity",
         each(lambda r: secs(r.result.capacity_seconds))),
        ("  lower bound (settings)", each(lambda r: secs(r.result.capacity_bound_seconds))),
        ("node left cordoned", each(lambda r: "yes" if r.result.left_cordoned else "no")),
        ("showed what it is for", each(lambda r: "yes" if not r.missing
                                       else "NO: " + "; ".join(r.missing))),
    ]
    return out


def table(runs: Sequence[RunReport], scale: float) -> Table:
    title = "Drain of a GPU node under streaming load"
    if scale != 1:
        title += f" (time-scaled: 1 s here is {scale:g} s of the real thing)"
    t = Table(title=title, title_justify="left")
    t.add_column("")
    for r in runs:
        t.add_column(r.name, style="red" if r.missing else None)
    for name, values in rows(runs, scale):
        t.add_row(name, *values)
    return t


def render_capacity(runs: Sequence[RunReport], path: Path, *, scale: float) -> Path:
    """Ready replicas (or whole Ready groups) over time for all runs in one figure, aligned
    on each drain's start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    counted = capacity_unit(runs)
    try:
        top = 0
        for i, run in enumerate(runs):
            r = run.result
            if not r.ready_history:
                continue
            end = (r.record.elapsed if r.record is not None else r.ready_history[-1][0])
            xs = [t - r.drain_at for t, _ in r.ready_history] + [end - r.drain_at]
            ys = [c for _, c in r.ready_history] + [r.ready_history[-1][1]]
            # A small offset per run keeps equal counts from hiding each other.
            ax.step(xs, [y + 0.04 * (i - 1) for y in ys], where="post", linewidth=2,
                    label=f"{run.name}: lowest {r.lowest_ready}, "
                          f"{r.seconds_below_desired:.1f} s below {r.replicas}")
            top = max(top, *ys)
        if runs:
            ax.axhline(runs[0].result.replicas, color="#333333", linestyle=":", linewidth=1,
                       label=f"desired {counted}")
        ax.axvline(0, color="#d62728", linewidth=1, label="drain starts")
        unit = "s" if scale == 1 else f"s here, x{scale:g} for the real thing"
        ax.set_xlabel(f"seconds since the drain started ({unit})")
        ax.set_ylabel(f"Ready {counted}")
        ax.set_ylim(-0.2, top + 0.8)
        ax.set_yticks(range(top + 1))
        ax.set_title(f"Serving capacity during the drain: Ready {counted} of the workload")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def _img(path: Path | None, alt: str) -> str:
    if path is None or not path.exists():
        return ""
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def render_html(runs: Sequence[RunReport], path: Path, *, scale: float,
                capacity: Path | None, notes: Sequence[str] = (),
                transcripts: Sequence[tuple[str, Sequence[str]]] = ()) -> Path:
    """One self-contained page: the table, the capacity picture, each run's timeline, and
    the audit/uncordon transcript of the cordon each drain left."""
    head = "".join(f"<th>{html.escape(r.name)}</th>" for r in runs)
    body = "".join(
        "<tr><th>" + html.escape(name) + "</th>"
        + "".join(("<td class=\"bad\">" if r.missing else "<td>") + f"{html.escape(v)}</td>"
                  for r, v in zip(runs, values, strict=True)) + "</tr>"
        for name, values in rows(runs, scale))
    scaled = ("" if scale == 1 else
              f"<p>Time-scaled: 1 s here is {scale:g} s of the real thing.</p>")
    shows = "".join(f"<li><b>{html.escape(r.name)}</b>: {html.escape(r.shows)}"
                    + (f' <span class="bad">did not show: {html.escape("; ".join(r.missing))}'
                       "</span>" if r.missing else "") + "</li>" for r in runs)
    extra = "".join(f"<p>{html.escape(n)}</p>" for n in notes)
    cordons = "".join(f"<h3>{html.escape(name)}</h3><pre>{html.escape(chr(10).join(lines))}"
                      "</pre>" for name, lines in transcripts)
    timelines = "".join(f"<h3>{html.escape(r.name)}</h3>{_img(r.timeline, r.name)}"
                        for r in runs if r.timeline is not None)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>drainsafe demo</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1300px}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;
text-align:left}}img{{max-width:100%}}.bad{{color:#b00}}</style></head>
<body><h1>drainsafe demo: draining a GPU node under streaming load</h1>
{scaled}<ul>{shows}</ul>{extra}
<table id="results"><tr><th></th>{head}</tr>{body}</table>
<h2>Capacity</h2>{_img(capacity, f"Ready {capacity_unit(runs)} over time")}
<h2>Timelines</h2>{timelines}
<h2>The cordons the drains left</h2>{cordons or "<p>-</p>"}
</body></html>
"""
    path.write_text(page)
    return path
