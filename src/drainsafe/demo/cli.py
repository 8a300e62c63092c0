"""`drainsafe demo`: a lab of 3 GPU nodes, the streaming server, load, a safe drain."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo", help="drain a GPU node of a local lab under streaming load",
        description="Start a lab cluster (3 GPU nodes), deploy the example streaming server "
        "(2 replicas, PDB, drain-aware settings), run constant streaming load, drain one "
        "GPU node with drainsafe, print the result and write a timeline picture, clean up. "
        "--compare also runs kubectl drain against naive settings, side by side.",
    )
    p.add_argument("--compare", action="store_true",
                   help="also run kubectl drain with naive settings (plain uvicorn)")
    p.add_argument("--out", default="drainsafe-demo", metavar="DIR",
                   help="where to write the timeline pictures and results (default "
                   "./drainsafe-demo)")
    p.add_argument("--propagation", type=float, default=1.0, metavar="S",
                   help="endpoint propagation delay of the lab's proxies (default 1.0)")
    p.add_argument("--model-load", type=float, default=4.0, metavar="S",
                   help="how long a replacement takes to become Ready, like a model "
                   "loading (default 4)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    from drainsafe.demo.run import run

    if args.propagation < 0 or args.model_load < 0:
        print("drainsafe demo: --propagation and --model-load must be >= 0", file=sys.stderr)
        return 2
    return asyncio.run(run(args))
