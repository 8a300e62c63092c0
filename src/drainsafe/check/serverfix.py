"""Fix values that change a container's command line or probes, whole and applicable.

A strategic merge patch (and kustomize) replaces a list of strings whole, so a fix that
adds a flag shows the container's whole `args` (or `command`) with the flag in it; a probe
fix names the handler it replaces as null, since probe handlers are exclusive
(kubernetes/apimachinery strategicpatch: null deletes a key; kubernetes/kubernetes
pkg/apis/core/validation: "may not specify more than 1 handler type").

Where the server has no flag for what is needed (a release before its drain-deadline
flag), the fix runs it under `drainsafe run --mode signal`, which holds the child's SIGTERM
until nothing is in flight; its endpoints are on the admin port.
"""

from __future__ import annotations

import re
from typing import Any

from drainsafe.check.model import Container, mapping, sequence
from drainsafe.check.servers import CommandLine, ServerShutdown

# drainsafe run's admin port: /readyz, /livez, /drainsafe/drain, /metrics.
from drainsafe.server.config import ADMIN_PORT_NAME, DEFAULT_READY_PATH
from drainsafe.server.config import DEFAULT_ADMIN_PORT as ADMIN_PORT

PROBE_HANDLERS = ("httpGet", "tcpSocket", "exec", "grpc")
HOOK_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")
WRAPPED_PRESETS = frozenset({"vllm", "tgi", "triton", "sglang"})


def _without_flag(words: list[str], flag: str) -> list[str]:
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word == flag:
            skip = True
            continue
        if word.startswith(flag + "="):
            continue
        out.append(word)
    return out


def with_flag(c: Container, line: CommandLine | None, flag: str, value: str
              ) -> dict[str, Any]:
    """The container fields that set `flag` to `value`, each list shown whole."""
    item = f"{flag}={value}"
    command = [str(w) for w in sequence(c.spec.get("command"))]
    args = [str(w) for w in sequence(c.spec.get("args"))]
    if line is not None and line.shell_script is not None:
        field = "args" if line.shell_script in args else "command"
        words = args if field == "args" else command
        script = line.shell_script
        pattern = re.compile(rf"{re.escape(flag)}(?:=|\s+)\S+")
        new = (pattern.sub(item, script) if pattern.search(script)
               else script.rstrip() + " " + item)
        return {field: [new if w == script else w for w in words]}
    if any(w == flag or w.startswith(flag + "=") for w in command):
        return {"command": [*_without_flag(command, flag), item]}
    if args or not command:
        return {"args": [*_without_flag(args, flag), item]}
    return {"command": [*command, item]}


def probe(existing: object, handler: str, spec: dict[str, Any],
          handlers: tuple[str, ...] = PROBE_HANDLERS) -> dict[str, Any]:
    """A probe (or hook) patch using `handler`, deleting the handler it had before."""
    had = mapping(existing)
    patch: dict[str, Any] = {h: None for h in handlers if h != handler and h in had}
    patch[handler] = spec
    return patch


def pre_stop(c: Container, handler: str, spec: dict[str, Any]) -> dict[str, Any]:
    """`lifecycle` fields that make the preStop hook `handler`."""
    existing = mapping(mapping(c.spec.get("lifecycle")).get("preStop"))
    return {"preStop": probe(existing, handler, spec, HOOK_HANDLERS)}


def wrapped(c: Container, line: CommandLine | None, server: ServerShutdown, *,
            drain_delay: int, deadline: int) -> dict[str, Any]:
    """Container fields that run the server under `drainsafe run --mode signal`."""
    if c.spec.get("command"):
        child = [str(w) for w in sequence(c.spec.get("command"))]
    else:
        child = list(line.argv[:line.entrypoint]) if line is not None else []
    # A deadline flag the release lacks stops the server at start: out of both lists.
    unknown = server.unreleased_flag
    args = [str(w) for w in sequence(c.spec.get("args"))]
    if unknown is not None:
        child = _without_flag(child, unknown)
    preset = ["--preset", server.server] if server.server in WRAPPED_PRESETS else []
    fields: dict[str, Any] = {
        "command": ["drainsafe", "run", "--mode", "signal", *preset,
                    "--drain-delay", str(drain_delay), "--shutdown-timeout", str(deadline),
                    "--", *child],
        "ports": [{"name": ADMIN_PORT_NAME, "containerPort": ADMIN_PORT}],
        "readinessProbe": probe(c.spec.get("readinessProbe"), "httpGet",
                                {"path": DEFAULT_READY_PATH, "port": ADMIN_PORT_NAME}),
    }
    if unknown is not None and _without_flag(args, unknown) != args:
        fields["args"] = _without_flag(args, unknown)
    return fields


WRAPPER_NOTE = "# drainsafe must be installed in the image (pip install drainsafe)"
