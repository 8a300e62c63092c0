"""The drainsafe command line: one program, one subcommand per part.

Each part owns a small `cli` module with `register(subparsers)`, which adds its parser and
sets `handler` to a function `(argparse.Namespace) -> int`. Those modules import only
argparse at the top, so `drainsafe --help` (and kubectl's plugin discovery) stays fast;
heavy imports happen inside the handler.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from drainsafe import __version__
from drainsafe.shell import (
    EXIT_CODES_HELP,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    internal_error,
)

# Module per part, in the order `--help` lists them.
COMMAND_MODULES = (
    "drainsafe.check.cli",
    "drainsafe.server.cli",
    "drainsafe.lab.cli",
    "drainsafe.drain.cli",
    "drainsafe.controller.cli",
    "drainsafe.maintenance.cli",
    "drainsafe.verify.cli",
    "drainsafe.simulate.cli",
    "drainsafe.demo.cli",
)

# A command whose start-up is part of its cost (check runs per commit, per file, as a kubectl
# plugin): called by its name, only its own parser is built; the others' modules (~40 ms of
# imports and parsers) are not loaded. Its --help and errors are the same either way.
FAST_START = {"check": "drainsafe.check.cli"}


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drainsafe",
        description="Take Kubernetes pods and GPU nodes out of service "
        "without killing in-flight requests.",
    )
    parser.add_argument("--version", action="version", version=f"drainsafe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(sub)
    for command in sub.choices.values():  # every command's --help ends with the shared codes
        command.epilog = f"{command.epilog}\n\n{EXIT_CODES_HELP}" if command.epilog \
            else EXIT_CODES_HELP
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    fast = FAST_START.get(words[0]) if words else None
    parser = build_parser(COMMAND_MODULES if fast is None else (fast,))
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # Run as the program (argv from sys.argv), a one-shot command may end the process itself
    # once its output is written (shell.end_process); called from Python, it returns.
    args.program = argv is None
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        print(f"drainsafe {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        # One error path for every command: whatever no command expected ends in a message
        # naming the command line, with its own exit code, never in a traceback that exits
        # 1 (which means "findings" or "failed requests" to a script).
        if os.environ.get("DRAINSAFE_DEBUG"):
            raise
        argv_list = list(argv) if argv is not None else sys.argv[1:]
        print(internal_error(args.command, argv_list, exc), file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
