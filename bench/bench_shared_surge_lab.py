"""A parallel drain of the nodes a Deployment runs on, on the lab under streaming load: the
shared surge's effect measured (issue 30; the simulator's prediction is
bench/bench_shared_surge.py).

Scenario: drainsafe.demo.fleetload's streaming Deployment behind a Service with a PDB,
`--replicas` pods of 1 GPU on as many one-GPU nodes of a lab of `--nodes`; `drainsafe drain
NODE... --max-parallel-nodes N` (N the number of those nodes) run as a user runs it, a
fresh lab per run. Under the per-workload lock the nodes' surges of the Deployment take
turns; shared, they overlap. Run it from a checkout of each version (PYTHONPATH=its src)
to compare; it prints one row per run: total time (the command), time to full capacity,
the lowest Ready/desired at every 0.1 s sample and change, failed and truncated requests,
and the most parts of the surge recorded at once (0 for a version-1 record).

`--predict` runs no lab: it prints what `drainsafe simulate` predicts for the same drain
(the same settings; start-up = the model load, a lower bound of the lab's), under today's
engine (a Deployment's surge shared) and under the lock per workload (the engine before,
`upgrade.surge_sharing: lock`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from drainsafe.demo.fleetload import deploy, under_load
from drainsafe.demo.scenario import NAMESPACE, ScenarioSettings
from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.lab.cluster import Lab
from drainsafe.lab.node.probes import LoopStalls


async def one(nodes: int, replicas: int, model_load: float) -> dict[str, Any]:
    s = settings(replicas, model_load)
    with tempfile.TemporaryDirectory() as tmp:
        async with Lab(Path(tmp) / "lab", nodes=nodes, gpus_per_node=1,
                       propagation_seconds=s.propagation, restart_backoff=0.5) as lab, \
                KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            await deploy(lab, [s])
            pods, _ = await client.list(api_path("v1", "pods", namespace=NAMESPACE),
                                        {"labelSelector": "app=chat"})
            targets = sorted({p["spec"]["nodeName"] for p in pods})
            most = [0]

            def seen(_kind: str, obj: dict[str, Any]) -> None:
                raw = (obj["metadata"].get("annotations") or {}).get("drainsafe.io/surge")
                if raw:
                    most[0] = max(most[0], len(json.loads(raw).get("parts") or {}))

            code = [0]
            out: list[bytes] = [b""]
            # What starting the command costs on this machine now (a no-op of it), and
            # how long the lab's loop stalls during the drain: the lab-vs-model slack.
            began = time.monotonic()
            noop = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "drainsafe", "--help",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
            await noop.wait()
            noop_seconds = time.monotonic() - began
            stalls = LoopStalls.for_loop()
            stalls.acquire()

            async def drain() -> None:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "drainsafe", "drain", *targets,
                    "--max-parallel-nodes", str(len(targets)),
                    f"--kubeconfig={lab.kubeconfig}", "--timeout", "300", "-o", "json",
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
                out[0], _ = await proc.communicate()
                code[0] = proc.returncode or 0

            async with Informer(client, api_path("apps/v1", "deployments",
                                                 namespace=NAMESPACE), on_event=seen):
                began = time.monotonic()
                try:
                    run = await under_load(lab, [s], drain)
                finally:
                    stalled = stalls.stalled(began, time.monotonic())
                    stalls.release()
    [w] = run.workloads
    # The span the simulator models: the first cordon to the last old pod gone.
    nodes_done = json.loads(out[0] or b"{}").get("nodes") or []
    cordoned = [n["cordoned_at"] for n in nodes_done if n.get("cordoned_at")]
    gone = [p["terminated_at"] for n in nodes_done for p in n.get("pods") or []
            if p.get("terminated_at")]
    span = round(max(gone) - min(cordoned), 2) if cordoned and gone else None
    return {"exit": code[0], "seconds": round(run.seconds, 1), "cordon_to_gone": span,
            "capacity_seconds": round(run.capacity_seconds, 1),
            "lowest": f"{w.lowest_ready}/{w.desired}", "failed": w.total_failed,
            "truncated": w.truncated, "most_parts": most[0],
            "startup": None if w.startup_seconds is None else round(w.startup_seconds, 2),
            "noop_seconds": round(noop_seconds, 2), "stalled": round(stalled, 2)}


def settings(replicas: int, model_load: float) -> ScenarioSettings:
    return ScenarioSettings(kind="Deployment", app="chat", replicas=replicas, gpus=1,
                            propagation=0.3, drain_delay=0.5, stream_seconds=0.5,
                            model_load=model_load, concurrency=2, warmup=1.0,
                            wait_timeout=120)


def predict(nodes: int, replicas: int, model_load: float,
            startup: float | None = None) -> dict[str, Any]:
    """The simulator's figures for this drain: total seconds (first cordon to the last
    node drained: node_upgrade 0), the lowest capacity, failed requests, lock and shared;
    `startup`: a measured start-up instead of the model load."""
    from drainsafe.simulate.scenario import parse_scenario
    from drainsafe.simulate.simulation import simulate

    s = settings(replicas, model_load)
    out: dict[str, Any] = {}
    for sharing in ("lock", "shared"):
        r = simulate(parse_scenario({
            "name": "shared-surge-lab", "seed": 0,
            "fleet": {"nodes": nodes, "gpus_per_node": 1},
            "traffic": {"duration": 60},
            "consumers": [{"name": "clusterip", "share": 1.0, "propagation": s.propagation}],
            "workloads": [{
                "name": s.app, "replicas": replicas, "gpus": 1,
                "rate": s.concurrency / s.stream_seconds, "durations": s.stream_seconds,
                "startup": model_load if startup is None else startup,
                "pdb": {"maxUnavailable": 1},
                "termination": {"grace": s.grace, "drain_delay": s.drain_delay,
                                "shutdown_deadline": max(s.grace - s.drain_delay - 5, 1)}}],
            "upgrade": {"strategy": "drainsafe", "surge_sharing": sharing,
                        "nodes": list(range(replicas)), "parallelism": replicas,
                        "node_upgrade": 0}}))
        out[sharing] = {"seconds": round(r.upgrade_time, 2) if r.finished else None,
                        "lowest": f"{r.min_capacity:.0%}", "failed": r.failed}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=6)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--model-load", type=float, default=4.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--predict", action="store_true",
                    help="print the simulator's prediction (lock and shared), no lab")
    args = ap.parse_args()
    if args.predict:
        print(json.dumps(predict(args.nodes, args.replicas, args.model_load)))
        return
    for _ in range(args.runs):
        print(json.dumps(asyncio.run(one(args.nodes, args.replicas, args.model_load))),
              flush=True)


if __name__ == "__main__":
    main()
