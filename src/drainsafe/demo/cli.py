"""`drainsafe demo`: the seeds' failure modes side by side on a lab of 3 GPU nodes under
streaming load: kubectl drain on naive settings, kubectl drain on the seeds' recommended
settings, drainsafe drain; time-scaled to about a minute and a half."""

from __future__ import annotations

import argparse
from typing import Any

from drainsafe.shell import EXIT_FAILED, EXIT_OK, EXIT_USAGE, exit_codes_text


def _run_numbers(value: str) -> list[int]:
    try:
        numbers = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: expected run numbers like 1,3") from None
    if not numbers or any(not 1 <= n <= 4 for n in numbers):
        raise argparse.ArgumentTypeError(f"{value!r}: run numbers are 1 to 4")
    return sorted(set(numbers))


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo", help="drain a GPU node of a local lab under streaming load, three ways",
        description="Start a lab (3 GPU nodes) per run, deploy the example streaming server "
        "(2 replicas, a PDB), send streaming load (short answers and long generations), "
        "drain one GPU node, measure. Runs: 1 kubectl drain on naive settings, 2 kubectl "
        "drain on the seeds' settings (preStop sleep, grace, readiness gating), 3 drainsafe "
        "drain, 4 kubectl drain with the drainsafe controller (when the build has it). "
        "Time-scaled: 1 s of the demo is 10 s of the real thing (a 90 s generation "
        "takes 9 s, the default 30 s grace 3 s). Writes results.json, capacity.png, a "
        "timeline per run and report.html. " + exit_codes_text(
            (EXIT_OK, "every run showed what it is there to show"),
            (EXIT_FAILED, "a run did not (the demo says which and what is missing)")),
    )
    p.add_argument("--out", default="drainsafe-demo", metavar="DIR",
                   help="where to write results and pictures (default ./drainsafe-demo)")
    p.add_argument("--scale", type=float, default=10.0, metavar="N",
                   help="seconds of the real thing per second of the demo (default 10)")
    p.add_argument("--real-time", action="store_true",
                   help="run unscaled: a 90 s generation takes 90 s (about 15 minutes)")
    p.add_argument("--runs", type=_run_numbers, default=None, metavar="N,N",
                   help="only these runs (default: all the build can run)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text",
                   help="json: results.json's content on stdout, progress on stderr")
    p.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    if not args.real_time and not 1 <= args.scale <= 30:
        print(f"drainsafe demo: --scale {args.scale:g}: must be between 1 and 30 (grace "
              "periods are whole seconds; above 30 the default grace would round to 1 s)",
              file=sys.stderr)
        return EXIT_USAGE
    from drainsafe.shell import output_dir_problem

    problem = output_dir_problem(args.out)
    if problem:
        print(f"drainsafe demo: {problem}", file=sys.stderr)
        return EXIT_USAGE
    from drainsafe.demo.run import run

    return asyncio.run(run(args))
