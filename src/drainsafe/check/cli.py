"""`drainsafe check`: audit Kubernetes manifests for drain safety."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="audit Kubernetes manifests for drain safety",
        description="Audit Kubernetes manifests (files, directories, - for stdin) for "
        "settings that lose in-flight requests on rollouts and node drains. Exit codes: "
        "0 no findings at or above --fail-on, 1 findings, 2 usage or input error.",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="manifest files or directories (recursive); - reads stdin")
    parser.add_argument("-o", "--output", choices=("text", "json", "sarif"), default="text",
                        help="output format (default: text)")
    parser.add_argument("--cluster-version", metavar="1.NN",
                        help="Kubernetes version the manifests target (default: 1.34)")
    parser.add_argument("--max-request-seconds", metavar="N",
                        help="the longest request a workload must finish (else the "
                        "drainsafe.io/max-request-seconds annotation)")
    parser.add_argument("--propagation-seconds", metavar="N",
                        help="endpoint propagation the drain delay must cover (default: 10)")
    parser.add_argument("--max-grace-seconds", metavar="N",
                        help="platform cap on the grace period, e.g. 600")
    parser.add_argument("--buffer-seconds", metavar="N",
                        help="slack the grace budget keeps for process exit (default: 5)")
    parser.add_argument("--fail-on", metavar="SEVERITY",
                        help="lowest severity that fails the check: info, warning (default), "
                        "error, none")
    parser.add_argument("--disable", metavar="RULES", action="append", default=[],
                        help="comma-separated rule ids to skip")
    parser.add_argument("--config", metavar="FILE",
                        help="config file (default: nearest .drainsafe.yaml or pyproject.toml "
                        "with [tool.drainsafe])")
    parser.add_argument("--no-config", action="store_true", help="ignore config files")
    parser.add_argument("--jobs", "-j", metavar="N", type=_jobs,
                        help="check a large input (1 MiB and more, several files) in N "
                        "processes (default: the CPUs this process may use that are idle by "
                        "the load average; 1: one process)")
    parser.add_argument("--explain", metavar="RULE", help="explain a rule and exit")
    parser.add_argument("--list-rules", action="store_true", help="list the rules and exit")
    fixing = parser.add_mutually_exclusive_group()
    fixing.add_argument("--diff", action="store_true",
                        help="print a unified diff of the fixes that are safe to apply")
    fixing.add_argument("--fix", action="store_true",
                        help="write the safe fixes back into the YAML files")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    import gc
    import sys

    # The collector paused from here, as check.command keeps it while it runs: importing
    # check's modules made ~17 collections of the classes and functions they define, only
    # to find them alive (1.9 M instructions, ~1-2 ms of CPU of a one-manifest run).
    enabled = gc.isenabled()
    gc.disable()
    try:
        from drainsafe.check.command import main

        return main(args, sys.stdin.buffer, sys.stdout, sys.stderr)
    finally:
        if enabled:
            gc.enable()


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of processes, 1 or more")
    return value
