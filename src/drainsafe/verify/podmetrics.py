"""A terminating pod's drainsafe figures, read through the API server's pod proxy.

`GET /api/v1/namespaces/NS/pods/NAME:PORT/proxy/metrics` (kube-apiserver
pkg/registry/core/pod/rest/subresources.go ProxyREST; the port must be a number: a pod's
named ports are not resolved by the API server, pkg/registry/core/pod/strategy.go
ResourceLocation), so no log capture is needed: the figures are in the record before the
pod and its logs are gone. The port is the container port named `drainsafe-admin` when the
pod declares one (drainsafe serve/run's admin port), else the port the user names.

Scrapes repeat every SCRAPE_INTERVAL_SECONDS while the pod terminates; the last one that
answered is kept (drainsafe_* lines only).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

from drainsafe.kube.client import KubeClient, api_path
from drainsafe.kube.errors import KubeError
from drainsafe.server.config import ADMIN_PORT_NAME, DEFAULT_METRICS_PATH
from drainsafe.verify.record import PodMetrics

SCRAPE_INTERVAL_SECONDS = 0.25
SCRAPE_TIMEOUT_SECONDS = 2.0


def metrics_port(pod: Mapping[str, Any], fallback: str | None) -> int | None:
    """The port to read: `drainsafe-admin` if declared, else `fallback` (a number, or the
    name of a declared port); None when neither gives one."""
    declared: dict[str, int] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") and isinstance(port.get("containerPort"), int):
                declared.setdefault(str(port["name"]), int(port["containerPort"]))
    if ADMIN_PORT_NAME in declared:
        return declared[ADMIN_PORT_NAME]
    if fallback is None:
        return None
    if fallback.isdigit():
        return int(fallback)
    return declared.get(fallback)


def drainsafe_lines(text: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if "drainsafe_" in line)


class PodMetricsReader:
    """Starts reading a pod's metrics when it is seen terminating; stops when it is gone."""

    def __init__(self, client: KubeClient, namespace: str, port: str | None,
                 loop_zero: float) -> None:
        self._client = client
        self._namespace = namespace
        self._port = port
        self._loop_zero = loop_zero
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.read: dict[str, PodMetrics] = {}

    def pod_seen(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        name = str(meta.get("name", ""))
        if not meta.get("deletionTimestamp") or name in self._tasks:
            return
        port = metrics_port(pod, self._port)
        if port is None:
            return
        self._tasks[name] = asyncio.ensure_future(self._scrape(name, port))

    def pod_gone(self, name: str) -> None:
        task = self._tasks.get(name)
        if task is not None:
            task.cancel()

    async def _scrape(self, name: str, port: int) -> None:
        path = (api_path("v1", "pods", namespace=self._namespace, name=f"{name}:{port}")
                + f"/proxy{DEFAULT_METRICS_PATH}")
        scrapes = 0
        while True:
            with contextlib.suppress(KubeError, TimeoutError):
                async with asyncio.timeout(SCRAPE_TIMEOUT_SECONDS):
                    async with self._client.stream(path, {}) as lines:
                        text = "\n".join([line async for line in lines])
                scrapes += 1
                t = round(time.monotonic() - self._loop_zero, 3)
                self.read[name] = PodMetrics(name, t, port, drainsafe_lines(text), scrapes)
            await asyncio.sleep(SCRAPE_INTERVAL_SECONDS)

    async def stop(self) -> list[PodMetrics]:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        return list(self.read.values())
