"""What every command's shell shares: exit codes, consoles, output checks.

Exit codes are the same across commands where they mean the same thing, so a script can
tell outcomes apart; this is the one table (each command's --help lists the codes it uses,
written with `exit_codes_text` from these constants):

- 0: done, nothing wrong.
- 1: the command's own bad outcome: findings (check), failed requests (verify), a drain that
  did not finish, a forgotten cordon (audit), lost requests (simulate), work ended at the
  shutdown deadline (serve, run).
- 2: usage or input error: a bad flag, file, scenario, manifest or kubeconfig.
- 3: the Kubernetes API server could not be reached or answered with an error (drain,
  audit, verify -n).
- 4: tune: the measurements cannot bound the propagation lag (it names the run that would).
- 5: serve, run: a second signal forced exit while work was in flight.
- 70: an unexpected internal error (a bug); the message names the command line.
- 130: interrupted (Ctrl-C); 143: terminated (SIGTERM), where a command handles it.

`drainsafe run` otherwise passes its child's code on, as a shell does: 127 when the command
cannot be started, 128+N when the child died from signal N.

Tables and messages are written at a fixed width when the stream is not a terminal, so CI
logs and pipes get whole lines whatever the runner's COLUMNS; on a terminal, its width.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_API = 3
EXIT_NOT_BOUNDED = 4
EXIT_FORCED = 5
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143

EXIT_NOT_FOUND = 127
"""A command that could not be started (POSIX shells' "command not found")."""
SIGNAL_EXIT_BASE = 128
"""A process killed by signal N exits 128+N, as shells and container runtimes report it."""


def exit_codes_text(*codes: tuple[int, str], lead: str = "Exit codes:") -> str:
    """A command's exit codes for its --help, from the constants: "Exit codes: 0 x; 1 y."."""
    return f"{lead} " + "; ".join(f"{code} {meaning}" for code, meaning in codes) + "."


EXIT_CODES_HELP = exit_codes_text(
    (EXIT_USAGE, "usage or input error"),
    (EXIT_INTERNAL, "unexpected internal error (a bug: the message names the command line)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
    lead="exit codes shared by every command:")

PIPE_WIDTH = 200
"""Columns used when output is not a terminal: wide enough for any table drainsafe prints."""


def console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A rich Console whose width does not depend on the terminal when it writes to a pipe
    or a file (rich would otherwise take COLUMNS, or 80, and cut table cells)."""
    from rich.console import Console

    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    is_terminal = hasattr(stream, "isatty") and stream.isatty()
    width = None if is_terminal else PIPE_WIDTH
    return Console(file=file, stderr=stderr, width=width)


def output_dir_problem(value: str, flag: str = "--out") -> str | None:
    """Why DIR cannot take output files (None: it can; it is created if missing).

    Checked before long work starts, so that a run is never lost at the end for want of a
    place to write it. Tried for real (a file created and removed): permission bits lie to
    root and on read-only mounts.
    """
    import tempfile  # here: check, which every commit may run, writes no output files

    path = Path(value)
    if path.exists() and not path.is_dir():
        return f"{flag} {value}: exists and is not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".drainsafe-write-check-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"{flag} {value}: cannot write there: {exc.strerror or exc}"
    return None


def end_process(code: int) -> NoReturn:
    """End a one-shot command's process here, its output flushed, without the interpreter's
    teardown, which frees every object the command made one by one (check: 0.15 s per
    10,000 objects read, 1.4 s per 100,000: a tenth of the command). Only for a command run
    as the program (see cli.main), with nothing left to run: no atexit handler, no file open
    for writing but stdout and stderr. A flush that fails raises as any write would."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def internal_error(command: str, argv: list[str], exc: BaseException) -> str:
    """The one message for an exception no command expected."""
    line = " ".join(["drainsafe", *argv])
    return (f"drainsafe {command}: unexpected error: {type(exc).__name__}: {exc}\n"
            f"  while running: {line}\n"
            "  this is a bug in drainsafe; please report it with the command line and its "
            "input (set DRAINSAFE_DEBUG=1 for the traceback)")


class Terminated(Exception):
    """SIGTERM arrived (a CI job cancelled); the main task was cancelled first, so its
    cleanup (an interrupted drain's record) ran, as for Ctrl-C."""


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, with SIGTERM handled the way asyncio handles Ctrl-C: the main task is
    cancelled (its `except CancelledError` and `finally` blocks run), then Terminated is
    raised. Ctrl-C still ends in KeyboardInterrupt."""
    import asyncio  # here: every command imports this module, and check needs no event loop

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        terminated = False

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await main
        except asyncio.CancelledError:
            if terminated:
                raise Terminated from None
            raise
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    return asyncio.run(guarded())
