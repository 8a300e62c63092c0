"""A container's drain delay: how long it keeps serving after termination starts.

The preStop hook runs before SIGTERM and SIGTERM waits for it (kubernetes.io/docs/concepts/
containers/container-lifecycle-hooks/), so a sleep there is the drain delay. drainsafe
serve/run can provide the same delay in-process (--drain-delay); a preStop httpGet of its
drain trigger on its admin port (drainsafe.server.admin) answers when that delay is over,
so it is the same drain delay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from drainsafe.check.findings import Path
from drainsafe.check.model import Container, mapping, number, sequence
from drainsafe.check.servers import SHELLS, ServerShutdown

_SLEEP = re.compile(r"(?:^|[\s;&|(])(?:/bin/|/usr/bin/)?sleep\s+(\d+(?:\.\d+)?)s?(?=$|[\s;&|)])")


@dataclass(slots=True)
class DrainDelay:
    """Not changed once made. A class with slots (not a frozen dataclass, whose fields are
    set through object.__setattr__, nor a named tuple, whose fields CPython 3.11 reads
    through a descriptor call): one per container, read by most rules."""

    seconds: float | None
    """None when a hook exists but its duration cannot be read (httpGet, a script)."""
    kind: str
    """none, sleep-action, exec-sleep, exec, httpGet, drainsafe."""
    path: Path
    command: tuple[str, ...] = ()
    present: bool = field(init=False)
    known: float = field(init=False)
    """seconds, 0 when unknown."""

    def __post_init__(self) -> None:
        self.present = self.kind != "none"
        self.known = self.seconds or 0.0


def drain_delay(container: Container, server: ServerShutdown | None = None) -> DrainDelay:
    # Several rules ask for every container; its spec does not change, so the hook is read
    # once. The server only matters when there is no hook: its own drain delay then counts.
    hook: DrainDelay | None = container.__dict__.get("_drain_delay")
    if hook is None:
        hook = container.__dict__["_drain_delay"] = _hook_delay(container)
    if hook.kind == "none" and server is not None and server.drain_delay:
        return DrainDelay(server.drain_delay, "drainsafe", (*container.path, "args"))
    if hook.kind == "httpGet" and server is not None and server.drain_delay is not None:
        http = mapping(mapping(mapping(container.spec.get("lifecycle")).get("preStop"))
                       .get("httpGet"))
        if http.get("path", "/").split("?")[0] == server.drain_path \
                and on_admin_port(container, server, http.get("port")):
            return DrainDelay(server.drain_delay, "drainsafe", hook.path)
    return hook


def on_admin_port(container: Container, server: ServerShutdown | None, port: object) -> bool:
    """Whether a probe's or hook's `port` is drainsafe serve/run's admin port: its number,
    or a named container port (drainsafe-admin) that carries it."""
    if server is None or server.admin_port is None:
        return False
    if isinstance(port, str) and not port.isdigit():
        for item in sequence(container.spec.get("ports")):
            entry = mapping(item)
            if entry.get("name") == port:
                return number(entry.get("containerPort")) == server.admin_port
        return False
    return number(port) == server.admin_port


def _hook_delay(container: Container) -> DrainDelay:
    pre_stop = mapping(mapping(container.spec.get("lifecycle")).get("preStop"))
    path = (*container.path, "lifecycle", "preStop")
    if "sleep" in pre_stop:
        seconds = number(mapping(pre_stop.get("sleep")).get("seconds"))
        return DrainDelay(seconds, "sleep-action", (*path, "sleep", "seconds"))
    if "exec" in pre_stop:
        command = tuple(map(str, sequence(mapping(pre_stop.get("exec")).get("command"))))
        seconds = exec_sleep_seconds(command)
        kind = "exec-sleep" if seconds is not None else "exec"
        return DrainDelay(seconds, kind, (*path, "exec", "command"), command)
    if "httpGet" in pre_stop or "tcpSocket" in pre_stop:
        return DrainDelay(None, "httpGet", path)
    return DrainDelay(None, "none", path)


def exec_sleep_seconds(command: tuple[str, ...]) -> float | None:
    """Total seconds an exec hook sleeps: `sleep N`, or `sh -c '... sleep N ...'`."""
    if not command:
        return None
    first = command[0].rsplit("/", 1)[-1]
    if first == "sleep" and len(command) > 1:
        return number(command[1])
    if first in SHELLS:
        script = " ".join(command[1:])
        sleeps = [float(m) for m in _SLEEP.findall(script)]
        return sum(sleeps) if sleeps else None
    return None


def needs_shell(command: tuple[str, ...]) -> bool:
    """Whether an exec hook needs a shell or coreutils in the image."""
    if not command:
        return False
    first = command[0].rsplit("/", 1)[-1]
    return first in SHELLS or first == "sleep"

