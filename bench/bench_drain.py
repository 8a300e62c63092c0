"""Drain wall time against its peer and its lower bound, same lab scenario, one run.

Scenario (drainsafe.demo.scenario): a lab of 3 GPU nodes, the streaming server with 2
replicas (one GPU each) behind a Service and a PDB, constant streaming load through the
ClusterIP path. One GPU node is drained by `drainsafe drain`, then, in a fresh lab with
the same pods, by `kubectl drain`. Printed side by side:

- when the drain command returned, and when the service was back at full Ready capacity;
- lower bounds of the drain command's time and of the time to full Ready capacity, from the
  settings alone (drainsafe.demo.scenario.lower_bounds: preStop, the readiness probe's
  initial delay, the drain delay), so that nothing measured can fall below them;
- requests failed and streams truncated during each drain.

Default: one run of each (about a minute and a half). --runs N repeats for medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from drainsafe.demo.scenario import (
    ScenarioResult,
    ScenarioSettings,
    Tool,
    kubectl_binary,
    run_drain_under_load,
)
from drainsafe.lab.cluster import Lab


async def once(tool: Tool, settings: ScenarioSettings) -> ScenarioResult:
    with tempfile.TemporaryDirectory(prefix=f"bench-drain-{tool}-") as tmp:
        async with Lab(Path(tmp) / "lab", nodes=settings.nodes, gpus_per_node=1,
                       propagation_seconds=settings.propagation, ingress=False) as lab:
            return await run_drain_under_load(lab, tool, settings)


def med(values: list[float | None]) -> float | None:
    real = [v for v in values if v is not None]
    return statistics.median(real) if real else None


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:6.1f}s"


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--model-load", type=float, default=4.0,
                    help="replacement start-up (readiness initial delay), s")
    ap.add_argument("--stream", type=float, default=1.0, help="each request's length, s")
    ap.add_argument("--propagation", type=float, default=1.0)
    ap.add_argument("--drain-delay", type=float, default=2.0)
    args = ap.parse_args()
    settings = ScenarioSettings(model_load=args.model_load, stream_seconds=args.stream,
                                propagation=args.propagation, drain_delay=args.drain_delay)
    tools: list[Tool] = ["drainsafe"] + (["kubectl"] if kubectl_binary() else [])
    results: dict[str, list[ScenarioResult]] = {t: [] for t in tools}
    t0 = time.monotonic()
    for i in range(args.runs):
        for tool in tools:
            print(f"run {i + 1}/{args.runs}: {tool} drain ...", file=sys.stderr, flush=True)
            results[tool].append(await once(tool, settings))
    print(f"\nDrain of one GPU node under streaming load ({args.runs} run(s), medians; "
          f"model load {args.model_load:g}s, streams {args.stream:g}s, drain delay "
          f"{args.drain_delay:g}s, propagation {args.propagation:g}s)\n")
    header = f"{'':50}" + "".join(f"{t + ' drain':>18}" for t in tools)
    print(header)

    def row(name: str, f: object) -> None:
        print(f"{name:50}" + "".join(f"{f(results[t]):>18}" for t in tools))  # type: ignore[operator]

    row("command returned after", lambda rs: fmt(med([r.command_seconds for r in rs])))
    row("full Ready capacity after", lambda rs: fmt(med([r.capacity_seconds for r in rs])))
    row("Ready replicas when the command returned",
        lambda rs: f"{min(r.ready_at_return for r in rs)}/{rs[0].replicas}")
    row("replacement start-up", lambda rs: fmt(med([r.startup_seconds for r in rs])))
    # Bounds from the settings alone (drainsafe.demo.scenario.lower_bounds), so they hold
    # whatever the run measured.
    row("drain command lower bound (settings)",
        lambda rs: fmt(med([r.lower_bound_seconds for r in rs])))
    row("full capacity lower bound (settings)",
        lambda rs: fmt(med([r.capacity_bound_seconds for r in rs])))
    row("command time / its lower bound", lambda rs: "{:.2f}x".format(
        (med([r.command_seconds for r in rs]) or 0) / (med([r.lower_bound_seconds
                                                            for r in rs]) or 1)))
    row("requests failed (total)", lambda rs: str(sum(r.total_failed for r in rs)))
    row("streams truncated (total)", lambda rs: str(sum(r.truncated for r in rs)))
    row("requests ok (total)", lambda rs: str(sum(r.ok for r in rs)))
    print(f"\nbench wall time {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
