"""Fleet maintenance of 4 of 6 one-GPU nodes under streaming load: a NodeMaintenance
(maxParallelNodes 2, uncordon WhenMaintained, each node marked maintained as soon as it
waits) beside `drainsafe drain -l ... --max-parallel-nodes 2` and `kubectl drain` of the
same nodes in sequence (each uncordoned once drained: its maintenance done at once), one
run each, side by side (issue 30).

Scenario: drainsafe.demo.fleetload (the acceptance test's): a Deployment (1 replica, 1 GPU),
a CPU-only StatefulSet (1) and a LeaderWorkerSet (1 group of 2 pods, 1 GPU each), each
behind a Service with a PDB, streaming load through every Service. A fresh lab per column,
the controller installed in each (`kubectl apply -k deploy/controller`, pinned to the
lab's 2 system nodes; the guard holds nothing: the namespace is not opted in), the same
choice of nodes (4 of the 6 workers, those holding the workloads' pods first).

Printed: total time (start to every node drained and schedulable again), time to full
capacity, the lowest Ready/desired of any workload (groups for the LeaderWorkerSet) at
every 0.1 s sample and every change, requests failed and streams truncated, and how the
operation ended.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from drainsafe.demo.controller import install, lab_path
from drainsafe.demo.fleetload import (
    POOL,
    FleetRun,
    Followed,
    deploy,
    fleet,
    maintain,
    maintained_nodes,
    under_load,
)
from drainsafe.demo.scenario import ScenarioSettings, kubectl_binary, run_kubectl
from drainsafe.lab.cluster import Lab

COLUMNS = ("NodeMaintenance", "drainsafe drain", "kubectl drain")


@dataclass
class Column:
    run: FleetRun | None = None
    outcome: str = ""
    nodes: list[str] = field(default_factory=list)


async def _drainsafe(lab: Lab, nodes: list[str], out: Column) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", "drain", "-l", f"{POOL}=gpu",
        "--max-parallel-nodes", "2", f"--kubeconfig={lab.kubeconfig}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    text, _ = await proc.communicate()
    lines = [ln for ln in text.decode().splitlines() if ln.strip()]
    out.outcome = f"exit {proc.returncode}"
    if proc.returncode:
        why = next((ln.strip() for ln in lines if "no room" in ln or "refus" in ln.lower()),
                   lines[-1] if lines else "")
        out.outcome += ": " + (why if len(why) <= 160 else why[:157] + "...")
    # What it cordoned (the fleet cordons every node first) is given back: maintenance done.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", "uncordon", *nodes,
        f"--kubeconfig={lab.kubeconfig}", stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    await proc.wait()


async def _kubectl(lab: Lab, nodes: list[str], out: Column) -> None:
    binary = kubectl_binary()
    assert binary is not None
    codes = []
    for node in nodes:
        code, _text = await run_kubectl(binary, lab.kubeconfig, "drain", node,
                                        "--ignore-daemonsets", "--delete-emptydir-data",
                                        "--timeout=300s", timeout=330)
        codes.append(code)
        await run_kubectl(binary, lab.kubeconfig, "uncordon", node, timeout=60)
    out.outcome = "exit " + ",".join(map(str, codes))


async def once(column: str, settings: ScenarioSettings) -> Column:
    out = Column()
    workloads = fleet(settings)
    with tempfile.TemporaryDirectory(prefix="bench-maintenance-") as tmp:
        async with Lab(Path(tmp) / "lab", nodes=6, gpus_per_node=1, system_nodes=2,
                       propagation_seconds=settings.propagation, restart_backoff=0.5,
                       ingress=False) as lab:
            await lab.install_leaderworkerset()
            binary = kubectl_binary()
            assert binary is not None
            await install(lab, binary, "drainsafe-system", system_nodes=True)
            await lab.wait_established("nodemaintenances.drainsafe.io")
            await deploy(lab, workloads)
            out.nodes = await maintained_nodes(lab, 4)
            seen = Followed()

            async def operation() -> None:
                if column == "NodeMaintenance":
                    await maintain(lab, out.nodes, Path(tmp), seen, cli_first=False)
                    status = seen.status
                    out.outcome = (f"{status.get('phase')} {status.get('done')}/"
                                   f"{status.get('total')}, deferred "
                                   f"{sum(s[1:].count('Pending') for s in seen.states.values())}")
                elif column == "drainsafe drain":
                    await _drainsafe(lab, out.nodes, out)
                else:
                    await _kubectl(lab, out.nodes, out)

            out.run = await under_load(lab, workloads, operation, warmup=settings.warmup)
    return out


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-load", type=float, default=4.0,
                    help="a new pod's start-up (readiness initial delay), s")
    ap.add_argument("--stream", type=float, default=1.0, help="each request's length, s")
    ap.add_argument("--propagation", type=float, default=0.5)
    ap.add_argument("--drain-delay", type=float, default=1.0)
    args = ap.parse_args()
    if kubectl_binary() is None:
        print("kubectl is not installed", file=sys.stderr)
        return 2
    os.environ["PATH"] = lab_path()  # the lab's controller pods run `drainsafe` from PATH
    settings = ScenarioSettings(model_load=args.model_load, stream_seconds=args.stream,
                                propagation=args.propagation, drain_delay=args.drain_delay,
                                concurrency=2, warmup=1.5)
    results: dict[str, Column] = {}
    t0 = time.monotonic()
    for column in COLUMNS:
        print(f"{column} ...", file=sys.stderr, flush=True)
        results[column] = await once(column, settings)
    print(f"\n4 of 6 one-GPU nodes, 2 at a time, under streaming load of a Deployment (1), "
          f"a StatefulSet (1) and a LeaderWorkerSet (1x2) (one run each; model load "
          f"{args.model_load:g}s, streams {args.stream:g}s, drain delay "
          f"{args.drain_delay:g}s, propagation {args.propagation:g}s)\n")
    width = 22
    print(f"{'':34}" + "".join(f"{c:>{width}}" for c in COLUMNS))

    def row(name: str, f: Callable[[FleetRun], str]) -> None:
        cells = [f(r.run) if r.run is not None else "-" for r in results.values()]
        print(f"{name:34}" + "".join(f"{c:>{width}}" for c in cells))

    row("total time", lambda r: f"{r.seconds:.1f}s")
    row("full capacity again after", lambda r: f"{r.capacity_seconds:.1f}s")
    row("lowest Ready/desired (any)", lambda r: f"{r.lowest_fraction:.0%}")
    for i, w in enumerate(fleet(settings)):
        row(f"  lowest {w.app} ({w.kind})",
            lambda r, i=i: f"{r.workloads[i].lowest_ready}/{r.workloads[i].desired}")
    row("requests failed", lambda r: str(r.total_failed))
    row("streams truncated", lambda r: str(r.truncated))
    row("requests ok", lambda r: str(r.ok))
    print()
    for column, r in results.items():
        print(f"{column}: {r.outcome} (nodes {', '.join(r.nodes)})")
    print(f"bench wall time {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
