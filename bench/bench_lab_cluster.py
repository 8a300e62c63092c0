"""Lab node side at scale: a 100-node cluster with 1,000 virtual pods, full rollout restart.

Figures: time for the kubelets to register, for 1,000 pods to become available, and for a
`rollout restart` of every Deployment to complete (new pods available, old pods gone),
printed beside the lower bound the rollout arithmetic allows (waves x pod start-up time),
which is what a cluster with instant control loops would take.

    .venv/bin/python bench/bench_lab_cluster.py [--nodes 100] [--pods 1000]
        [--deployments 10] [--startup 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from pathlib import Path

from lightkube.resources.core_v1 import Pod
from rich.console import Console

from drainsafe.lab.cluster import Lab, virtual_deployment


async def run(args: argparse.Namespace) -> None:
    per = args.pods // args.deployments
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="bench-lab-") as tmp, \
            console.status(f"starting {args.nodes} nodes") as status:
        t0 = time.perf_counter()
        async with Lab(Path(tmp), nodes=args.nodes, propagation_seconds=0, ingress=False,
                       node_cpu="64") as lab:
            t_up = time.perf_counter() - t0
            status.update(f"creating {args.pods} virtual pods")
            names = [f"bench-{i}" for i in range(args.deployments)]
            t1 = time.perf_counter()
            for name in names:
                manifest = virtual_deployment(name, replicas=per, startup_seconds=args.startup,
                                              exit_after_sigterm_seconds=args.startup)
                await lab.apply(manifest)
            await asyncio.gather(*(lab.wait_available("default", n, timeout=args.timeout)
                                   for n in names))
            t_avail = time.perf_counter() - t1
            assert lab.client is not None
            old = {p.metadata.name async for p in lab.client.list(Pod, namespace="default")
                   if p.metadata is not None}
            status.update(f"rollout restart of {args.deployments} Deployments")
            t2 = time.perf_counter()
            for name in names:
                await lab.rollout_restart("default", name)
            await asyncio.gather(*(lab.wait_available("default", n, timeout=args.timeout)
                                   for n in names))
            t_rolled = time.perf_counter() - t2
            status.update("waiting for the old pods to go")
            while True:
                left = {p.metadata.name async for p in lab.client.list(Pod, namespace="default")
                        if p.metadata is not None} & old
                if not left or time.perf_counter() - t2 > args.timeout:
                    break
                await asyncio.sleep(0.2)
            t_gone = time.perf_counter() - t2
    # Default strategy: maxSurge 25 %, maxUnavailable 25 % -> each wave replaces up to half
    # of the replicas; each wave waits at least one pod start-up.
    surge = math.ceil(per * 0.25)
    unavailable = math.floor(per * 0.25)
    waves = math.ceil(per / max(surge + unavailable, 1))
    ideal = waves * args.startup
    print(f"lab: {args.nodes} nodes, {args.deployments} Deployments x {per} virtual pods "
          f"(start-up {args.startup:g}s, exit {args.startup:g}s after SIGTERM)")
    print(f"{'figure':42} {'lab':>10} {'ideal':>10}")
    print(f"{'nodes registered, watches synced (s)':42} {t_up:10.2f} {'-':>10}")
    print(f"{f'{per * args.deployments:,} pods available (s)':42} {t_avail:10.2f} "
          f"{args.startup:10.2f}")
    print(f"{'rollout restart complete (s)':42} {t_rolled:10.2f} {ideal:10.2f}")
    print(f"{'... and every old pod deleted (s)':42} {t_gone:10.2f} "
          f"{ideal + args.startup:10.2f}")
    print(f"{'pods replaced per second':42} {args.pods / t_gone:10.1f} "
          f"{args.pods / (ideal + args.startup):10.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--deployments", type=int, default=10)
    parser.add_argument("--startup", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=600)
    asyncio.run(run(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
