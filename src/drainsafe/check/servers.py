"""What a container's command line says about its server's shutdown.

Reads the server's own flags (or knows its default) to answer: does it drain in-flight
requests on SIGTERM, for how long at most, and does SIGTERM reach it at all? Pure functions
of the container's `command` and `args`; reusable by tune and simulate.

Facts (../shared/research/server-shutdown.md has the sources):
- uvicorn: --timeout-graceful-shutdown N; unset waits for in-flight work without limit
  (encode/uvicorn uvicorn/config.py, docs/settings.md).
- gunicorn: --graceful-timeout N, default 30 s (docs.gunicorn.org settings).
- hypercorn: --graceful-timeout N, default 3 s (pgjones/hypercorn src/hypercorn/config.py).
- vLLM: --shutdown-timeout N (vllm-project/vllm PR #36666; default 0 aborts in-flight
  requests), and the documented --shutdown-mode drain with --shutdown-drain-timeout N
  (default 120; vLLM docs "Using Kubernetes"). Older releases abort on SIGTERM.
- Triton: --exit-timeout-secs N, default 30 (triton-inference-server/server
  src/command_line_parser.cc).
- SGLang: waits for in-flight requests without a deadline (sglang tokenizer_manager.py).
- TGI: waits up to 90 s (huggingface/text-generation-inference launcher/src/main.rs).
- drainsafe serve/run: --drain-delay N, --shutdown-timeout N; probes and the drain trigger on
  the admin port --admin-port N, --drain-path P (defaults from drainsafe.server.cli).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

# drainsafe serve/run's own defaults (its cli module imports only argparse).
from drainsafe.server.cli import (
    DEFAULT_ADMIN_PORT,
    DEFAULT_DRAIN_DELAY,
    DEFAULT_DRAIN_PATH,
    DEFAULT_SHUTDOWN_TIMEOUT,
)

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
SHELL_WRAPPERS = frozenset({"tini", "dumb-init", "catatonit", "s6-svscan", "gosu", "su-exec"})


@dataclass(frozen=True)
class ServerShutdown:
    server: str
    """uvicorn, gunicorn, hypercorn, vllm, triton, sglang, tgi, drainsafe."""
    deadline: float | None
    """Longest the server waits for in-flight requests after SIGTERM; None: no limit."""
    drains: bool
    """False when SIGTERM aborts in-flight requests."""
    source: str
    """Where the deadline comes from: the flag as written, or 'default'."""
    drain_delay: float | None = None
    """A built-in drain delay (drainsafe serve/run), which replaces a preStop sleep."""
    admin_port: int | None = None
    """drainsafe serve/run: the port of readiness, liveness and the drain trigger."""
    drain_path: str | None = None
    """drainsafe serve/run: the drain trigger's path on the admin port."""


@dataclass(frozen=True)
class CommandLine:
    """A container's effective argv, and how a shell stands between it and the kubelet."""

    argv: tuple[str, ...]
    shell_script: str | None = None
    """The script when the container runs `sh -c SCRIPT`."""

    @property
    def text(self) -> str:
        return self.shell_script if self.shell_script is not None else shlex.join(self.argv)


def command_line(command: object, args: object) -> CommandLine | None:
    """command + args as the kubelet joins them; None when the image's entrypoint is used."""
    cmd = _strings(command)
    arg = _strings(args)
    if not cmd and not arg:
        return None
    argv = tuple(cmd + arg)
    if argv and _base(argv[0]) in SHELLS:
        for i, item in enumerate(argv[1:], start=1):
            if item.startswith("-") and "c" in item.lstrip("-") and not item.startswith("--"):
                if i + 1 < len(argv):
                    return CommandLine(argv, argv[i + 1])
                break
    return CommandLine(argv)


def _strings(value: object) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value if v is not None]
    if isinstance(value, str):
        return [value]
    return []


def _base(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _words(line: CommandLine) -> list[str]:
    if line.shell_script is None:
        return list(line.argv)
    try:
        return shlex.split(line.shell_script, comments=True)
    except ValueError:
        return line.shell_script.split()


def _flag(words: Sequence[str], *names: str) -> str | None:
    """The value of --name V or --name=V (the last one wins, as argparse and click do)."""
    value: str | None = None
    for i, word in enumerate(words):
        if not word.startswith(names):
            continue  # neither `--name` nor `--name=V` (one C call; most words are values)
        for name in names:
            if word == name and i + 1 < len(words):
                value = words[i + 1]
            elif word.startswith(name + "="):
                value = word.split("=", 1)[1]
    return value


_SECONDS = re.compile(r"\s*(\d+(?:\.\d+)?)\s*s?\s*")


def _seconds(text: str | None) -> float | None:
    if text is None:
        return None
    match = _SECONDS.fullmatch(text)
    return float(match.group(1)) if match else None


def _has(words: Sequence[str], *needles: str) -> bool:
    return any(_base(w) in needles or w in needles for w in words)


def identify(line: CommandLine | None) -> ServerShutdown | None:
    """The known server on the command line, with its shutdown behaviour."""
    if line is None:
        return None
    words = _words(line)
    joined = " ".join(words)
    if _has(words, "drainsafe", "kubectl-drainsafe") and (" serve" in joined or " run" in joined):
        deadline = _seconds(_flag(words, "--shutdown-timeout"))
        delay = _seconds(_flag(words, "--drain-delay"))
        admin = _flag(words, "--admin-port")
        return ServerShutdown(
            "drainsafe", DEFAULT_SHUTDOWN_TIMEOUT if deadline is None else deadline, True,
            _source(words, "--shutdown-timeout"),
            drain_delay=DEFAULT_DRAIN_DELAY if delay is None else delay,
            admin_port=int(admin) if admin is not None and admin.isdigit()
            else DEFAULT_ADMIN_PORT,
            drain_path=_flag(words, "--drain-path") or DEFAULT_DRAIN_PATH)
    if "vllm" in joined and ("serve" in words or "vllm.entrypoints" in joined):
        return _vllm(words)
    if _has(words, "tritonserver"):
        timeout = _flag(words, "--exit-timeout-secs")
        return ServerShutdown("triton", _seconds(timeout) if timeout else 30.0, True,
                              _source(words, "--exit-timeout-secs"))
    if "sglang.launch_server" in joined:
        return ServerShutdown("sglang", None, True, "default")
    if _has(words, "text-generation-launcher"):
        return ServerShutdown("tgi", 90.0, True, "default")
    if _has(words, "gunicorn"):
        timeout = _flag(words, "--graceful-timeout")
        return ServerShutdown("gunicorn", _seconds(timeout) if timeout else 30.0, True,
                              _source(words, "--graceful-timeout"))
    if _has(words, "hypercorn"):
        timeout = _flag(words, "--graceful-timeout")
        return ServerShutdown("hypercorn", _seconds(timeout) if timeout else 3.0, True,
                              _source(words, "--graceful-timeout"))
    if _has(words, "uvicorn") or "-m uvicorn" in joined:
        timeout = _flag(words, "--timeout-graceful-shutdown")
        return ServerShutdown("uvicorn", _seconds(timeout), True,
                              _source(words, "--timeout-graceful-shutdown"))
    return None


def _vllm(words: Sequence[str]) -> ServerShutdown:
    mode = _flag(words, "--shutdown-mode")
    if mode == "drain":
        timeout = _flag(words, "--shutdown-drain-timeout")
        deadline = _seconds(timeout) if timeout else 120.0
        return ServerShutdown("vllm", deadline, True, _source(words, "--shutdown-drain-timeout"))
    seconds = _seconds(_flag(words, "--shutdown-timeout"))
    if seconds:
        return ServerShutdown("vllm", seconds, True, _source(words, "--shutdown-timeout"))
    return ServerShutdown("vllm", 0.0, False, "no --shutdown-timeout")


def _source(words: Sequence[str], flag: str) -> str:
    value = _flag(words, flag)
    return f"{flag} {value}" if value is not None else "default"


# A shell that runs one simple command execs it (bash, dash >= 0.5.11, busybox ash), so the
# server gets SIGTERM. A script with several commands keeps the shell as PID 1, and a
# shell does not forward SIGTERM to its children: the server never hears it.
_SEPARATORS = re.compile(r"(;|&&|\|\||\||\n|&(?!&))")


def signal_forwarded(line: CommandLine | None) -> bool:
    """Whether SIGTERM sent to PID 1 reaches the server the command line starts."""
    if line is None or line.shell_script is None:
        return True
    script = "\n".join(
        part for part in line.shell_script.splitlines()
        if part.strip() and not part.strip().startswith("#")
    ).strip()
    if not _SEPARATORS.search(script):
        return True
    # Several statements: fine only when the last one execs the server.
    statements = [s.strip() for s in re.split(r";|&&|\|\||\n", script) if s.strip()]
    last = statements[-1] if statements else ""
    if "&" in last.replace("&&", "") or "|" in last:
        return False
    return last.startswith("exec ")


def shell_script_runs_server(line: CommandLine) -> bool:
    return line.shell_script is not None and identify(line) is not None


def uses_init_wrapper(line: CommandLine | None) -> bool:
    return line is not None and bool(line.argv) and _base(line.argv[0]) in SHELL_WRAPPERS
