"""`Lab`: a whole local cluster in one object, for tests, rehearsals and the demo.

    async with Lab(state_dir, nodes=3, gpus_per_node=1, propagation_seconds=0.5) as lab:
        await lab.apply(deployment, service)
        await lab.wait_available("default", "web", timeout=60)
        url = lab.service_url("default", "web")                   # via the ClusterIP path
        url = lab.service_url("default", "web", path="ingress")   # via nginx
        subprocess.run(["kubectl", "--kubeconfig", lab.kubeconfig, "get", "pods"])

It starts the control plane (API server, controllers, scheduler), one kubelet per node and
both traffic paths, writes <state_dir>/kubeconfig, and on exit (normal, exception, Ctrl-C)
stops every process it started, by pid: container process groups, nginx. Nothing else.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import random
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lightkube import ApiError, AsyncClient, KubeConfig, LoadResourceError, codecs
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.types import PatchType

from drainsafe.kube import KubeClient
from drainsafe.kube.objects import DEFAULT_GRACE_SECONDS, rfc3339
from drainsafe.lab.apiserver.admission import DEFAULT_TOLERATION_SECONDS
from drainsafe.lab.controllers.nodelifecycle import NodeMonitor
from drainsafe.lab.features import DEFAULT as DEFAULT_GATES
from drainsafe.lab.features import FeatureGates
from drainsafe.lab.netpath.paths import NetPaths
from drainsafe.lab.netpath.propagation import Propagation
from drainsafe.lab.node.kubelet import (
    DEFAULT_GPU_PRODUCT,
    NODE_LEASE_SECONDS,
    NodeConfig,
    NodePool,
)
from drainsafe.lab.node.podip import node_subnet

VIRTUAL = {"lab.drainsafe.io/virtual": "true"}
# A system node's role label and taint: kubeadm's for a control-plane node (kubeadm
# init's default taint, and the label `kubectl get nodes` shows as ROLES), which keeps
# every pod off but those that tolerate it, the cluster's add-ons pinned there.
SYSTEM_ROLE = "node-role.kubernetes.io/control-plane"
SYSTEM_TAINT = {"key": SYSTEM_ROLE, "effect": "NoSchedule"}
# What a pod template says to run there (and only there).
SYSTEM_NODE_SELECTOR = {SYSTEM_ROLE: ""}
SYSTEM_TOLERATION = {"key": SYSTEM_ROLE, "operator": "Exists", "effect": "NoSchedule"}


class LabError(RuntimeError):
    pass


class Lab:
    def __init__(self, state_dir: Path | str, *, nodes: int = 3, gpus_per_node: int = 0,
                 propagation_seconds: float | str | Propagation = 0.0,
                 ingress: bool = True, restart_backoff: float = 10.0,
                 node_cpu: str = "32", node_memory: str = "256Gi",
                 gpu_product: str = DEFAULT_GPU_PRODUCT, node_prefix: str = "node",
                 system_nodes: int = 0, seed: int | None = None,
                 feature_gates: FeatureGates = DEFAULT_GATES,
                 node_lease_seconds: float = NODE_LEASE_SECONDS,
                 node_monitor_grace_seconds: float = NodeMonitor.grace_seconds,
                 toleration_seconds: int = DEFAULT_TOLERATION_SECONDS) -> None:
        """`nodes` worker nodes with `gpus_per_node` GPUs each, and beside them
        `system_nodes` nodes `system-<i>` without GPUs, labelled and tainted SYSTEM_ROLE
        (NoSchedule): where a user pins a controller that must not run on the nodes it
        drains.

        The node heartbeat settings default to a v1.33 cluster's and a time-scaled lab
        shortens them: node_lease_seconds the kubelets' nodeLeaseDurationSeconds (renewed
        every quarter of it), node_monitor_grace_seconds kube-controller-manager's
        --node-monitor-grace-period, toleration_seconds kube-apiserver's default
        not-ready/unreachable tolerationSeconds (drainsafe.lab.controllers.nodelifecycle,
        .tainteviction; drainsafe.lab.node.partition cuts a node off)."""
        if not 1 <= nodes <= 256:
            raise ValueError(f"nodes: {nodes} is outside 1..256")
        if not 0 <= system_nodes <= 256 - nodes:
            raise ValueError(f"system_nodes: {system_nodes} is outside 0..{256 - nodes}")
        if gpus_per_node < 0:
            raise ValueError(f"gpus_per_node: {gpus_per_node} must be >= 0")
        self.state_dir = Path(state_dir).resolve()
        self.node_count = nodes
        self.gpus_per_node = gpus_per_node
        if isinstance(propagation_seconds, Propagation):
            self.propagation = propagation_seconds
        elif isinstance(propagation_seconds, str):
            self.propagation = Propagation.parse(propagation_seconds)
        else:
            self.propagation = Propagation.fixed(float(propagation_seconds))
        self.use_ingress = ingress
        self.restart_backoff = restart_backoff
        self.rng = random.Random(seed)
        self.feature_gates = feature_gates
        self.node_lease_seconds = node_lease_seconds
        self.node_monitor = NodeMonitor(grace_seconds=node_monitor_grace_seconds)
        self.toleration_seconds = toleration_seconds
        # Addresses are drawn apart from the seed: two labs with one seed (two test suites on
        # one machine) must still bind different loopback pod IPs and ClusterIPs.
        self._addresses = random.SystemRandom()
        subnet_base = self._addresses.randrange(256)
        self.node_configs = [
            NodeConfig(name=f"{node_prefix}-{i}", subnet=node_subnet(subnet_base, i),
                       cpu=node_cpu, memory=node_memory, gpus=gpus_per_node,
                       gpu_product=gpu_product)
            for i in range(nodes)] + [
            NodeConfig(name=f"system-{i}", subnet=node_subnet(subnet_base, nodes + i),
                       cpu=node_cpu, memory=node_memory, labels={SYSTEM_ROLE: ""},
                       taints=(SYSTEM_TAINT,))
            for i in range(system_nodes)]
        self.control_plane: Any = None
        self.client: AsyncClient | None = None
        # The kubelets' and traffic paths' watches: the project's informer speaks
        # drainsafe.kube's client (plain dicts), the rest of the lab lightkube's.
        self.watch_client: KubeClient | None = None
        self.nodes: NodePool | None = None
        self.net: NetPaths | None = None
        self._status_task: asyncio.Task[None] | None = None
        self._stopped = False

    # lifecycle -----------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    async def __aenter__(self) -> Lab:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        from drainsafe.lab.controlplane import ControlPlane

        self.state_dir.mkdir(parents=True, exist_ok=True)
        # A safety net if the event loop dies without running stop(): kill what we started.
        atexit.register(self._kill_remaining)
        # Several labs may run on one machine (tests in parallel); ClusterIPs from the same
        # 127.96.0.0/16 would collide on the L4 listeners, so each lab starts its ClusterIP
        # allocation at a random offset.
        self.control_plane = ControlPlane(self.state_dir,
                                          cluster_ip_start=self._addresses.randrange(1, 65000),
                                          feature_gates=self.feature_gates,
                                          node_monitor=self.node_monitor,
                                          toleration_seconds=self.toleration_seconds)
        await self.control_plane.start()
        self.control_plane.write_kubeconfig(self.kubeconfig)
        self.client = AsyncClient(config=KubeConfig.from_file(str(self.kubeconfig)),
                                  field_manager="drainsafe-lab")
        self.watch_client = KubeClient.from_kubeconfig(str(self.kubeconfig))
        self.nodes = NodePool(self.client, self.node_configs, state_dir=self.state_dir,
                              watch_client=self.watch_client,
                              restart_backoff=self.restart_backoff,
                              lease_seconds=self.node_lease_seconds)
        await self.nodes.start()
        self.net = NetPaths(self.watch_client, propagation=self.propagation,
                            workdir=self.state_dir,
                            ingress=self.use_ingress, rng=self.rng)
        await self.net.start()
        self._status_task = asyncio.ensure_future(self._publish_status())

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._status_task is not None:
            self._status_task.cancel()
            await asyncio.gather(self._status_task, return_exceptions=True)
        if self.net is not None:
            await self.net.stop()
        if self.nodes is not None:
            await self.nodes.stop()
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.close()
        if self.watch_client is not None:
            with contextlib.suppress(Exception):
                await self.watch_client.aclose()
        if self.control_plane is not None:
            await self.control_plane.stop()
        self._kill_remaining()
        atexit.unregister(self._kill_remaining)

    def pids(self) -> list[int]:
        """Processes of this lab still running: containers (group leaders) and nginx."""
        found = list(self.nodes.pids()) if self.nodes is not None else []
        if self.net is not None and self.net.ingress is not None and self.net.ingress.pid:
            found.append(self.net.ingress.pid)
        return found

    def _kill_remaining(self) -> None:
        if self.nodes is not None:
            for pid in self.nodes.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        if self.net is not None and self.net.ingress is not None:
            with contextlib.suppress(Exception):
                self.net.ingress.stop_now()

    # addresses -------------------------------------------------------------------------------

    def service_url(self, namespace: str, name: str, *, path: str = "clusterip",
                    port: int | str | None = None, scheme: str = "http") -> str:
        """The base URL of a Service through one traffic path, as that path now knows it."""
        assert self.net is not None, "lab not started"
        if path not in self.net.consumers:
            raise LabError(f"path {path!r}: choose one of {sorted(self.net.consumers)}")
        view = self.net.known(path, namespace, name) or self.net.current.get((namespace, name))
        if view is None:
            raise LabError(f"service {namespace}/{name} is not known to the {path} path yet")
        svc_port = view.port(port)
        if path == "clusterip":
            address = f"{view.cluster_ip}:{svc_port.port}"
            if address in self.net.l4.stats.bind_errors:
                raise LabError(f"the ClusterIP path cannot listen on {address}: "
                               f"{self.net.l4.stats.bind_errors[address]}")
            return f"{scheme}://{address}"
        assert self.net.ingress is not None
        url = self.net.ingress.url(namespace, name, svc_port.port)
        if url is None:
            raise LabError(f"service {namespace}/{name} has no ingress listener yet")
        return url

    def backends(self, namespace: str, name: str, *, path: str = "clusterip",
                 port: int | str | None = None) -> tuple[str, ...]:
        assert self.net is not None, "lab not started"
        view = self.net.known(path, namespace, name)
        return () if view is None else view.port(port).backends

    # manifests -------------------------------------------------------------------------------

    async def apply(self, *manifests: dict[str, Any]) -> None:
        """Create each object, or merge-patch it when it exists (like a simple kubectl apply).
        A CustomResourceDefinition is waited for until Established (as `kubectl wait
        --for=condition=Established` would), so its custom resources may follow it."""
        client = self._client()
        for manifest in manifests:
            obj = self._resource(manifest)
            try:
                await client.create(obj)
            except ApiError as exc:
                if exc.status.code != 409:
                    raise
                meta = manifest.get("metadata") or {}
                await client.patch(type(obj), meta["name"], manifest,
                                   namespace=meta.get("namespace"), patch_type=PatchType.MERGE)
            if manifest.get("kind") == "CustomResourceDefinition":
                await self.wait_established(str(manifest["metadata"]["name"]))

    def _resource(self, manifest: dict[str, Any]) -> Any:
        """The lightkube object of a manifest; a custom kind the lab serves is registered
        with lightkube as a generic resource first (it only knows built-in kinds)."""
        try:
            return codecs.from_dict(manifest)
        except LoadResourceError:
            group, _, version = str(manifest.get("apiVersion", "")).rpartition("/")
            served = next((rt for rt in self.control_plane.store.catalog.all()
                           if (rt.group, rt.version, rt.kind) == (
                               group, version, manifest.get("kind"))), None)
            if served is None:
                raise
            make = create_namespaced_resource if served.namespaced else create_global_resource
            make(group, version, served.kind, served.plural)
            return codecs.from_dict(manifest)

    async def wait_established(self, name: str, *, timeout: float = 30.0) -> None:
        """Until the CustomResourceDefinition `name` is Established (woken by changes)."""
        from drainsafe.lab.apiserver.crd import CRDS, ESTABLISHED, is_true

        store = self.control_plane.store
        changed = asyncio.Event()
        unlisten = store.listen(lambda _ev: changed.set())
        try:
            async with asyncio.timeout(timeout):
                while not ((crd := store.peek(CRDS, "", name)) is not None
                           and is_true(crd, ESTABLISHED)):
                    changed.clear()
                    await changed.wait()
        finally:
            unlisten()

    async def install_leaderworkerset(self) -> None:
        """Install the LeaderWorkerSet CRD (lws v0.10.0's leaderworkerset.x-k8s.io/v1, as
        deploy/lab/leaderworkerset-crd.yaml ships it); the lab's LWS controller then runs
        every LeaderWorkerSet (drainsafe.lab.controllers.leaderworkerset)."""
        from drainsafe.lab.lwscrd import leaderworkerset_crd

        await self.apply(leaderworkerset_crd())

    async def rollout_restart(self, namespace: str, name: str) -> None:
        """What `kubectl rollout restart` does: stamp the pod template."""
        patch = {"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": rfc3339()}}}}}
        await self._client().patch(Deployment, name, patch, namespace=namespace,
                                   patch_type=PatchType.STRATEGIC)

    async def wait_available(self, namespace: str, name: str, *, timeout: float = 60.0) -> None:
        """Until the Deployment's rollout is complete (kubectl rollout status's test)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: dict[str, Any] = {}
        while loop.time() < deadline:
            dep = (await self._client().get(Deployment, name, namespace=namespace)).to_dict()
            if rollout_complete(dep):
                return
            last = dep.get("status") or {}
            await asyncio.sleep(0.2)
        raise TimeoutError(f"deployment {namespace}/{name} not available after {timeout:g}s; "
                           f"status: {json.dumps(last)}")

    async def wait_daemonset(self, namespace: str, name: str, *, timeout: float = 60.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            ds = (await self._client().get(DaemonSet, name, namespace=namespace)).to_dict()
            st = ds.get("status") or {}
            want = st.get("desiredNumberScheduled")
            if want and st.get("numberReady") == want:
                return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"daemonset {namespace}/{name} not ready after {timeout:g}s")

    async def wait_backends(self, namespace: str, name: str, count: int, *,
                            path: str = "clusterip", timeout: float = 60.0) -> tuple[str, ...]:
        """Until the given path routes the Service to `count` backends (after propagation)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            found = self.backends(namespace, name, path=path)
            if len(found) == count:
                return found
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{path} path has {self.backends(namespace, name, path=path)} for "
                           f"{namespace}/{name}, wanted {count} after {timeout:g}s")

    def _client(self) -> AsyncClient:
        if self.client is None:
            raise LabError("lab not started")
        return self.client

    # status for `drainsafe lab status` ----------------------------------------------------

    def describe(self) -> dict[str, Any]:
        services = []
        if self.net is not None:
            for (namespace, name), view in sorted(self.net.current.items()):
                for port in view.ports:
                    ingress = (self.net.ingress.url(namespace, name, port.port)
                               if self.net.ingress is not None else None)
                    services.append({"namespace": namespace, "name": name,
                                     "clusterIP": f"{view.cluster_ip}:{port.port}",
                                     "ingress": ingress, "endpoints": len(port.backends)})
        return {
            "pid": os.getpid(),
            "kubeconfig": str(self.kubeconfig),
            "server": getattr(self.control_plane, "url", None),
            "nodes": [{"name": c.name, "hostIP": c.host_ip, "gpus": c.gpus}
                      for c in self.node_configs],
            "propagation": [self.propagation.low, self.propagation.high],
            "paths": ({name: round(c.delay, 3) for name, c in self.net.consumers.items()}
                      if self.net is not None else {}),
            "services": services,
            "pids": self.pids(),
        }

    async def _publish_status(self) -> None:
        path = self.state_dir / "lab.json"
        last = ""
        while True:
            text = json.dumps(self.describe(), indent=2)
            if text != last:
                tmp = path.with_suffix(".tmp")
                tmp.write_text(text)
                tmp.replace(path)
                last = text
            await asyncio.sleep(0.5)


def rollout_complete(dep: dict[str, Any]) -> bool:
    """kubectl's rollout status test (kubectl/pkg/polymorphichelpers/rollout_status.go)."""
    spec = dep.get("spec") or {}
    st = dep.get("status") or {}
    meta = dep.get("metadata") or {}
    want = int(spec.get("replicas", 1))
    if int(st.get("observedGeneration", 0)) < int(meta.get("generation", 0)):
        return False
    return (int(st.get("updatedReplicas", 0)) == want
            and int(st.get("replicas", 0)) == want
            and int(st.get("availableReplicas", 0)) == want)


def gpu_device_plugin_daemonset(namespace: str = "kube-system",
                                name: str = "nvidia-device-plugin-daemonset") -> dict[str, Any]:
    """A GPU device-plugin-like DaemonSet (virtual pods) on every GPU node; drains skip it."""
    labels = {"name": name}
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": dict(VIRTUAL)},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                    "containers": [{"name": "nvidia-device-plugin-ctr",
                                    "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}],
                },
            },
        },
    }


def virtual_deployment(name: str, *, namespace: str = "default", replicas: int = 1,
                       startup_seconds: float = 0.0, exit_after_sigterm_seconds: float = 0.0,
                       gpus: int = 0, labels: dict[str, str] | None = None,
                       grace: int = DEFAULT_GRACE_SECONDS) -> dict[str, Any]:
    """A Deployment of virtual pods (no processes), cheap at any scale."""
    labels = labels or {"app": name}
    resources: dict[str, Any] = {"requests": {"cpu": "10m"}}
    if gpus:
        resources = {"requests": {"cpu": "10m", "nvidia.com/gpu": str(gpus)},
                     "limits": {"nvidia.com/gpu": str(gpus)}}
    annotations = dict(VIRTUAL)
    annotations["lab.drainsafe.io/startup-seconds"] = f"{startup_seconds:g}"
    annotations["lab.drainsafe.io/exit-after-sigterm-seconds"] = f"{exit_after_sigterm_seconds:g}"
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {"terminationGracePeriodSeconds": grace,
                         "containers": [{"name": "main", "image": "lab/virtual",
                                         "resources": resources,
                                         "ports": [{"name": "http", "containerPort": 8000}]}]},
            },
        },
    }


def pids_alive(pids: Iterable[int]) -> list[int]:
    """Which of these pids still run (zombies count as gone)."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(") ", 1)[1][0]
        except (FileNotFoundError, IndexError, ProcessLookupError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive
