"""The lab's control plane: API server (HTTPS + bearer token) and controllers on one loop.

This is the interface the node side (kubelets, lab orchestration) uses:

    cp = ControlPlane(state_dir)
    await cp.start()          # serves https://127.0.0.1:PORT; controllers running
    cp.write_kubeconfig(path) # for kubectl, lightkube and the kubelets
    ...
    await cp.stop()

Kubelets are ordinary API clients: they register nodes (POST /api/v1/nodes), write node
and pod status, and finish terminating pods with DELETE gracePeriodSeconds=0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import secrets
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn
import yaml

from drainsafe.lab.apiserver import admission
from drainsafe.lab.apiserver.crd import CRDStatusController
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.server import ApiServer
from drainsafe.lab.apiserver.store import DEFAULT_HISTORY, Store
from drainsafe.lab.apiserver.tls import make_tls
from drainsafe.lab.controllers import Controller
from drainsafe.lab.controllers.daemonset import DaemonSetController
from drainsafe.lab.controllers.deployment import DeploymentController
from drainsafe.lab.controllers.disruption import DisruptionController
from drainsafe.lab.controllers.endpoints import EndpointSliceController
from drainsafe.lab.controllers.hpa import HorizontalPodAutoscalerController
from drainsafe.lab.controllers.leaderworkerset import LeaderWorkerSetController
from drainsafe.lab.controllers.nodelifecycle import NodeLifecycleController, NodeMonitor
from drainsafe.lab.controllers.replicaset import ReplicaSetController
from drainsafe.lab.controllers.scheduler import Scheduler
from drainsafe.lab.controllers.statefulset import StatefulSetController
from drainsafe.lab.controllers.tainteviction import TaintEvictionController
from drainsafe.lab.features import DEFAULT as DEFAULT_GATES
from drainsafe.lab.features import FeatureGates

log = logging.getLogger(__name__)
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class ControlPlane:
    def __init__(self, state_dir: pathlib.Path, *, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, history: int = DEFAULT_HISTORY,
                 bookmark_seconds: float = 5.0, cluster_ip_start: int = 1,
                 feature_gates: FeatureGates = DEFAULT_GATES,
                 node_monitor: NodeMonitor | None = None,
                 toleration_seconds: int = admission.DEFAULT_TOLERATION_SECONDS) -> None:
        """history: watch events kept per resource (older versions get 410 Expired);
        bookmark_seconds: idle time before a BOOKMARK on watches that allow them;
        cluster_ip_start: first ClusterIP tried, as an offset into 127.96.0.0/16 (labs
        sharing a machine use different offsets so their loopback ClusterIPs differ);
        feature_gates: version-dependent behaviour (drainsafe.lab.features);
        node_monitor: the node lifecycle controller's grace periods (kube-controller-manager's
        --node-monitor-grace-period, --node-startup-grace-period);
        toleration_seconds: kube-apiserver's --default-not-ready-toleration-seconds and
        --default-unreachable-toleration-seconds (one value for both)."""
        self.state_dir = pathlib.Path(state_dir)
        self.host = host
        self.port = port
        self.token: str = token or secrets.token_urlsafe(24)
        self.store = Store(history=history)
        self.cluster_ips = admission.install(self.store, cluster_ip_start=cluster_ip_start,
                                             gates=feature_gates,
                                             toleration_seconds=toleration_seconds)
        self.api = ApiServer(self.store, token=self.token, state_dir=self.state_dir,
                             bookmark_seconds=bookmark_seconds)
        self.controllers: list[Controller] = [
            NodeLifecycleController(self.store, node_monitor),
            TaintEvictionController(self.store),
            Scheduler(self.store),
            ReplicaSetController(self.store),
            DeploymentController(self.store),
            DaemonSetController(self.store),
            StatefulSetController(self.store, gates=feature_gates),
            LeaderWorkerSetController(self.store),
            EndpointSliceController(self.store),
            DisruptionController(self.store),
            HorizontalPodAutoscalerController(self.store),
            CRDStatusController(self.store),
        ]
        self.ca_path = self.state_dir / "pki" / "ca.crt"
        self.url = ""
        self._server: uvicorn.Server | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._socket: socket.socket | None = None
        for ns in SYSTEM_NAMESPACES:
            self.store.create(BY_KEY["namespaces"], {"metadata": {"name": ns}})

    async def start(self) -> None:
        """Start the HTTPS API server and the controllers; return once it serves."""
        tls = make_tls(self.state_dir / "pki", self.host)
        self.ca_path = tls.ca_cert
        # IPPROTO_TCP, not 0: asyncio disables Nagle's algorithm (TCP_NODELAY) only on a
        # connection whose socket says so (base_events._set_nodelay), and an accepted one
        # takes the listening socket's proto. With Nagle on, a response written as headers
        # then body waited for the client's delayed ACK: ~40 ms per request on a kept-alive
        # connection (each kubectl call, each informer list, each status write).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(512)
        sock.setblocking(False)
        self._socket = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.api.app, ssl_certfile=str(tls.server_cert), ssl_keyfile=str(tls.server_key),
            log_level="warning", access_log=False, lifespan="off",
            timeout_graceful_shutdown=2, timeout_keep_alive=30,
        )
        self._server = uvicorn.Server(config)
        for c in self.controllers:
            self._tasks.append(asyncio.create_task(c.run(), name=f"lab-{c.name}"))
        # _serve, not serve: serve() captures SIGINT/SIGTERM for the whole process, and
        # the lab runs inside other programs (tests, `drainsafe lab up`) that own signals.
        serve = asyncio.create_task(self._server._serve(sockets=[sock]), name="lab-apiserver")
        self._tasks.append(serve)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not self._server.started:
            if serve.done():
                serve.result()
                raise RuntimeError("the lab API server exited while starting")
            if loop.time() > deadline:
                raise RuntimeError("the lab API server did not start within 30 s")
            await asyncio.sleep(0.01)
        self.url = f"https://{self.host}:{self.port}"

    async def stop(self) -> None:
        self.store.close_watches()
        if self._server is not None:
            # A connection idle between requests is dropped, not closed: a TLS close sends
            # close_notify and waits for the client's, which a client that has just closed
            # its socket (not read here yet) or sits idle in a pool never sends, and every
            # such stop waited out uvicorn's graceful shutdown (2 s).
            for connection in list(self._server.server_state.connections):
                if not hasattr(connection, "cycle"):  # a WebSocket: left to uvicorn
                    continue
                if connection.cycle is None or connection.cycle.response_complete:
                    connection.transport.abort()
            self._server.should_exit = True
        for t in self._tasks:
            if t.get_name() != "lab-apiserver":
                t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(10):
                    await t
        self._tasks.clear()
        await self.api.webhooks.aclose()
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    @contextlib.contextmanager
    def holding(self, name: str) -> Iterator[Controller]:
        """Hold the controller called `name` (e.g. "deployment") for the block: as a
        kube-controller-manager down or between leaders (drainsafe.lab.controllers)."""
        [controller] = [c for c in self.controllers if c.name == name]
        controller.hold()
        try:
            yield controller
        finally:
            controller.release()

    async def __aenter__(self) -> ControlPlane:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def kubeconfig(self, *, context: str = "drainsafe-lab") -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {
                "server": self.url, "certificate-authority": str(self.ca_path.resolve())}}],
            "users": [{"name": f"{context}-admin", "user": {"token": self.token}}],
            "contexts": [{"name": context, "context": {
                "cluster": context, "user": f"{context}-admin", "namespace": "default"}}],
            "current-context": context,
            "preferences": {},
        }

    def write_kubeconfig(self, path: pathlib.Path, *, context: str = "drainsafe-lab") -> None:
        if not self.url:
            raise RuntimeError("start() the control plane before writing its kubeconfig")
        from drainsafe.lab.secretfile import write_secret

        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Its token runs any command as this user: a new 0600 file, never through a link.
        write_secret(path, yaml.safe_dump(self.kubeconfig(context=context),
                                          sort_keys=False).encode())
