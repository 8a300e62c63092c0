"""The timeline picture: requests per second by outcome, with the pods' lifecycle marked.

Requests are placed by the moment their outcome happened (their end): a refused connect ends
at once, a cut stream ends at the cut, so each failure lines up with the lifecycle event that
caused it. The lower panel shows every request's duration, which makes a stream cut short
visible even when the count per second barely moves.
"""

from __future__ import annotations

import base64
import html
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from drainsafe.verify.load import RequestResult
from drainsafe.verify.outcome import Kind
from drainsafe.verify.record import (
    ENDPOINT_NOT_READY,
    ENDPOINT_REMOVED,
    POD_ADDED,
    POD_DELETED,
    POD_EXITED,
    POD_NOT_READY,
    POD_READY,
    POD_TERMINATING,
    LifecycleEvent,
    Record,
)

PNG_FILE = "timeline.png"
HTML_FILE = "timeline.html"

# Colour per outcome kind: ok green; failures in colours that stay apart in print.
KIND_COLOURS = {
    Kind.OK.value: "#4caf50",
    Kind.HTTP.value: "#d62728",
    Kind.REFUSED.value: "#ff7f0e",
    Kind.RESET.value: "#9467bd",
    Kind.CLOSED.value: "#8c564b",
    Kind.TIMEOUT.value: "#7f7f7f",
    Kind.TRUNCATED.value: "#e6b800",
    Kind.DRAIN_MARKER.value: "#1f77b4",
    Kind.ERROR.value: "#000000",
}
@dataclass(frozen=True)
class Bins:
    width: float
    edges: list[float]
    """Left edge of each bin."""
    rates: dict[str, list[float]]
    """Outcome label -> requests per second in each bin ('ok' first)."""


def bin_width(duration: float) -> float:
    """At most 60 bins whatever the run length, on round widths (readable bars)."""
    for width in (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0):
        if duration / width <= 60:
            return width
    return 60.0


def bin_outcomes(requests: Sequence[RequestResult], duration: float,
                 width: float | None = None) -> Bins:
    """Requests per second by outcome label, binned by the time each request ended."""
    end = max([duration, *(r.end for r in requests)]) if requests else duration
    width = width or bin_width(end)
    n = max(math.ceil(end / width), 1)
    rates: dict[str, list[float]] = {Kind.OK.value: [0.0] * n}
    for r in requests:
        row = rates.setdefault(r.outcome.label, [0.0] * n)
        row[min(int(r.end / width), n - 1)] += 1 / width
    return Bins(width=width, edges=[i * width for i in range(n)], rates=rates)


def in_flight(requests: Sequence[RequestResult], times: Sequence[float]) -> list[int]:
    """How many requests were open at each of `times` (started, not yet ended)."""
    starts = sorted(r.start for r in requests)
    ends = sorted(r.end for r in requests)
    return [bisect_right(starts, t) - bisect_right(ends, t) for t in times]


def _colour(label: str) -> str:
    kind = "http" if label.startswith("http_") else label
    return KIND_COLOURS.get(kind, "#000000")


@dataclass(frozen=True)
class PodLane:
    """One pod's life on the time axis, from its events (None: not seen in this run)."""

    pod: str
    first: float
    terminating: float | None
    exited: float | None
    gone: float | None
    marks: tuple[tuple[str, float], ...]


def pod_lanes(events: Sequence[LifecycleEvent]) -> list[PodLane]:
    """Pods in the order they first appear in the events, each with its phases."""
    by_pod: dict[str, list[LifecycleEvent]] = {}
    for event in sorted(events, key=lambda e: e.t):
        if event.kind in POD_KINDS:
            by_pod.setdefault(event.pod, []).append(event)
    lanes = []
    for pod, evs in by_pod.items():
        def first(kind: str, evs: list[LifecycleEvent] = evs) -> float | None:
            return next((e.t for e in evs if e.kind == kind), None)
        added = first("pod_added")
        lanes.append(PodLane(
            pod=pod, first=0.0 if added is None else added,
            terminating=first(POD_TERMINATING), exited=first(POD_EXITED),
            gone=first(POD_DELETED),
            marks=tuple((e.kind, e.t) for e in evs if e.kind in LANE_MARKS)))
    return lanes


# Marker per lifecycle event in the pod lanes: (matplotlib marker, colour, legend text).
LANE_MARKS = {
    POD_READY: ("^", "#2e7d32", "ready"),
    POD_NOT_READY: ("v", "#ff7f0e", "not ready (probe)"),
    ENDPOINT_NOT_READY: ("D", "#9467bd", "endpoint not ready"),
    ENDPOINT_REMOVED: ("X", "#9467bd", "endpoint removed"),
    POD_EXITED: ("s", "#000000", "exited"),
}
POD_KINDS = frozenset({POD_ADDED, POD_TERMINATING, POD_DELETED, *LANE_MARKS})
"""Event kinds of the pod watch; others (e.g. the demo's drain_started) are drawn as lines."""
LANE_PHASES = (("serving", "#a5d6a7"), ("terminating", "#ef9a9a"), ("exited", "#bdbdbd"))


DEFAULT_TITLE = "drainsafe verify"


def render_png(record: Record, path: Path, *, title: str = DEFAULT_TITLE) -> Path:
    """Draw the timeline; returns the path written. `title` heads the picture (followed by
    the URL) and is the PNG's Title metadata, for other tools reusing the picture (demo)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bins = bin_outcomes(record.requests, record.elapsed)
    summary = record.summary()
    lanes = pod_lanes(record.events)
    end = max([record.elapsed, *(r.end for r in record.requests), *(e.t for e in record.events)])
    if lanes:
        fig, (top, middle, bottom) = plt.subplots(
            3, 1, figsize=(12, 8.5), sharex=True,
            gridspec_kw={"height_ratios": [3, 0.6 + 0.35 * len(lanes), 2]})
    else:
        fig, (top, bottom) = plt.subplots(
            2, 1, figsize=(12, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    try:
        stack = [0.0] * len(bins.edges)
        for label, row in bins.rates.items():
            if not any(row):
                continue
            count = summary.counts.get(label, 0)
            top.bar(bins.edges, row, width=bins.width, bottom=stack, align="edge",
                    color=_colour(label), label=f"{label} ({count})", linewidth=0)
            stack = [a + b for a, b in zip(stack, row, strict=True)]
        if record.probes:
            # The probe apart from the user's load: lines, not stacked bars.
            probe = bin_outcomes(record.probes, end, width=bins.width)
            answered = probe.rates.get(Kind.OK.value, [])
            failed = [sum(row[i] for label, row in probe.rates.items()
                          if label != Kind.OK.value) for i in range(len(probe.edges))]
            top.step(probe.edges, answered, where="post", color="#1565c0", linestyle="--",
                     linewidth=1.2, label=f"probe answered ({len(record.probes)} fresh)")
            if any(failed):
                top.step(probe.edges, failed, where="post", color="#b71c1c", linestyle="--",
                         linewidth=1.2, label="probe failed")
        top.set_ylabel("requests/s (by end time)")
        verdict = "no failed requests" if summary.failed == 0 else f"{summary.failed} failed"
        # A long title (the demo's) gets the URL on a line of its own, so nothing is clipped.
        heading = f"{title}  {record.url}" if len(title) + len(record.url) <= 90 \
            else f"{title}\n{record.url}"
        top.set_title(f"{heading}\n{summary.total} requests, {verdict}, "
                      f"{record.mode} loop", fontsize=11)
        top.legend(loc="upper left", bbox_to_anchor=(1.07, 1.0), fontsize=9, title="outcome")
        top.grid(axis="y", alpha=0.3)
        # Long streams end rarely, so also show the load itself: requests open over time.
        load = top.twinx()
        steps = [i * bins.width / 4 for i in range(len(bins.edges) * 4 + 1)]
        load.plot(steps, in_flight(record.requests, steps), color="#333333", linewidth=1,
                  drawstyle="steps-post")
        load.set_ylabel("in flight (line)")
        load.set_ylim(bottom=0)

        oks = [r for r in record.requests if r.outcome.ok]
        bad = [r for r in record.requests if not r.outcome.ok]
        if oks:
            bottom.scatter([r.end for r in oks], [r.total for r in oks], s=4, alpha=0.35,
                           color=_colour("ok"), linewidths=0)
        if bad:
            bottom.scatter([r.end for r in bad], [r.total for r in bad], s=16,
                           color=[_colour(r.outcome.label) for r in bad], marker="x",
                           linewidths=1)
        bottom.set_ylabel("request duration (s)\n(x: failed)")
        bottom.set_xlabel("seconds since start")
        bottom.grid(alpha=0.3)

        # Termination starts are what failures line up with: mark them across the panels.
        for lane in lanes:
            if lane.terminating is not None:
                for ax in (top, bottom):
                    ax.axvline(lane.terminating, color="#d62728", linewidth=1, alpha=0.7)
        if lanes:
            _draw_lanes(middle, lanes, end)
            # Fresh connections each pod answered: the routing evidence tune bounds from.
            rows = {lane.pod: y for y, lane in enumerate(lanes)}
            fresh = [(r.start, rows[r.pod]) for r in (*record.requests, *record.probes)
                     if r.fresh and r.pod in rows]
            if fresh:
                middle.plot([t for t, _ in fresh], [y - 0.38 for _, y in fresh], "|",
                            color="#1565c0", markersize=4, alpha=0.6)
        ymax = top.get_ylim()[1]
        for event in record.events:
            if event.kind in POD_KINDS:
                continue
            for ax in (top, bottom):
                ax.axvline(event.t, color="#333333", linestyle="--", linewidth=1)
            top.text(event.t, ymax * 0.98, f"{event.kind.replace('_', ' ')} ", rotation=90,
                     va="top", ha="right", fontsize=8,
                     bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 1})
        fig.tight_layout(rect=(0, 0, 0.86, 1))
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100, metadata={"Title": title})
    finally:
        plt.close(fig)
    return path


def _draw_lanes(ax: object, lanes: Sequence[PodLane], end: float) -> None:
    from matplotlib.axes import Axes
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    assert isinstance(ax, Axes)
    (_, serving), (_, terminating), (_, exited) = LANE_PHASES
    for y, lane in enumerate(lanes):
        stops = [lane.first, lane.terminating, lane.exited, lane.gone if lane.gone else end]
        colours = (serving, terminating, exited)
        for i, colour in enumerate(colours):
            left = stops[i]
            right = next((s for s in stops[i + 1:] if s is not None), end)
            if left is None or right <= left:
                continue
            ax.barh(y, right - left, left=left, height=0.55, color=colour, linewidth=0)
        for kind, t in lane.marks:
            marker, colour, _ = LANE_MARKS[kind]
            ax.plot([t], [y], marker=marker, color=colour, markersize=7, linestyle="none")
    ax.set_yticks(range(len(lanes)), [short_pod(lane.pod) for lane in lanes], fontsize=8)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_ylabel("pods")
    ax.grid(axis="x", alpha=0.3)
    handles: list[Line2D | Patch] = [Patch(color=c, label=n) for n, c in LANE_PHASES]
    seen = {kind for lane in lanes for kind, _ in lane.marks}
    handles += [Line2D([0], [0], marker=m, color=c, linestyle="none", label=n)
                for kind, (m, c, n) in LANE_MARKS.items() if kind in seen]
    handles.append(Line2D([0], [0], color="#d62728", label="termination starts"))
    legend = ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.07, 1.0),
                       fontsize=8, title="pod lifecycle")
    legend.set_in_layout(False)  # may hang below the lanes; must not squeeze the panels


def short_pod(name: str) -> str:
    """The distinguishing tail of a generated pod name (web-7d9f8-abcde -> abcde)."""
    return name.rsplit("-", 1)[-1] if name.count("-") >= 2 else name


def _probe_html(record: Record) -> str:
    """The probe's outcomes and the pods' own figures, apart from the user's load."""
    probe = record.probe_summary()
    parts = []
    if probe is not None and record.probe is not None:
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>"
                       for k, v in probe.counts.items())
        parts.append(f"<h2>Probe</h2><p>fresh connections to "
                     f"{html.escape(str(record.probe.get('url')))} at "
                     f"{record.probe.get('rate'):g}/s, apart from the load above</p>"
                     f"<table><tr><th>outcome</th><th>requests</th></tr>{rows}</table>")
    if record.pod_metrics:
        rows = "".join(f"<tr><td>{html.escape(m.pod)}</td><td>{m.t:.2f}</td><td>{m.port}</td>"
                       f"<td>{m.scrapes}</td><td><pre>{html.escape(m.text)}</pre></td></tr>"
                       for m in record.pod_metrics)
        parts.append("<h2>Pods' drainsafe figures (through the pod proxy)</h2><table><tr>"
                     "<th>pod</th><th>last read (s)</th><th>port</th><th>reads</th>"
                     f"<th>figures</th></tr>{rows}</table>")
    return "\n".join(parts)


def render_html(record: Record, png: Path, path: Path, *, title: str = DEFAULT_TITLE) -> Path:
    """A single self-contained page: the picture inline, the summary, events and failures."""
    heading = html.escape(title)
    summary = record.summary()
    image = base64.b64encode(png.read_bytes()).decode()
    counts = "".join(f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>"
                     for k, v in summary.counts.items())
    events = "".join(
        f"<tr><td>{e.t:.3f}</td><td>{html.escape(e.pod)}</td><td>{html.escape(e.kind)}</td>"
        f"<td>{html.escape(e.detail)}</td></tr>" for e in record.events)
    failures = [r for r in record.requests if not r.outcome.ok]
    failure_rows = "".join(
        f"<tr><td>{r.start:.3f}</td><td>{r.end:.3f}</td><td>{html.escape(r.outcome.label)}</td>"
        f"<td>{html.escape(r.outcome.detail)}</td><td>{html.escape(r.pod or '')}</td></tr>"
        for r in failures[:500])
    more = (f"<p>{len(failures) - 500} more failures are in record.json.</p>"
            if len(failures) > 500 else "")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1000:.1f} ms"

    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{heading}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1300px}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:2px 8px;
text-align:left}}img{{max-width:100%}}.bad{{color:#b00}}.good{{color:#070}}</style></head>
<body><h1>{heading}</h1>
<p>{html.escape(record.url)}, {record.mode} loop, {record.elapsed:.1f} s,
{summary.total} requests ({summary.rate:.1f}/s):
<b class="{'good' if summary.failed == 0 else 'bad'}">{summary.failed} failed</b></p>
<img alt="requests per second by outcome, with pod lifecycle events"
 src="data:image/png;base64,{image}">
<h2>Outcomes</h2><table><tr><th>outcome</th><th>requests</th></tr>{counts}</table>
<p>ok requests: time to first byte p50 {ms(summary.ttfb_p50)}, p99 {ms(summary.ttfb_p99)};
total p50 {ms(summary.total_p50)}, p99 {ms(summary.total_p99)}</p>
{_probe_html(record)}
<h2>Pod lifecycle</h2><table><tr><th>t (s)</th><th>pod</th><th>event</th><th>detail</th></tr>
{events or '<tr><td colspan="4">not watched (use --namespace/--selector)</td></tr>'}</table>
<h2>Failed requests</h2><table><tr><th>start (s)</th><th>end (s)</th><th>outcome</th>
<th>detail</th><th>pod</th></tr>{failure_rows}</table>{more}
</body></html>
"""
    path.write_text(page)
    return path
