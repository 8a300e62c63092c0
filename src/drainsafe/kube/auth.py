"""Exec credential plugins (client.authentication.k8s.io v1 and v1beta1) for httpx.

lightkube 1.0.1's ExecAuth (lightkube/config/client_adapter.py) rejects the v1 API
version, does not set KUBERNETES_EXEC_INFO and ignores `expirationTimestamp`, so a token
is only refreshed after a 401. An hour-long GPU drain outlives a 15-minute EKS token, and
a 401 on a non-idempotent eviction is exactly the failure to avoid, so this module fills
those gaps:

- KUBERNETES_EXEC_INFO carries an ExecCredential with spec.interactive=false (and
  spec.cluster when provideClusterInfo is set);
- the token is cached until its expirationTimestamp (minus a margin) and re-fetched
  before it expires; a 401 still forces one refresh and one retry;
- the plugin runs once at a time (concurrent requests share one refresh).

Protocol: https://kubernetes.io/docs/reference/access-authn-authz/authentication/
#client-go-credential-plugins (ExecCredential input/output, interactiveMode).
Client certificates in the plugin output are not supported (GKE and EKS plugins return
tokens); such output is refused with a clear error.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from collections.abc import AsyncGenerator, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2

from drainsafe.kube.objects import parse_time

SUPPORTED_VERSIONS = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
)
# Refresh this long before the token's stated expiry, so a request in flight never
# carries a token that expires on the way.
EXPIRY_MARGIN_SECONDS = 60.0


class ExecPluginError(RuntimeError):
    """The credential plugin is misconfigured, failed, or printed something unusable."""


@dataclass(frozen=True)
class ExecConfig:
    api_version: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    provide_cluster_info: bool = False
    interactive_mode: str = "IfAvailable"
    cluster: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_kubeconfig(
        cls, exec_section: Mapping[str, Any], cluster: Mapping[str, Any] | None = None
    ) -> ExecConfig:
        version = str(exec_section.get("apiVersion") or "")
        if version not in SUPPORTED_VERSIONS:
            raise ExecPluginError(
                f"users[].user.exec.apiVersion {version!r} is not supported; "
                f"use one of {', '.join(SUPPORTED_VERSIONS)}"
            )
        command = exec_section.get("command")
        if not command:
            raise ExecPluginError("users[].user.exec.command is missing")
        mode = str(exec_section.get("interactiveMode") or "IfAvailable")
        if mode == "Always":
            raise ExecPluginError(
                f"exec plugin {command!r} has interactiveMode: Always, but drainsafe runs "
                "non-interactively; use a plugin mode that does not need a terminal"
            )
        env = tuple(
            (str(e["name"]), str(e["value"])) for e in exec_section.get("env") or []
        )
        return cls(
            api_version=version,
            command=str(command),
            args=tuple(str(a) for a in exec_section.get("args") or []),
            env=env,
            provide_cluster_info=bool(exec_section.get("provideClusterInfo")),
            interactive_mode=mode,
            cluster=dict(cluster or {}),
        )

    def exec_info(self) -> str:
        spec: dict[str, Any] = {"interactive": False}
        if self.provide_cluster_info:
            spec["cluster"] = {
                k: v
                for k, v in {
                    "server": self.cluster.get("server"),
                    "certificate-authority-data": self.cluster.get(
                        "certificate-authority-data"
                    ),
                    "insecure-skip-tls-verify": self.cluster.get("insecure-skip-tls-verify"),
                    "config": self.cluster.get("extensions"),
                }.items()
                if v is not None
            }
        return json.dumps({"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec})

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        env["KUBERNETES_EXEC_INFO"] = self.exec_info()
        return env


@dataclass(frozen=True)
class Credential:
    token: str
    expires_at: float | None  # time.time() seconds; None: no stated expiry

    def fresh(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at - EXPIRY_MARGIN_SECONDS


def parse_credential(config: ExecConfig, stdout: bytes) -> Credential:
    """Read the plugin's ExecCredential output (pure)."""
    try:
        doc = json.loads(stdout)
    except ValueError as exc:
        raise ExecPluginError(
            f"exec plugin {config.command!r} printed invalid JSON: {exc}"
        ) from exc
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
        raise ExecPluginError(f"exec plugin {config.command!r} did not print an ExecCredential")
    if doc.get("apiVersion") != config.api_version:
        raise ExecPluginError(
            f"exec plugin {config.command!r} answered apiVersion {doc.get('apiVersion')!r}, "
            f"expected {config.api_version!r}"
        )
    status = doc.get("status") or {}
    token = status.get("token")
    if not token:
        if status.get("clientCertificateData"):
            raise ExecPluginError(
                f"exec plugin {config.command!r} returned a client certificate; "
                "drainsafe supports token credentials only"
            )
        raise ExecPluginError(f"exec plugin {config.command!r} returned no status.token")
    expires_at: float | None = None
    stamp = status.get("expirationTimestamp")
    if stamp:
        expires_at = parse_time(stamp)
        if expires_at is None:
            raise ExecPluginError(
                f"exec plugin {config.command!r}: bad expirationTimestamp {stamp!r}"
            )
    return Credential(token=str(token), expires_at=expires_at)


class ExecCredentialAuth(httpx2.Auth):
    """httpx Auth that runs the plugin when it has no fresh token, and once more on a 401."""

    def __init__(self, config: ExecConfig, *, clock: Any = time.time) -> None:
        self._config = config
        self._clock = clock
        self._credential: Credential | None = None
        self._async_lock: asyncio.Lock | None = None
        self._sync_lock = threading.Lock()
        self.runs = 0  # how often the plugin ran (tests and diagnostics)

    def _argv(self) -> list[str]:
        return [self._config.command, *self._config.args]

    def _fail(self, code: int, stderr: bytes) -> ExecPluginError:
        return ExecPluginError(
            f"exec plugin {self._config.command!r} exited {code}: "
            f"{stderr.decode('utf-8', 'replace').strip()[:500]}"
        )

    def _run_sync(self) -> Credential:
        try:
            proc = subprocess.run(
                self._argv(),
                env=self._config.environment(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ExecPluginError(f"exec plugin {self._config.command!r}: {exc}") from exc
        self.runs += 1
        if proc.returncode != 0:
            raise self._fail(proc.returncode, proc.stderr)
        return parse_credential(self._config, proc.stdout)

    async def _run_async(self) -> Credential:
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(),
                env=self._config.environment(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            async with asyncio.timeout(60):
                stdout, stderr = await proc.communicate()
        except (OSError, TimeoutError) as exc:
            raise ExecPluginError(f"exec plugin {self._config.command!r}: {exc}") from exc
        self.runs += 1
        if proc.returncode != 0:
            raise self._fail(proc.returncode or 0, stderr)
        return parse_credential(self._config, stdout)

    def _current(self) -> Credential | None:
        cred = self._credential
        return cred if cred is not None and cred.fresh(self._clock()) else None

    def sync_auth_flow(
        self, request: httpx2.Request
    ) -> Generator[httpx2.Request, httpx2.Response, None]:
        with self._sync_lock:
            cred = self._current() or self._run_sync()
            self._credential = cred
        request.headers["Authorization"] = f"Bearer {cred.token}"
        response = yield request
        if response.status_code == 401:
            with self._sync_lock:
                if self._credential is cred:
                    self._credential = self._run_sync()
                cred = self._credential
            request.headers["Authorization"] = f"Bearer {cred.token}"
            yield request

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self._async_lock is None:
            self._async_lock = asyncio.Lock()
        async with self._async_lock:
            cred = self._current() or await self._run_async()
            self._credential = cred
        request.headers["Authorization"] = f"Bearer {cred.token}"
        response = yield request
        if response.status_code == 401:
            async with self._async_lock:
                if self._credential is cred:
                    self._credential = await self._run_async()
                cred = self._credential
            request.headers["Authorization"] = f"Bearer {cred.token}"
            yield request
