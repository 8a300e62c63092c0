"""The ingress path: a real nginx with an L7 keep-alive upstream per Service port.

nginx behaves as ingress-nginx does in front of pods: pooled keep-alive upstream
connections and nginx's default retry rules (see drainsafe.lab.netpath.nginx). Each Service port
gets its own listener on 127.0.0.1:<port chosen at run time>; an endpoint change is an
nginx reload, applied after this consumer's propagation delay.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from pathlib import Path

from drainsafe.lab.netpath.endpoints import Key, ServiceView
from drainsafe.lab.netpath.nginx import HttpUpstream, Nginx, render_config

PortKey = tuple[str, str, int]  # namespace, service, service port


class IngressPath:
    def __init__(self, workdir: Path, *, host: str = "127.0.0.1") -> None:
        self.workdir = workdir
        self.host = host
        self.ports: dict[PortKey, int] = {}
        self._nginx = Nginx(workdir)
        self._started = False
        self._config = ""
        self._lock = asyncio.Lock()

    @property
    def pid(self) -> int | None:
        return self._nginx.pid

    def url(self, namespace: str, name: str, port: int) -> str | None:
        listen = self.ports.get((namespace, name, port))
        return None if listen is None else f"http://{self.host}:{listen}"

    def config_for(self, views: Mapping[Key, ServiceView]) -> str:
        upstreams = []
        for (namespace, name), view in sorted(views.items()):
            for port in view.ports:
                if port.protocol.upper() != "TCP":
                    continue
                key = (namespace, name, port.port)
                if key not in self.ports:
                    self.ports[key] = _free_port(self.host)
                upstreams.append(HttpUpstream(
                    name=f"svc-{namespace}-{name}-{port.port}",
                    listen=f"{self.host}:{self.ports[key]}",
                    servers=port.backends))
        return render_config(http=upstreams, workdir=self.workdir)

    async def apply(self, views: Mapping[Key, ServiceView]) -> None:
        async with self._lock:
            config = self.config_for(views)
            if config == self._config:
                return
            if not self._started:
                await asyncio.to_thread(self._nginx.start, config)
                self._started = True
            else:
                before = _worker_pids(self._nginx.pid)
                await asyncio.to_thread(self._nginx.reload, config)
                await _old_workers_let_go(self._nginx.pid, before)
            self._config = config

    def stop_now(self) -> None:
        """Stop nginx from synchronous code (an atexit safety net)."""
        self._nginx.stop()
        self._started = False

    async def close(self) -> None:
        async with self._lock:
            await asyncio.to_thread(self._nginx.stop)
            self._started = False


def _worker_pids(master: int | None) -> set[int]:
    if master is None:
        return set()
    try:
        text = Path(f"/proc/{master}/task/{master}/children").read_text()
    except OSError:
        return set()
    return {int(pid) for pid in text.split()}


def _shutting_down(pid: int) -> bool:
    try:
        return b"shutting down" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # gone


async def _old_workers_let_go(master: int | None, before: set[int],
                              timeout: float = 10.0) -> None:
    """Until every worker of the old config has taken its QUIT and closed the listeners
    (it renames itself "shutting down"), so new connections meet the new config."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if all(_shutting_down(pid) for pid in before & _worker_pids(master)):
            return
        await asyncio.sleep(0.01)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
