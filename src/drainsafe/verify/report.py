"""What a person sees: live progress while verify runs, then the summary table."""

from __future__ import annotations

import time
from collections import Counter

from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from drainsafe.verify.load import RequestResult
from drainsafe.verify.outcome import Kind
from drainsafe.verify.record import LifecycleEvent, Record, Summary


class LiveView:
    """Running counts, fed from the load generator's callback; rendered by rich.live.Live."""

    def __init__(self, duration: float) -> None:
        self.duration = duration
        self.started = time.monotonic()
        self.counts: Counter[str] = Counter()
        self.events: list[LifecycleEvent] = []
        self._recent: list[float] = []

    def add(self, result: RequestResult) -> None:
        self.counts[result.outcome.label] += 1
        self._recent.append(time.monotonic())

    def add_event(self, event: LifecycleEvent) -> None:
        self.events.append(event)

    def _rate(self) -> float:
        now = time.monotonic()
        self._recent = [t for t in self._recent if now - t <= 2.0]
        return len(self._recent) / 2.0

    def __rich__(self) -> RenderableType:
        elapsed = time.monotonic() - self.started
        total = sum(self.counts.values())
        failed = total - self.counts.get(Kind.OK.value, 0)
        head = Text.assemble(
            (f"{min(elapsed, self.duration):5.1f}/{self.duration:g} s  ", "bold"),
            f"{total} requests  {self._rate():.0f}/s  ",
            (f"{failed} failed", "bold red" if failed else "green"),
        )
        bar = ProgressBar(total=self.duration, completed=min(elapsed, self.duration), width=40)
        parts: list[RenderableType] = [head, bar]
        if self.counts:
            parts.append(Text("  ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))))
        for event in self.events[-3:]:
            parts.append(Text(f"  {event.t:7.2f}s {event.pod} {event.kind} {event.detail}",
                              style="dim"))
        return Group(*parts)


def summary_table(record: Record, summary: Summary | None = None) -> Table:
    summary = summary or record.summary()
    table = Table()
    table.add_column("outcome")
    table.add_column("requests", justify="right")
    table.add_column("share", justify="right")
    for label, count in summary.counts.items():
        style = "green" if label == Kind.OK.value else "bold red"
        share = f"{100 * count / summary.total:.2f}%" if summary.total else "-"
        table.add_row(Text(label, style=style), str(count), share)
    return table


def summary_line(record: Record, summary: Summary) -> str:
    return (f"{summary.total} requests in {record.elapsed:.1f} s ({summary.rate:.1f}/s, "
            f"{record.mode} loop); ok requests: time to first byte p50 "
            f"{_ms(summary.ttfb_p50)}, p99 {_ms(summary.ttfb_p99)}; total p50 "
            f"{_ms(summary.total_p50)}, p99 {_ms(summary.total_p99)}")


def print_summary(record: Record, console: Console) -> None:
    summary = record.summary()
    console.print(f"[bold]drainsafe verify[/] {record.url}", highlight=False)
    console.print(summary_table(record, summary))
    console.print(summary_line(record, summary), highlight=False)
    if record.not_started:
        console.print(f"[yellow]{record.not_started} requests were due but not started: "
                      f"{record.settings.get('max_inflight')} already in flight "
                      "(raise --max-inflight or lower --rate)[/]")
    if record.events:
        console.print("[bold]pod lifecycle[/]")
        events = Table()
        for column in ("t (s)", "pod", "event", "detail"):
            events.add_column(column)
        for e in record.events:
            events.add_row(f"{e.t:.2f}", e.pod, e.kind, e.detail)
        console.print(events)
    probe = record.probe_summary()
    if probe is not None and record.probe is not None:
        console.print(f"[bold]probe[/]: fresh connections to {record.probe.get('url')} at "
                      f"{record.probe.get('rate'):g}/s, apart from your load", highlight=False)
        console.print(summary_table(record, probe))
    for m in record.pod_metrics:
        console.print(f"pod {m.pod}: drainsafe figures read {m.scrapes} time(s) through the "
                      f"pod proxy (port {m.port}), last at {m.t:.2f}s", highlight=False)
    failed = record.failed
    total = summary.total + (probe.total if probe else 0)
    verdict = ("[green]no failed requests[/]" if failed == 0
               else f"[bold red]{failed} of {total} requests failed[/]")
    console.print(verdict)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}ms"
