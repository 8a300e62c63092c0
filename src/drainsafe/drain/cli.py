"""`drainsafe drain`, `drainsafe uncordon`, `drainsafe audit` (also as `kubectl drainsafe`)."""

from __future__ import annotations

import argparse
from typing import Any

from drainsafe.drain.ownership import DEFAULT_REASON
from drainsafe.shell import (
    EXIT_API,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
)


def _connection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: current-context)")
    p.add_argument("--request-timeout", type=float, default=30.0, metavar="S",
                   help="timeout of one API request (default 30)")


def register(subparsers: Any) -> None:
    d = subparsers.add_parser(
        "drain", help="drain nodes without killing in-flight requests",
        description="Cordon (with an ownership record), then move each workload's pods off "
        "the node: make before break for Deployments, StatefulSets and LeaderWorkerSet groups "
        "(scale up, wait until the new pods or whole groups are "
        "Available elsewhere, evict the old ones through the Eviction API, restore the "
        "recorded scale), break before make for the rest (one pod at a time, each after the "
        "previous replacement is Ready); refuse up front when a budget can never allow it, "
        "a pod is under two PDBs, or there is no room (GPU) for a replacement. Exit codes: 0 "
        "drained; 1 refused or failed (the node stays cordoned and recorded; run again to "
        "continue); 2 usage or input error (bad kubeconfig, a node that does not exist); 3 "
        "the API server cannot be reached or answers with an error; 130 Ctrl-C and 143 "
        "SIGTERM (the node is recorded as interrupted).",
    )
    d.add_argument("nodes", nargs="*", metavar="NODE")
    d.add_argument("--selector", "-l", help="drain the nodes matching this label selector")
    d.add_argument("--pod-selector", help="only evict pods matching this label selector")
    d.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    d.add_argument("--strategy", choices=("surge", "evict"), default="surge",
                   help="surge (default): make before break where the workload allows it "
                   "(a Deployment, StatefulSet or LeaderWorkerSet not mid-update), evict-first "
                   "for the rest; evict: break "
                   "before make everywhere")
    d.add_argument("--timeout", type=float, default=3600.0, metavar="S",
                   help="give up on a node after S seconds (default 3600); the node stays "
                   "cordoned and recorded")
    d.add_argument("--delete-emptydir-data", action="store_true",
                   help="allow evicting pods with emptyDir volumes (their data is lost)")
    d.add_argument("--max-parallel-nodes", type=int, default=1, metavar="N",
                   help="drain up to N nodes at once (default 1: in sequence)")
    d.add_argument("--surge", action="store_true",
                   help="no room for a replacement: create low-priority placeholder pods so a "
                   "cluster autoscaler adds a node, wait until they are scheduled, remove "
                   "them, then drain")
    d.add_argument("--surge-timeout", type=float, default=900.0, metavar="S",
                   help="how long --surge waits for room (default 900)")
    d.add_argument("--surge-priority-class", metavar="NAME",
                   help="PriorityClass of the placeholders (use a negative-priority class so "
                   "real pods preempt them)")
    d.add_argument("--reason", default=DEFAULT_REASON,
                   help="recorded on the node (a re-run with a new reason records it)")
    d.add_argument("-o", "--output", choices=("text", "json"), default="text")
    _connection(d)
    d.set_defaults(handler=run_drain)

    u = subparsers.add_parser("uncordon", help="uncordon a node drainsafe cordoned")
    u.add_argument("nodes", nargs="+", metavar="NODE")
    u.add_argument("--force", action="store_true",
                   help="also uncordon a node someone else cordoned")
    _connection(u)
    u.set_defaults(handler=run_uncordon)

    a = subparsers.add_parser(
        "audit", help="list cordoned nodes: since when, by whom",
        description="List cordoned nodes: since when, by whom, why, and how far a drain got. "
        "Exit codes: 0 no forgotten cordon; 1 a node is cordoned with no drainsafe record "
        "(a forgotten cordon); 2 usage or kubeconfig error; 3 the API server cannot be "
        "reached or answers with an error.")
    a.add_argument("--all", action="store_true", help="list every node")
    a.add_argument("-o", "--output", choices=("text", "json"), default="text")
    _connection(a)
    a.set_defaults(handler=run_audit)


def _client(args: argparse.Namespace) -> Any:
    from drainsafe.kube import KubeClient

    return KubeClient.from_kubeconfig(args.kubeconfig, args.context,
                                      timeout=args.request_timeout)


def run_drain(args: argparse.Namespace) -> int:
    import sys

    from drainsafe.kube import KubeconfigError, KubeError
    from drainsafe.shell import Terminated, console, run_async

    if not args.nodes and not args.selector:
        print("drainsafe drain: name at least one NODE or pass --selector", file=sys.stderr)
        return EXIT_USAGE
    if args.max_parallel_nodes < 1:
        print("drainsafe drain: --max-parallel-nodes must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        client = _client(args)
    except (KubeconfigError, ValueError, RuntimeError) as exc:
        print(f"drainsafe drain: {exc}", file=sys.stderr)
        return EXIT_USAGE
    stopped = ("the nodes stay cordoned, recorded as interrupted; run the same command "
               "again to continue, or drainsafe uncordon NODE")
    try:
        return run_async(_drain(client, args, console(stderr=args.output == "json")))
    except KubeError as exc:
        print(f"drainsafe drain: API error: {exc}", file=sys.stderr)
        return EXIT_API
    except KeyboardInterrupt:
        print(f"drainsafe drain: interrupted (Ctrl-C); {stopped}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print(f"drainsafe drain: terminated (SIGTERM); {stopped}", file=sys.stderr)
        return EXIT_TERMINATED


async def _drain(client: Any, args: argparse.Namespace, console: Any) -> int:
    import sys

    from drainsafe.drain.execute import DrainSettings
    from drainsafe.drain.filters import DrainOptions
    from drainsafe.drain.fleet import drain_fleet
    from drainsafe.drain.report import render_plan, render_report, reports_json
    from drainsafe.kube import NotFound, api_path

    async with client:
        nodes = list(args.nodes)
        for name in nodes:  # a typo is refused before any plan is shown
            try:
                await client.get(api_path("v1", "nodes", name=name))
            except NotFound:
                print(f"drainsafe drain: node {name!r} not found", file=sys.stderr)
                return EXIT_USAGE
        if args.selector:
            found, _ = await client.list(api_path("v1", "nodes"),
                                         {"labelSelector": args.selector})
            nodes += [n["metadata"]["name"] for n in found if n["metadata"]["name"] not in nodes]
            if not nodes:
                console.print(f"no nodes match {args.selector!r}")
                return EXIT_FAILED
        settings = DrainSettings(
            options=DrainOptions(delete_emptydir_data=args.delete_emptydir_data,
                                 strategy=args.strategy),
            timeout=args.timeout, reason=args.reason, pod_selector=args.pod_selector,
            surge=args.surge, surge_timeout=args.surge_timeout,
            surge_priority_class=args.surge_priority_class,
        )
        with console.status("draining") as status:
            fleet = await drain_fleet(
                client, nodes, settings, max_parallel=args.max_parallel_nodes,
                dry_run=args.dry_run, on_progress=lambda m: status.update(m),
            )
    if args.output == "json":
        print(reports_json(fleet.reports))
    else:
        shown = [p for p in fleet.plans
                 if args.dry_run or any(r.refused and r.plan is p for r in fleet.reports)]
        for plan in shown:
            render_plan(console, plan)
        for r in fleet.reports:
            if not args.dry_run and not r.refused:
                render_report(console, r)
        if fleet.not_started:
            console.print(f"not started after the failure: {', '.join(fleet.not_started)}")
    return EXIT_OK if fleet.ok else EXIT_FAILED


def run_uncordon(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    from drainsafe.drain.cordon import NotOwned, uncordon
    from drainsafe.kube import KubeconfigError, KubeError

    try:
        client = _client(args)
    except (KubeconfigError, ValueError, RuntimeError) as exc:
        print(f"drainsafe uncordon: {exc}", file=sys.stderr)
        return EXIT_USAGE

    async def go() -> int:
        code = EXIT_OK
        async with client:
            for node in args.nodes:
                try:
                    result = await uncordon(client, node, force=args.force)
                    print(result.message)
                except (NotOwned, KubeError, RuntimeError) as exc:
                    print(f"drainsafe uncordon: {exc}", file=sys.stderr)
                    code = EXIT_FAILED
        return code

    return asyncio.run(go())


def run_audit(args: argparse.Namespace) -> int:
    import asyncio
    import json
    import sys
    from dataclasses import asdict

    from drainsafe.drain.cordon import read_facts
    from drainsafe.drain.report import render_audit, render_surged
    from drainsafe.kube import KubeconfigError, KubeError
    from drainsafe.shell import console

    try:
        client = _client(args)
    except (KubeconfigError, ValueError, RuntimeError) as exc:
        print(f"drainsafe audit: {exc}", file=sys.stderr)
        return EXIT_USAGE

    async def go() -> Any:
        async with client:
            return await read_facts(client, all_nodes=args.all)

    try:
        facts = asyncio.run(go())
    except KubeError as exc:
        # Not 1, which means "a forgotten cordon": a script must tell the two apart.
        print(f"drainsafe audit: API error: {exc}", file=sys.stderr)
        return EXIT_API
    records = [n.record for n in facts.nodes]
    surged = [s.record for s in facts.surges]
    if args.output == "json":
        print(json.dumps({"nodes": [asdict(r) for r in records],
                          "scaled_up": [asdict(s) for s in surged]}, indent=2))
    else:
        render_audit(console(), records)
        render_surged(console(), surged)
    # Cordoned nodes with no drainsafe record are the forgotten cordons worth a look, and
    # so is a workload an unfinished drain left scaled up (maintenance.facts).
    return EXIT_FAILED if facts.forgotten else EXIT_OK
