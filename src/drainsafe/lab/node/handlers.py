"""Probe and lifecycle-hook actions: exec, httpGet, tcpSocket, sleep.

The kubelet runs the same action kinds for probes (pkg/kubelet/prober/prober.go) and for
lifecycle hooks (pkg/kubelet/lifecycle/handlers.go). Here they run against the pod's
loopback IP; exec runs the command as a local process with the container's environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

# The kubelet's probe client: no keep-alive (a probe must not hold a connection open on the
# server it checks), User-Agent kube-probe/<version> (pkg/probe/http/request.go).
PROBE_USER_AGENT = "kube-probe/1.33"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    message: str = ""
    # No answer within the timeout: the only failure a starved prober can cause itself.
    timed_out: bool = False


@dataclass(frozen=True)
class Target:
    """Where a container's actions go: its pod IP, named ports, environment and directory."""

    pod_ip: str
    named_ports: Mapping[str, int] = field(default_factory=dict)
    env: Mapping[str, str] | None = None
    cwd: Path | None = None


class ActionError(ValueError):
    """An action spec the lab cannot run (named port unknown, no action set...)."""


def named_ports(container: Mapping[str, Any]) -> dict[str, int]:
    return {str(p["name"]): int(p["containerPort"])
            for p in container.get("ports") or [] if p.get("name") and p.get("containerPort")}


def resolve_port(port: object, target: Target) -> int:
    """An IntOrString port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    text = str(port)
    if text.isdigit():
        return int(text)
    if text in target.named_ports:
        return target.named_ports[text]
    raise ActionError(f"port {text!r} is not a named port of the container")


def action_kind(spec: Mapping[str, Any]) -> str:
    for kind in ("exec", "httpGet", "tcpSocket", "sleep", "grpc"):
        if spec.get(kind) is not None:
            return kind
    raise ActionError("no action set (need one of exec, httpGet, tcpSocket, sleep)")


async def run_action(spec: Mapping[str, Any], target: Target, *, timeout: float | None,
                     client: httpx.AsyncClient | None = None) -> Outcome:
    """Run one action; timeout None means as long as it takes (lifecycle hooks)."""
    kind = action_kind(spec)
    if kind == "exec":
        return await run_exec(spec["exec"].get("command") or [], target, timeout=timeout)
    if kind == "httpGet":
        return await run_http_get(spec["httpGet"], target, timeout=timeout, client=client)
    if kind == "tcpSocket":
        return await run_tcp(spec["tcpSocket"], target, timeout=timeout)
    if kind == "sleep":
        await asyncio.sleep(float(spec["sleep"].get("seconds", 0)))
        return Outcome(True)
    raise ActionError(f"{kind} actions are not supported by the lab")


async def run_exec(command: Sequence[str], target: Target, *, timeout: float | None) -> Outcome:
    if not command:
        raise ActionError("exec action has an empty command")
    env = dict(os.environ)
    env.update(target.env or {})
    try:
        proc = await asyncio.create_subprocess_exec(
            *[str(c) for c in command], env=env, cwd=target.cwd,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        return Outcome(False, f"exec {command[0]!r}: {exc}")
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate()
    except TimeoutError:
        return Outcome(False, f"command timed out after {timeout:g}s", timed_out=True)
    finally:
        # Timed out or cancelled (the hook outlived the grace period): end the whole group.
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
    text = out.decode(errors="replace")[-1024:]
    return Outcome(proc.returncode == 0, text if proc.returncode == 0
                   else f"exit code {proc.returncode}: {text}")


async def run_http_get(spec: Mapping[str, Any], target: Target, *, timeout: float | None,
                       client: httpx.AsyncClient | None = None) -> Outcome:
    scheme = str(spec.get("scheme") or "HTTP").lower()
    host = str(spec.get("host") or target.pod_ip)
    port = resolve_port(spec.get("port"), target)
    path = str(spec.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    headers = {"User-Agent": PROBE_USER_AGENT, "Accept": "*/*", "Connection": "close"}
    for header in spec.get("httpHeaders") or []:
        headers[str(header["name"])] = str(header.get("value", ""))
    url = f"{scheme}://{host}:{port}{path}"
    own = client is None
    http = client or probe_client()
    try:
        response = await http.get(url, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        return Outcome(False, f"Get {url!r}: {type(exc).__name__}: {exc}",
                       timed_out=isinstance(exc, httpx.TimeoutException))
    finally:
        if own:
            await http.aclose()
    # pkg/probe/http/http.go: 200 <= code < 400 is success.
    if 200 <= response.status_code < 400:
        return Outcome(True, f"HTTP {response.status_code}")
    return Outcome(False, f"HTTP probe failed with statuscode: {response.status_code}")


async def run_tcp(spec: Mapping[str, Any], target: Target, *, timeout: float | None) -> Outcome:
    host = str(spec.get("host") or target.pod_ip)
    port = resolve_port(spec.get("port"), target)
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as exc:
        return Outcome(False, f"dial tcp {host}:{port}: {exc or 'timeout'}",
                       timed_out=isinstance(exc, TimeoutError))
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return Outcome(True)


def probe_client() -> httpx.AsyncClient:
    """One client per kubelet for httpGet probes; keep-alive off, as the kubelet has it."""
    return httpx.AsyncClient(verify=False, limits=httpx.Limits(max_keepalive_connections=0))
