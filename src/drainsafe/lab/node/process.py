"""Containers as local processes: environment, $(VAR) expansion, start, signals, exit.

The lab has no images and no container runtime. A container's `command` + `args` run as a
local process in its own session (so its process group is the "container": SIGTERM and
SIGKILL go to the whole group, and children die with it, as they would with the container's
PID namespace). Its working directory and its output (<container>.log) are in the pod's
directory (drainsafe.lab.node.volumes.pod_dir).

Containers of pods annotated `lab.drainsafe.io/virtual: "true"` run no process: they are
ready after `lab.drainsafe.io/startup-seconds` and exit `lab.drainsafe.io/exit-after-sigterm-
seconds` after SIGTERM (at once on SIGKILL), so that clusters of 1,000 pods are cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from drainsafe.lifetime import own_session_dying_with_parent

VIRTUAL_ANNOTATION = "lab.drainsafe.io/virtual"
STARTUP_SECONDS_ANNOTATION = "lab.drainsafe.io/startup-seconds"
EXIT_AFTER_SIGTERM_ANNOTATION = "lab.drainsafe.io/exit-after-sigterm-seconds"

# Exit status a container runtime reports for a process killed by a signal: 128 + signo.
SIGNAL_EXIT_BASE = 128


class ContainerConfigError(ValueError):
    """A container spec the lab cannot run (the kubelet's CreateContainerConfigError)."""


# --- $(VAR) expansion ----------------------------------------------------------------------
# Kubernetes semantics (kubernetes/kubernetes third_party/forked/golang/expansion/expand.go,
# used by pkg/kubelet/container/helpers.go ExpandContainerCommandAndArgs):
#   $(NAME) -> value when NAME is defined, else left as "$(NAME)";
#   $$ -> "$" (escape); "$" followed by anything else, or at the end, stays as it is;
#   an unclosed "$(" stays as it is.

def expand(text: str, env: Mapping[str, str]) -> str:
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2:close]
                out.append(env.get(name, f"$({name})"))
                i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


# --- environment ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PodContext:
    """What the downward API can tell a container about its pod."""

    name: str
    namespace: str
    uid: str
    node_name: str
    pod_ip: str
    host_ip: str
    service_account: str = "default"
    labels: Mapping[str, str] | None = None
    annotations: Mapping[str, str] | None = None

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any], *, pod_ip: str, host_ip: str) -> PodContext:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        return cls(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "default")),
            uid=str(meta.get("uid", "")),
            node_name=str(spec.get("nodeName", "")),
            pod_ip=pod_ip,
            host_ip=host_ip,
            service_account=str(spec.get("serviceAccountName") or "default"),
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
        )


def field_ref_value(path: str, ctx: PodContext) -> str:
    """A downward-API fieldRef value (pkg/api/v1/pod/util.go ConvertDownwardAPIFieldLabel)."""
    simple = {
        "metadata.name": ctx.name,
        "metadata.namespace": ctx.namespace,
        "metadata.uid": ctx.uid,
        "spec.nodeName": ctx.node_name,
        "spec.serviceAccountName": ctx.service_account,
        "status.podIP": ctx.pod_ip,
        "status.podIPs": ctx.pod_ip,
        "status.hostIP": ctx.host_ip,
        "status.hostIPs": ctx.host_ip,
    }
    if path in simple:
        return simple[path]
    maps = (("metadata.labels", ctx.labels), ("metadata.annotations", ctx.annotations))
    for prefix, values in maps:
        if path.startswith(prefix + "['") and path.endswith("']"):
            return (values or {}).get(path[len(prefix) + 2:-2], "")
    raise ContainerConfigError(f"env fieldRef.fieldPath {path!r} is not supported by the lab")


def container_env(container: Mapping[str, Any], ctx: PodContext) -> dict[str, str]:
    """The container's env, in order, each value expanded against the ones before it.

    Only env entries are returned (not the host environment). Values may be literal,
    $(VAR)-expanded, or downward-API fieldRefs; configMap/secret references need the API
    and are refused with a clear error.
    """
    name_of = container.get("name", "?")
    env: dict[str, str] = {}
    for i, item in enumerate(container.get("env") or []):
        key = item.get("name")
        if not key:
            raise ContainerConfigError(f"container {name_of!r}: env[{i}] has no name")
        if "valueFrom" in item and item["valueFrom"] is not None:
            source = item["valueFrom"]
            if "fieldRef" in source:
                env[key] = field_ref_value(str(source["fieldRef"].get("fieldPath", "")), ctx)
            else:
                kind = next(iter(source), "?")
                raise ContainerConfigError(
                    f"container {name_of!r}: env[{i}] ({key}) valueFrom.{kind} is not supported "
                    "by the lab (fieldRef is)")
        else:
            env[key] = expand(str(item.get("value") or ""), env)
    return env


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """command + args with $(VAR) expanded, as the kubelet passes them to the runtime."""
    command = [expand(str(c), env) for c in container.get("command") or []]
    args = [expand(str(a), env) for a in container.get("args") or []]
    if not command:
        raise ContainerConfigError(
            f"container {container.get('name', '?')!r} has no command: the lab runs commands as "
            "local processes (there are no images); set command, or mark the pod virtual with "
            f"the annotation {VIRTUAL_ANNOTATION}: \"true\"")
    return command + args


def process_environment(env: Mapping[str, str], ctx: PodContext, *,
                        kubeconfig: Path | None = None) -> dict[str, str]:
    """The full environment of the local process: the host's (standing in for the image's),
    HOSTNAME as in a pod, KUBECONFIG set to the lab's kubeconfig (standing in for the
    service-account credentials a pod gets mounted; never the host's own cluster), then the
    container's env on top."""
    full = dict(os.environ)
    full["HOSTNAME"] = ctx.name
    if kubeconfig is not None:
        full["KUBECONFIG"] = str(kubeconfig)
    full.update(env)
    return full


# --- running containers --------------------------------------------------------------------

class Container(Protocol):
    """What the kubelet needs from a running container (a process or a virtual one)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def returncode(self) -> int | None: ...

    @property
    def started_at(self) -> float: ...

    def send(self, sig: int) -> None: ...

    async def wait(self) -> int: ...


class ProcessContainer:
    """A container as a local process group."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path,
                 log_path: Path) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_path
        self._proc: asyncio.subprocess.Process | None = None
        self._started_at = 0.0
        self._exit: asyncio.Task[int] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        if self._proc is None or self._proc.returncode is None:
            return None
        return _exit_status(self._proc.returncode)

    @property
    def started_at(self) -> float:
        return self._started_at

    async def start(self) -> None:
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    *self.argv, env=self.env, cwd=self.cwd, stdin=asyncio.subprocess.DEVNULL,
                    stdout=log, stderr=asyncio.subprocess.STDOUT,
                    # Own session: the process group is the container, for signals and
                    # cleanup; and a lab that is killed takes its containers with it.
                    preexec_fn=own_session_dying_with_parent)
            except OSError as exc:
                raise ContainerConfigError(f"cannot run {self.argv[0]!r}: {exc}") from exc
        self._started_at = time.monotonic()
        self._exit = asyncio.ensure_future(self._reap())

    async def _reap(self) -> int:
        assert self._proc is not None
        code = await self._proc.wait()
        # When a container's main process ends, the runtime kills what is left in it.
        _killpg(self._proc.pid, signal.SIGKILL)
        return _exit_status(code)

    def send(self, sig: int) -> None:
        if self._proc is not None and self._proc.returncode is None:
            _killpg(self._proc.pid, sig)

    async def wait(self) -> int:
        assert self._exit is not None, "container not started"
        return await asyncio.shield(self._exit)


class VirtualContainer:
    """A container without a process: ready after a start-up time, exits after SIGTERM."""

    def __init__(self, *, exit_after_sigterm: float) -> None:
        self.exit_after_sigterm = exit_after_sigterm
        self._started_at = time.monotonic()
        self._returncode: int | None = None
        self._done = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def pid(self) -> int | None:
        return None

    @property
    def returncode(self) -> int | None:
        return self._returncode

    @property
    def started_at(self) -> float:
        return self._started_at

    def _finish(self, code: int) -> None:
        if self._returncode is None:
            self._returncode = code
            self._done.set()
        if self._timer is not None:
            self._timer.cancel()

    def send(self, sig: int) -> None:
        if self._returncode is not None:
            return
        if sig == signal.SIGKILL:
            self._finish(SIGNAL_EXIT_BASE + signal.SIGKILL)
        elif sig == signal.SIGTERM and self._timer is None:
            # A well-behaved server exits 0 after draining.
            self._timer = asyncio.get_running_loop().call_later(
                self.exit_after_sigterm, self._finish, 0)

    async def wait(self) -> int:
        await self._done.wait()
        assert self._returncode is not None
        return self._returncode


@dataclass(frozen=True)
class VirtualSettings:
    startup_seconds: float
    exit_after_sigterm_seconds: float


def virtual_settings(pod: Mapping[str, Any]) -> VirtualSettings | None:
    """The pod's virtual-container settings, or None when its containers are real processes."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if str(annotations.get(VIRTUAL_ANNOTATION, "")).lower() != "true":
        return None

    def seconds(key: str, default: float) -> float:
        raw = annotations.get(key)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ContainerConfigError(f"annotation {key}: {raw!r} is not a number of seconds"
                                       ) from None
        if value < 0:
            raise ContainerConfigError(f"annotation {key}: {raw!r} must be >= 0")
        return value

    return VirtualSettings(seconds(STARTUP_SECONDS_ANNOTATION, 0.0),
                           seconds(EXIT_AFTER_SIGTERM_ANNOTATION, 0.0))


def _exit_status(code: int) -> int:
    """asyncio reports death by signal as -signo; a runtime reports 128 + signo."""
    return SIGNAL_EXIT_BASE - code if code < 0 else code


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
