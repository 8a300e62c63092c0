"""Test-only scaffolding for control-plane tests: a tiny node agent that plays kubelet.

It is NOT the lab's kubelet (that is the node side's lab/kubelet*). It talks to the
control plane only through the Kubernetes API with lightkube, exactly like a kubelet:
registers nodes (POST /api/v1/nodes, Ready condition, capacity incl. nvidia.com/gpu),
renews each node's Lease kube-node-lease/<node> as the lab kubelet does
(drainsafe.lab.node.kubelet, after pkg/kubelet/nodelease: holderIdentity the node,
leaseDurationSeconds, an ownerReference to the Node, renewed every quarter of the
duration) so that the node lifecycle controller keeps its nodes Ready past
--node-monitor-grace-period, marks pods bound to its nodes Running+Ready with a loopback
podIP (PATCH pods/status), and finalises terminating pods (DELETE gracePeriodSeconds=0)
after `stop_seconds`, bounded by the pod's grace period. No processes are started.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import pathlib
from typing import Any

import httpx
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from drainsafe.kube.objects import rfc3339_micro
from drainsafe.lab.node.kubelet import LEASE_RENEW_FRACTION, NODE_LEASE_SECONDS


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeAgent:
    def __init__(self, kubeconfig: pathlib.Path, nodes: list[str], *, gpus: int = 0,
                 cpu: str = "8", memory: str = "32Gi", start_seconds: float = 0.05,
                 stop_seconds: float = 0.1, subnet: int = 10,
                 lease_seconds: float = NODE_LEASE_SECONDS) -> None:
        self.config = KubeConfig.from_file(str(kubeconfig))
        self.nodes = nodes
        self.lease_seconds = lease_seconds
        self.gpus, self.cpu, self.memory = gpus, cpu, memory
        self.start_seconds, self.stop_seconds = start_seconds, stop_seconds
        self._ips = (f"127.{subnet}.{i // 250}.{i % 250 + 2}" for i in itertools.count())
        self._client: AsyncClient | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handled: set[tuple[str, str]] = set()
        self._main: asyncio.Task[None] | None = None
        self._leases: asyncio.Task[None] | None = None

    async def __aenter__(self) -> NodeAgent:
        self._client = AsyncClient(config=self.config)
        for name in self.nodes:
            await self.register(name)
        self._leases = asyncio.create_task(self._renew_leases())
        self._main = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        for t in [self._main, self._leases, *self._tasks]:
            if t is not None:
                t.cancel()
        for t in [self._main, self._leases, *self._tasks]:
            if t is not None:
                with contextlib.suppress(BaseException):
                    await t
        if self._client is not None:
            await self._client.close()

    async def register(self, name: str) -> None:
        assert self._client is not None
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": "110"}
        if self.gpus:
            capacity["nvidia.com/gpu"] = str(self.gpus)
        node = Node.from_dict({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "kubernetes.io/os": "linux"}},
            "spec": {},
        })
        await self._client.create(node)
        await self._client.patch(Node.Status, name, {"status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.31.0-lab", "osImage": "drainsafe lab",
                         "kernelVersion": "n/a", "containerRuntimeVersion": "lab://1",
                         "architecture": "amd64", "operatingSystem": "linux",
                         "machineID": "", "systemUUID": "", "bootID": "",
                         "kubeProxyVersion": ""},
        }}, patch_type=PatchType.MERGE)

    async def _renew_leases(self) -> None:
        """Every node's Lease renewed every quarter of its duration, the first at once; a
        failed renewal is retried at the next quarter, as the kubelet's is."""
        while True:
            for name in self.nodes:
                with contextlib.suppress(ApiError, httpx.HTTPError, OSError):
                    await self._renew_lease(name)
            await asyncio.sleep(self.lease_seconds * LEASE_RENEW_FRACTION)

    async def _renew_lease(self, name: str) -> None:
        assert self._client is not None
        renewed = {"spec": {"renewTime": rfc3339_micro()}}
        try:
            await self._client.patch(Lease, name, renewed, namespace="kube-node-lease",
                                     patch_type=PatchType.MERGE)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            node = await self._client.get(Node, name)
            uid = node.metadata.uid if node.metadata is not None else None
            await self._client.create(Lease.from_dict({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                  "name": name, "uid": uid}]},
                "spec": {"holderIdentity": name,
                         "leaseDurationSeconds": max(1, round(self.lease_seconds)),
                         "renewTime": renewed["spec"]["renewTime"]}}))  # type: ignore[call-overload]

    async def _watch(self) -> None:
        assert self._client is not None
        async for _kind, pod in self._client.watch(Pod, namespace="*"):
            raw = pod.to_dict()
            node = raw.get("spec", {}).get("nodeName")
            if node not in self.nodes:
                continue
            ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
            uid = raw["metadata"]["uid"]
            if raw["metadata"].get("deletionTimestamp"):
                if ("stop", uid) not in self._handled:
                    self._handled.add(("stop", uid))
                    grace = int(raw["metadata"].get("deletionGracePeriodSeconds") or 0)
                    self._spawn(self._finish(ns, name, uid, min(self.stop_seconds, grace)))
            elif (raw.get("status", {}).get("phase", "Pending") == "Pending"
                  and ("start", uid) not in self._handled):
                self._handled.add(("start", uid))
                self._spawn(self._start(ns, name, raw))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start(self, ns: str, name: str, raw: dict[str, Any]) -> None:
        assert self._client is not None
        await asyncio.sleep(self.start_seconds)
        now = _now()
        containers = raw.get("spec", {}).get("containers") or []
        status = {
            "phase": "Running", "podIP": next(self._ips), "hostIP": "127.0.0.1",
            "startTime": now,
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            ],
            "containerStatuses": [
                {"name": c["name"], "ready": True, "restartCount": 0, "started": True,
                 "image": c.get("image", ""), "imageID": "",
                 "state": {"running": {"startedAt": now}}} for c in containers],
        }
        status["podIPs"] = [{"ip": status["podIP"]}]
        with contextlib.suppress(ApiError):
            await self._client.patch(Pod.Status, name, {"status": status}, namespace=ns,
                                     patch_type=PatchType.STRATEGIC)

    async def _finish(self, ns: str, name: str, uid: str, delay: float) -> None:
        assert self._client is not None
        await asyncio.sleep(delay)
        with contextlib.suppress(ApiError):
            await self._client.delete(Pod, name, namespace=ns, grace_period=0)
