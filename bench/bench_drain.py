"""Drain of one GPU node under load: drainsafe surge, drainsafe evict and kubectl drain side by
side, against the make-before-break lower bound, one run each on the lab.

Scenario (drainsafe.demo.scenario): a lab of 3 one-GPU nodes, the streaming server (drain-
aware, `drainsafe serve` with a drain delay) with 2 replicas behind a Service and a PDB
(maxUnavailable 1), constant streaming load through the ClusterIP path. One GPU node is
drained, in a fresh lab for each tool:

- surge: `drainsafe drain` (the default, make before break: scale up, wait until the new pod
  serves, evict the old one, restore the scale);
- evict: `drainsafe drain --strategy evict` (break before make, replacement Ready before the
  next eviction);
- kubectl: `kubectl drain --ignore-daemonsets --delete-emptydir-data`.

Printed side by side: when the node was empty (the old pod gone), when the command
returned, the lowest Ready/desired during the drain (every 0.1 s and every change), requests
failed and streams truncated, and the lower bound of make before break: replacement
start-up + drain delay + longest in-flight request (the old pod may only leave once its
replacement serves, and then takes its drain delay and its last request). Evict-first and
kubectl can empty the node sooner than that bound only by dropping a replica for the
replacement's whole start-up. Goal: surge within 1.1x of its bound at 100 % capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from drainsafe.demo.scenario import (
    ScenarioResult,
    ScenarioSettings,
    kubectl_binary,
    run_drain_under_load,
)
from drainsafe.lab.cluster import Lab


async def once(column: str, settings: ScenarioSettings) -> ScenarioResult:
    tool = "kubectl" if column == "kubectl" else "drainsafe"
    if column in ("surge", "evict"):
        settings = replace(settings, strategy=column)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory(prefix=f"bench-drain-{column}-") as tmp:
        async with Lab(Path(tmp) / "lab", nodes=settings.nodes, gpus_per_node=1,
                       propagation_seconds=settings.propagation, ingress=False) as lab:
            return await run_drain_under_load(lab, tool, settings)  # type: ignore[arg-type]


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-load", type=float, default=8.0,
                    help="replacement start-up (readiness initial delay), s")
    ap.add_argument("--stream", type=float, default=1.0, help="each request's length, s")
    ap.add_argument("--propagation", type=float, default=1.0)
    ap.add_argument("--drain-delay", type=float, default=2.0)
    args = ap.parse_args()
    settings = ScenarioSettings(model_load=args.model_load, stream_seconds=args.stream,
                                propagation=args.propagation, drain_delay=args.drain_delay)
    columns = ["surge", "evict"] + (["kubectl"] if kubectl_binary() else [])
    results: dict[str, ScenarioResult] = {}
    t0 = time.monotonic()
    for column in columns:
        print(f"{column} drain ...", file=sys.stderr, flush=True)
        results[column] = await once(column, settings)
    print(f"\nDrain of one GPU node under streaming load (one run each; model load "
          f"{args.model_load:g}s, streams {args.stream:g}s, drain delay {args.drain_delay:g}s, "
          f"propagation {args.propagation:g}s)\n")
    print(f"{'':46}" + "".join(f"{c:>14}" for c in columns))

    def row(name: str, f: Callable[[ScenarioResult], str]) -> None:
        print(f"{name:46}" + "".join(f"{f(results[c]):>14}" for c in columns))

    def bound(r: ScenarioResult) -> float:
        return r.lower_bound_seconds

    row("node empty (old pod gone) after", lambda r: fmt(r.empty_seconds))
    row("command returned after", lambda r: fmt(r.command_seconds))
    row("full Ready capacity after", lambda r: fmt(r.capacity_seconds))
    row("lowest Ready / desired during the drain",
        lambda r: f"{r.lowest_ready}/{r.replicas} ({100 * r.lowest_ready // r.replicas}%)")
    row("requests failed", lambda r: str(r.total_failed))
    row("streams truncated", lambda r: str(r.truncated))
    row("requests ok", lambda r: str(r.ok))
    row("replacement start-up (measured)", lambda r: fmt(r.startup_seconds))
    row("longest request (measured)", lambda r: fmt(r.longest_request_seconds))
    row("lower bound: start-up + delay + request", lambda r: fmt(bound(r)))
    row("node empty / lower bound",
        lambda r: "-" if r.empty_seconds is None else f"{r.empty_seconds / bound(r):.2f}x")
    row("pods created during the drain", lambda r: str(r.pods_created))
    row("exit code", lambda r: str(r.exit_code))
    surge = results["surge"]
    if surge.empty_seconds is not None:
        ratio = surge.empty_seconds / bound(surge)
        full = surge.lowest_ready >= surge.replicas
        print(f"\ngoal (surge within 1.1x of its bound at 100 % capacity): "
              f"{ratio:.2f}x at {100 * surge.lowest_ready // surge.replicas}% -> "
              f"{'met' if ratio <= 1.1 and full else 'NOT met'}")
    print(f"bench wall time {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
