"""What a container's command line and image say about its server's shutdown.

Reads the server's own flags (or knows its default) to answer: does it drain in-flight
requests on SIGTERM, for how long at most, and does SIGTERM reach it at all? Pure functions
of the container's `command`, `args` and `image`; reusable by tune and simulate.

A known server image supplies what the kubelet runs when `command` is not set: its
Dockerfile's ENTRYPOINT followed by `args` (kubernetes.io/docs/tasks/inject-data-application/
define-command-argument-container/#notes). The image's tag decides facts that changed
between releases. Facts, each read at the source at the release named:

- vLLM (`vllm/vllm-openai`): the image's ENTRYPOINT is the OpenAI server, `vllm serve`
  (vllm-project/vllm docker/Dockerfile, stage vllm-openai, commit dead20ba; earlier
  `python3 -m vllm.entrypoints.openai.api_server`, commit 0000977e). `--shutdown-timeout N`
  (int, default 0, help "0 = abort, >0 = wait") exists from v0.18.0: vllm/engine/arg_utils.py
  in the v0.18.0 and v0.32.0 wheels, absent from v0.17.1 (vLLM PR #36666). There is no
  `--shutdown-mode` or `--shutdown-drain-timeout` at v0.18.0 or v0.32.0 (argparse would stop
  the server on either).
- TGI (`ghcr.io/huggingface/text-generation-inference`): ENTRYPOINT /tgi-entrypoint.sh,
  which runs `exec text-generation-launcher $@` (huggingface/text-generation-inference
  Dockerfile and tgi-entrypoint.sh at v3.3.6). On SIGTERM the launcher stops the webserver
  and waits up to `--graceful-termination-timeout` (default 90, launcher/src/main.rs, added
  in #3126, first released in v3.2.2); before v3.2.2 the 90 s were fixed.
- SGLang (`lmsysorg/sglang`): the image sets no ENTRYPOINT or CMD (sgl-project/sglang
  docker/Dockerfile at SGL_VERSION 0.5.5), so command/args start the server
  (`python3 -m sglang.launch_server` or `sglang serve`). On SIGTERM it waits, polling every
  5 s, until no request is left, with no deadline of its own (sglang 0.5.23
  srt/managers/tokenizer_manager.py sigterm_watchdog).
- Triton (`nvcr.io/nvidia/tritonserver`): the image's ENTRYPOINT
  /opt/nvidia/nvidia_entrypoint.sh execs its arguments (triton-inference-server/server
  build.py and docker/cpu_only/nvidia_entrypoint.sh at v2.71.0), so args start
  `tritonserver`. `--exit-timeout-secs N`, default 30 (src/command_line_parser.cc and
  command_line_parser.h at v2.71.0).
- uvicorn: `--timeout-graceful-shutdown N`; unset waits for in-flight work without limit
  (encode/uvicorn uvicorn/config.py `timeout_graceful_shutdown: int | None = None` at
  0.55.0).
- gunicorn: `--graceful-timeout N`, default 30 s (benoitc/gunicorn gunicorn/config.py
  GracefulTimeout at 27.0.1; docs/source/signals.rst: TERM waits up to the graceful timeout).
- hypercorn: `--graceful-timeout N`, default 3 s (pgjones/hypercorn src/hypercorn/config.py
  `graceful_timeout: float = 3 * SECONDS` at 0.18.0).
- drainsafe serve/run: --drain-delay N, --shutdown-timeout N; probes and the drain trigger on
  the admin port --admin-port N, --drain-path P (defaults from drainsafe.server.config).

Health endpoints during the drain (what liveness-on-readiness rests on):

- vLLM: `/health` answers 503 only for a dead engine, and stays 200 while
  `--shutdown-timeout` drains (vllm 0.18.0 and 0.32.0 vllm/entrypoints/serve/instrumentator/
  health.py; measured on the real 0.32.0 server by the project's peer suite).
- SGLang: `/health` and `/health_generate` answer 503 once SIGTERM sets gracefully_exit
  (sglang 0.5.23 srt/entrypoints/http_server.py).
- Triton: `/v2/health/live` and `/v2/health/ready` answer UNAVAILABLE ("Server exiting") once
  Stop() sets SERVER_EXITING, for the whole `--exit-timeout-secs` wait
  (triton-inference-server/core src/server.cc InferenceServer::IsLive/IsReady, commit
  0040f6c8; the HTTP routes in server v2.71.0 src/http_server.cc).
- TGI: `/health` during the drain was not read at a release: no fact is claimed for it.
- drainsafe serve/run: `/readyz` is 503 from the drain's first instant and before the app
  (serve) or the child (run) is ready; `/livez` stays 200 (docs/server.md).

And the kubelet's: it stops liveness and startup probes once the pod is terminating, before
the preStop hook and SIGTERM (kubernetes/kubernetes pkg/kubelet/prober/worker.go doProbe,
"Pod deletion requested, setting probe result to success", PR #98571, released in 1.21 and
back-ported to 1.18-1.20 patch releases; kubelet.go SyncTerminatingPod
StopLivenessAndStartup, PR #110191). So on 1.21 and later no liveness probe restarts a
server while its pod drains, whatever its health endpoints answer.

Not relied on (not found at a release): vLLM `--shutdown-mode drain` and
`--shutdown-drain-timeout` (only proposed, in the closed vLLM PR #32420), and vLLM `/live`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

# drainsafe serve/run's own defaults (its cli module imports only argparse).
from drainsafe.server.config import (
    DEFAULT_ADMIN_PORT,
    DEFAULT_DRAIN_DELAY,
    DEFAULT_DRAIN_PATH,
    DEFAULT_READY_PATH,
    DEFAULT_SHUTDOWN_TIMEOUT,
)

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
SHELL_WRAPPERS = frozenset({"tini", "dumb-init", "catatonit", "s6-svscan", "gosu", "su-exec"})


@dataclass(frozen=True)
class ServerImage:
    """A known server's image: what it runs without `command`, and its release."""

    server: str
    entrypoint: tuple[str, ...]
    """The server command the image's ENTRYPOINT runs before `args`; () when the
    image runs its arguments (or nothing)."""
    release: tuple[int, ...] | None
    """The release its tag names (`v0.18.0`, `3.3.6`), None for `latest`, digests, etc."""


# Image name (registry included, docker.io/ and library/ removed) -> server, entrypoint.
# Sources in the module docstring.
IMAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "vllm/vllm-openai": ("vllm", ("vllm", "serve")),
    "ghcr.io/huggingface/text-generation-inference": ("tgi", ("text-generation-launcher",)),
    "lmsysorg/sglang": ("sglang", ()),
    "nvcr.io/nvidia/tritonserver": ("triton", ()),
}

# The first release with the server's own drain-deadline flag (sources above). A server
# known to be older has no such flag: argparse/clap would refuse it and the server would
# not start, so fixes turn to `drainsafe run` instead.
DEADLINE_FLAGS: dict[str, tuple[str, tuple[int, ...] | None]] = {
    "vllm": ("--shutdown-timeout", (0, 18, 0)),
    "tgi": ("--graceful-termination-timeout", (3, 2, 2)),
    "triton": ("--exit-timeout-secs", None),
    "uvicorn": ("--timeout-graceful-shutdown", None),
    "gunicorn": ("--graceful-timeout", None),
    "hypercorn": ("--graceful-timeout", None),
    "drainsafe": ("--shutdown-timeout", None),
}

# Endpoints a server fails on purpose once SIGTERM starts its drain (module docstring). A
# server missing here either keeps them up (vLLM's /health) or was not read (TGI).
DRAIN_FAILING_PATHS: dict[str, tuple[str, ...]] = {
    "sglang": ("/health", "/health_generate"),
    "triton": ("/v2/health/live", "/v2/health/ready"),
}

LIVENESS_STOPS_ON_TERMINATION = (1, 21)
"""The kubelet release from which liveness probes stop once a pod terminates (module
docstring): from here on, a health endpoint failing during the drain restarts nothing."""

_RELEASE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?![\d.])")


_IMAGE_CACHE: dict[str, ServerImage | None] = {}


def server_image(image: str) -> ServerImage | None:
    """The known server image `image` names, with the release its tag gives."""
    if not image:
        return None
    # A fleet runs few distinct images: each is parsed once.
    if image in _IMAGE_CACHE:
        return _IMAGE_CACHE[image]
    found = _server_image(image)
    if len(_IMAGE_CACHE) < 10_000:
        _IMAGE_CACHE[image] = found
    return found


def _server_image(image: str) -> ServerImage | None:
    name = image.split("@", 1)[0]
    tag = ""
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        name, tag = name[:colon], name[colon + 1:]
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        name = name.removeprefix(prefix)
    known = IMAGES.get(name.lower())
    if known is None:
        return None
    match = _RELEASE.match(tag)
    release = tuple(int(g) for g in match.groups() if g is not None) if match else None
    return ServerImage(known[0], known[1], release)


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
    ready_path: str | None = None
    """drainsafe serve/run: the readiness path on the admin port."""
    release: tuple[int, ...] | None = None
    """The server's release, when its image's tag names one."""

    @property
    def deadline_flag(self) -> str | None:
        """The flag that sets this server's drain deadline, None when its release has none
        (an unknown release is taken to be recent)."""
        found = DEADLINE_FLAGS.get(self.server)
        if found is None:
            return None
        flag, since = found
        if since is not None and self.release is not None and self.release < since:
            return None
        return flag

    @property
    def unreleased_flag(self) -> str | None:
        """The server's deadline flag when its release (from the image's tag) predates it:
        on the command line, the server stops at start on an unknown argument."""
        found = DEADLINE_FLAGS.get(self.server)
        if found is None or found[1] is None or self.release is None:
            return None
        return found[0] if self.release < found[1] else None

    @property
    def deadline_flag_since(self) -> str | None:
        """`vLLM >= 0.18.0` when the flag needs a release newer than some in use."""
        found = DEADLINE_FLAGS.get(self.server)
        if found is None or found[1] is None:
            return None
        return f"{self.server} >= {'.'.join(map(str, found[1]))}"


class CommandLine(NamedTuple):
    """A container's effective argv, and how a shell stands between it and the kubelet. A
    named tuple: immutable like a frozen dataclass at under half the cost (one per
    container)."""

    argv: tuple[str, ...]
    shell_script: str | None = None
    """The script when the container runs `sh -c SCRIPT`."""
    image: ServerImage | None = None
    """The known server image the container runs, if any."""
    entrypoint: int = 0
    """How many leading words of argv come from the image's ENTRYPOINT."""

    @property
    def text(self) -> str:
        return self.shell_script if self.shell_script is not None else shlex.join(self.argv)


def command_line(command: object, args: object, image: str = "") -> CommandLine | None:
    """command + args as the kubelet joins them, after a known image's ENTRYPOINT when
    `command` is unset; None when an unknown image's entrypoint is used."""
    cmd = _strings(command)
    arg = _strings(args)
    known = server_image(image)
    entrypoint = 0
    if not cmd and known is not None and known.entrypoint:
        cmd = list(known.entrypoint)
        entrypoint = len(cmd)
    if not cmd and not arg:
        return None
    argv = tuple(cmd + arg)
    if argv and _base(argv[0]) in SHELLS:
        for i, item in enumerate(argv[1:], start=1):
            if item.startswith("-") and "c" in item.lstrip("-") and not item.startswith("--"):
                if i + 1 < len(argv):
                    return CommandLine(argv, argv[i + 1], known, entrypoint)
                break
    return CommandLine(argv, None, known, entrypoint)


def _strings(value: object) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value if v is not None]
    if isinstance(value, str):
        return [value]
    return []


def _base(word: str) -> str:
    return word.rsplit("/", 1)[-1]


_SCRIPT_WORDS: dict[str, tuple[str, ...]] = {}


def _words(line: CommandLine) -> list[str]:
    if line.shell_script is None:
        return list(line.argv)
    # Many replicas of a chart share one script: shlex (pure Python) splits each once.
    words = _SCRIPT_WORDS.get(line.shell_script)
    if words is None:
        try:
            words = tuple(shlex.split(line.shell_script, comments=True))
        except ValueError:
            words = tuple(line.shell_script.split())
        if len(_SCRIPT_WORDS) < 10_000:
            _SCRIPT_WORDS[line.shell_script] = words
    return list(words)


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


def sets_flag(line: CommandLine | None, flag: str) -> bool:
    """Whether the command line passes `flag` (as `flag value` or `flag=value`)."""
    if line is None:
        return False
    # `flag value` asked of the list in C first: a generator left early (any() once it finds
    # the flag) is closed by raising GeneratorExit in it, which costs more than the search.
    words = _words(line)
    with_value = flag + "="
    return flag in words or any(w.startswith(with_value) for w in words)


_IDENTIFIED: dict[tuple[object, ...], ServerShutdown | None] = {}
_UNSEEN = object()


def identify(line: CommandLine | None) -> ServerShutdown | None:
    """The known server on the command line, with its shutdown behaviour."""
    if line is None:
        return None
    # Replicas of a chart share their command lines: each distinct one is read once. The
    # key is what _identify reads, as a plain tuple (a dataclass hashes in Python).
    image = line.image
    key = (line.argv, line.shell_script,
           None if image is None else (image.server, image.release))
    found = _IDENTIFIED.get(key, _UNSEEN)
    if found is _UNSEEN:
        found = _identify(line)
        if len(_IDENTIFIED) < 10_000:
            _IDENTIFIED[key] = found
    return found  # type: ignore[return-value]


def _identify(line: CommandLine) -> ServerShutdown | None:
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
            drain_path=_flag(words, "--drain-path") or DEFAULT_DRAIN_PATH,
            ready_path=_flag(words, "--ready-path") or DEFAULT_READY_PATH)
    release = line.image.release if line.image is not None else None
    if "vllm" in joined and ("serve" in words or "vllm.entrypoints" in joined):
        return _vllm(words, release if _image_is(line, "vllm") else None)
    if _has(words, "tritonserver"):
        timeout = _flag(words, "--exit-timeout-secs")
        return ServerShutdown("triton", _seconds(timeout) if timeout else 30.0, True,
                              _source(words, "--exit-timeout-secs"))
    if "sglang.launch_server" in joined or (_has(words, "sglang") and "serve" in words):
        return ServerShutdown("sglang", None, True, "default")
    if _has(words, "text-generation-launcher"):
        tgi = release if _image_is(line, "tgi") else None
        flag = "--graceful-termination-timeout"
        seconds = _seconds(_flag(words, flag))
        return ServerShutdown("tgi", 90.0 if seconds is None else seconds, True,
                              _source(words, flag), release=tgi)
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


def _image_is(line: CommandLine, server: str) -> bool:
    return line.image is not None and line.image.server == server


def _vllm(words: Sequence[str], release: tuple[int, ...] | None) -> ServerShutdown:
    # --shutdown-timeout (v0.18.0 on) is vLLM's only shutdown setting; 0, its default,
    # aborts every in-flight request (module docstring).
    seconds = _seconds(_flag(words, "--shutdown-timeout"))
    if seconds:
        return ServerShutdown("vllm", seconds, True, _source(words, "--shutdown-timeout"),
                              release=release)
    return ServerShutdown("vllm", 0.0, False, "no --shutdown-timeout", release=release)


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
