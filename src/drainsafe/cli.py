"""The drainsafe command line: one program, one subcommand per part.

Each part owns a small `cli` module with `register(subparsers)`, which adds its parser and
sets `handler` to a function `(argparse.Namespace) -> int`. Those modules import only
argparse at the top, so `drainsafe --help` (and kubectl's plugin discovery) stays fast;
heavy imports happen inside the handler.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from drainsafe import __version__

# Module per part, in the order `--help` lists them.
COMMAND_MODULES = (
    "drainsafe.check.cli",
    "drainsafe.server.cli",
    "drainsafe.lab.cli",
    "drainsafe.drain.cli",
    "drainsafe.controller.cli",
    "drainsafe.verify.cli",
    "drainsafe.simulate.cli",
    "drainsafe.demo.cli",
)

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drainsafe",
        description="Take Kubernetes pods and GPU nodes out of service "
        "without killing in-flight requests.",
    )
    parser.add_argument("--version", action="version", version=f"drainsafe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
