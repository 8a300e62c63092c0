"""Drain of one GPU node holding a LeaderWorkerSet worker, and of one holding a StatefulSet
pod, under streaming load: drainsafe surge, drainsafe evict and kubectl drain side by side,
against the make-before-break lower bound, one run each in a fresh lab (issue 29).

Scenario (drainsafe.demo.scenario, the one the acceptance tests run):
- group: a LeaderWorkerSet of 2 groups of 2 pods (leader and worker, one GPU each) on 7
  one-GPU nodes (the lab's LWS controller, after kubernetes-sigs/lws v0.10.0), constant
  streaming load through a ClusterIP Service over the leaders, a PDB over every pod of the
  groups; the node drained holds a worker. Capacity is whole Ready groups.
- statefulset: a StatefulSet of 2 replicas on 4 one-GPU nodes behind a Service, a PDB
  maxUnavailable 1 (and, for surge, a second run with minAvailable 2, which wedges
  evict-first: only a stand-in lets a pod go). Capacity is Ready pods.

Columns: surge is `drainsafe drain` (make before break: record, scale up by the groups or
pods on the node, wait until the stand-ins are Ready and ready endpoints, evict, wait for
the recreations, restore); evict is `drainsafe drain --strategy evict`; kubectl is
`kubectl drain --ignore-daemonsets --delete-emptydir-data`.

Printed per column: the lowest Ready groups (replicas)/desired over the 0.1 s samples and
every change, failed and truncated requests, when the node was empty (every pod of the
workload on it gone), its make-before-break lower bound from measured figures (the slowest
stand-in's or recreation's start-up, created -> Ready, + the drain delay + the longest
request of the run: the pod may only leave once a stand-in serves, then serves its drain
delay and its last request), the ratio, the same against start-up + drain delay alone
(tighter: a last request usually ends inside the drain delay, and an LWS worker serves
none), and the command's time. Evict-first and kubectl can empty the node sooner than
that bound only by dropping capacity for a start-up. Goal: surge at 100 % capacity within
1.2x of its bound. `--timeline` prints the surge runs' drain progress and pod lifecycle on
the drain's clock (where the time goes).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from drainsafe.demo.scenario import (
    ScenarioResult,
    ScenarioSettings,
    kubectl_binary,
    run_drain_under_load,
)
from drainsafe.lab.cluster import Lab

GOAL_RATIO = 1.2


@dataclass(frozen=True)
class Column:
    name: str
    tool: str  # "drainsafe" or "kubectl"
    settings: ScenarioSettings


async def _with_lws(lab: Any) -> list[dict[str, Any]]:
    await lab.install_leaderworkerset()
    return []


async def once(column: Column, timeline: list[tuple[float, str]] | None) -> ScenarioResult:
    s = column.settings

    def progress(line: str) -> None:
        if timeline is not None:
            timeline.append((time.time(), line))

    with tempfile.TemporaryDirectory(prefix=f"bench-group-drain-{column.name}-") as tmp:
        async with Lab(Path(tmp) / "lab", nodes=s.nodes, gpus_per_node=1,
                       propagation_seconds=s.propagation, ingress=False,
                       restart_backoff=0.5) as lab:
            return await run_drain_under_load(
                lab, column.tool, s,  # type: ignore[arg-type]
                prepare=_with_lws if s.kind == "LeaderWorkerSet" else None,
                on_drain_progress=progress)


def columns(base: ScenarioSettings, min_available: int | None) -> list[Column]:
    out = [Column("surge", "drainsafe", replace(base, strategy="surge"))]
    if min_available is not None:
        out.append(Column(f"surge mA{min_available}", "drainsafe",
                          replace(base, strategy="surge", min_available=min_available)))
    out.append(Column("evict", "drainsafe", replace(base, strategy="evict")))
    if kubectl_binary():
        out.append(Column("kubectl", "kubectl", base))
    return out


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


def bound(r: ScenarioResult, s: ScenarioSettings) -> float:
    """Make before break's bound on the node-empty time as issue 29 states it, from
    measured figures: start-up + drain delay + longest request."""
    return tight(r, s) + r.longest_request_seconds


def tight(r: ScenarioResult, s: ScenarioSettings) -> float:
    """Start-up + drain delay: the floor when the pod's last request ends inside its drain
    delay (proxies stop sending after the propagation delay, shorter here than the drain
    delay), and for an LWS worker, which the leaders' Service sends nothing."""
    return (r.startup_seconds or s.model_load) + s.drain_delay


def table(title: str, unit: str, cols: list[Column], results: dict[str, ScenarioResult]
          ) -> None:
    print(f"\n{title}\n")
    print(f"{'':46}" + "".join(f"{c.name:>14}" for c in cols))

    def row(name: str, f: Callable[[ScenarioResult, ScenarioSettings], str]) -> None:
        print(f"{name:46}" + "".join(f"{f(results[c.name], c.settings):>14}" for c in cols))

    row(f"lowest Ready {unit} / desired (0.1 s + changes)",
        lambda r, _s: f"{r.lowest_ready}/{r.replicas} ({100 * r.lowest_ready // r.replicas}%)")
    row("requests failed", lambda r, _s: str(r.total_failed))
    row("streams truncated", lambda r, _s: str(r.truncated))
    row("requests ok", lambda r, _s: str(r.ok))
    row("node empty (its pods gone) after", lambda r, _s: fmt(r.empty_seconds))
    row("start-up, created -> Ready (measured)", lambda r, _s: fmt(r.startup_seconds))
    row("longest request (measured)", lambda r, _s: fmt(r.longest_request_seconds))
    row("lower bound: start-up + delay + request", lambda r, s: fmt(bound(r, s)))
    row("node empty / lower bound", lambda r, s: "-" if r.empty_seconds is None
        else f"{r.empty_seconds / bound(r, s):.2f}x")
    row("tighter: start-up + delay", lambda r, s: fmt(tight(r, s)))
    row("node empty / tighter", lambda r, s: "-" if r.empty_seconds is None
        else f"{r.empty_seconds / tight(r, s):.2f}x")
    row("command returned after", lambda r, _s: fmt(r.command_seconds))
    row("full Ready capacity after", lambda r, _s: fmt(r.capacity_seconds))
    row("evicted through the Eviction API",
        lambda r, _s: f"{len(r.evicted_by_api)}/{len(r.old_pods)}")
    row("replicas restored, annotations left",
        lambda r, _s: f"{r.replicas_after}, {len(r.annotations_left)}")
    row("exit code", lambda r, _s: str(r.exit_code))
    for c in cols:
        if not c.name.startswith("surge"):
            continue
        r = results[c.name]
        if r.empty_seconds is None:
            print(f"goal ({c.name}): the node was not emptied -> NOT met")
            continue
        ratio = r.empty_seconds / bound(r, c.settings)
        full = r.lowest_ready >= r.replicas and r.total_failed == 0 and r.truncated == 0
        print(f"goal ({c.name}: 100 % capacity, nothing lost, within {GOAL_RATIO}x of the "
              f"bound): {ratio:.2f}x at {100 * r.lowest_ready // r.replicas}% -> "
              f"{'met' if ratio <= GOAL_RATIO and full else 'NOT met'} "
              f"({r.empty_seconds / tight(r, c.settings):.2f}x of the tighter one)")


def print_timeline(name: str, r: ScenarioResult, progress: list[tuple[float, str]]) -> None:
    """The drain's progress lines and the pods' lifecycle, seconds since the drain began."""
    print(f"\ntimeline of {name} (s since the drain started)")
    started = r.zero_at + r.drain_at
    lines = [(t - started, f"drain: {m}") for t, m in progress]
    if r.record is not None:
        lines += [(e.t - r.drain_at, f"{e.kind} {e.pod} {e.detail}".rstrip())
                  for e in r.record.events if e.t >= r.drain_at - 0.05]
    for t, line in sorted(lines, key=lambda x: x[0]):
        print(f"  {t:6.2f}  {line}")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-load", type=float, default=5.0,
                    help="each pod's start-up (readiness initial delay), s")
    ap.add_argument("--stream", type=float, default=1.0, help="each request's length, s")
    ap.add_argument("--propagation", type=float, default=0.5)
    ap.add_argument("--drain-delay", type=float, default=1.5)
    ap.add_argument("--workload", choices=("group", "statefulset", "both"), default="both")
    ap.add_argument("--only", nargs="*", help="only these columns (surge, evict, kubectl, ...)")
    ap.add_argument("--timeline", action="store_true",
                    help="print the surge runs' timelines (where the drain's time goes)")
    args = ap.parse_args()
    base = ScenarioSettings(model_load=args.model_load, stream_seconds=args.stream,
                            propagation=args.propagation, drain_delay=args.drain_delay,
                            warmup=1.5)
    plans = []
    if args.workload in ("group", "both"):
        plans.append(("LeaderWorkerSet, 2 groups of 2 pods, 7 one-GPU nodes, a worker's node",
                      "groups", columns(replace(base, kind="LeaderWorkerSet", group_size=2,
                                                nodes=7), None)))
    if args.workload in ("statefulset", "both"):
        plans.append(("StatefulSet, 2 replicas, 4 one-GPU nodes, PDB maxUnavailable 1 "
                      "(mA2: minAvailable 2)", "replicas",
                      columns(replace(base, kind="StatefulSet", nodes=4), 2)))
    t0 = time.monotonic()
    out = []
    for title, unit, cols in plans:
        cols = [c for c in cols if not args.only or c.name in args.only]
        results: dict[str, ScenarioResult] = {}
        timelines: dict[str, list[tuple[float, str]]] = {}
        for c in cols:
            print(f"{title.split(',')[0]}: {c.name} drain ...", file=sys.stderr, flush=True)
            timelines[c.name] = []
            results[c.name] = await once(c, timelines[c.name])
        out.append((title, unit, cols, results, timelines))
    print(f"\nDrain of one GPU node under streaming load (one run each in a fresh lab; start-up "
          f"{args.model_load:g}s, streams {args.stream:g}s, drain delay {args.drain_delay:g}s, "
          f"propagation {args.propagation:g}s)")
    for title, unit, cols, results, timelines in out:
        table(title, unit, cols, results)
        if args.timeline:
            for c in cols:
                if c.name.startswith("surge"):
                    print_timeline(f"{title.split(',')[0]} {c.name}", results[c.name],
                                   timelines[c.name])
    print(f"\nbench wall time {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
