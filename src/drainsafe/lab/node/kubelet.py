"""The lab's kubelet: runs the pods bound to its node as local processes.

A Kubernetes API client like the real kubelet (lightkube over HTTPS with a bearer token):
- registers its Node (capacity and allocatable cpu, memory, pods, nvidia.com/gpu; labels
  kubernetes.io/hostname, nvidia.com/gpu.product...; Ready condition) and heartbeats it
  both ways a v1.33 kubelet does: its Lease kube-node-lease/<node> (holderIdentity the
  node, leaseDurationSeconds 40, an ownerReference to the Node) renewed every quarter of
  the lease duration (pkg/kubelet/nodelease, renewIntervalFraction 0.25; the lab patches
  spec.renewTime where upstream PUTs its last copy), and its node status every 10 s
  (nodeStatusUpdateFrequency); a cut-off node does neither (drainsafe.lab.node.partition);
- sees the pods bound to it (spec.nodeName), gives each a loopback pod IP, starts each
  container (drainsafe.lab.node.process), runs its probes (drainsafe.lab.node.probes), restarts
  containers per restartPolicy (also after a liveness failure), and reports pod status:
  phase, conditions (PodScheduled, Initialized, ContainersReady, Ready), containerStatuses;
- when a pod gets a deletionTimestamp, stops it as the kubelet does (drainsafe.lab.node.
  termination: preStop within the grace period, SIGTERM, SIGKILL at the deadline), writes
  the final status (terminal phase, as kubelets since 1.27 do) and deletes the pod with
  gracePeriodSeconds=0.

One `NodePool` shares a single pod watch among all kubelets of a lab (cheap at 100 nodes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.kube.objects import key_of, rfc3339, rfc3339_micro
from drainsafe.lab.node import handlers, volumes
from drainsafe.lab.node.handlers import Outcome, Target
from drainsafe.lab.node.partition import is_cut_off
from drainsafe.lab.node.podip import PodIPs, declared_tcp_ports, host_ip
from drainsafe.lab.node.probes import ProbeSpecError, ProbeType, ProbeWorker, container_probes
from drainsafe.lab.node.process import (
    Container,
    ContainerConfigError,
    PodContext,
    ProcessContainer,
    VirtualContainer,
    VirtualSettings,
    container_argv,
    container_env,
    process_environment,
    virtual_settings,
)
from drainsafe.lab.node.reboot import REBOOT, RebootRequest, requested
from drainsafe.lab.node.termination import (
    TerminationRecord,
    effective_grace,
    kill_container,
    kill_grace,
)
from drainsafe.lab.secretfile import private_dir

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
DEFAULT_GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
HEARTBEAT_SECONDS = 10.0
NODE_LEASE_SECONDS = 40.0  # KubeletConfiguration nodeLeaseDurationSeconds
LEASE_RENEW_FRACTION = 0.25
MAX_BACKOFF_SECONDS = 300.0
STATUS_COALESCE_SECONDS = 0.05
API_CONCURRENCY = 16  # the kubelet's CrashLoopBackOff cap
# What the container runtime reports, after the machine restarted, for a container that was
# running (containerd's CRI restart.go: unknownExitCode, unknownExitReason).
UNKNOWN_EXIT_CODE = 255
UNKNOWN_EXIT_REASON = "Unknown"


@dataclass(frozen=True)
class NodeConfig:
    name: str
    subnet: int
    cpu: str = "32"
    memory: str = "256Gi"
    pods: int = 110
    gpus: int = 0
    gpu_product: str = DEFAULT_GPU_PRODUCT
    labels: dict[str, str] = field(default_factory=dict)
    # Registered with the Node, as the kubelet's --register-with-taints does.
    taints: tuple[dict[str, str], ...] = ()

    @property
    def host_ip(self) -> str:
        return host_ip(self.subnet)


def node_manifest(config: NodeConfig) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": config.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "lab.drainsafe.io/node": "true",
    }
    if config.gpus:
        labels[GPU_PRODUCT_LABEL] = config.gpu_product
        labels["nvidia.com/gpu.count"] = str(config.gpus)
        labels["nvidia.com/gpu.present"] = "true"
    labels.update(config.labels)
    spec = {"taints": [dict(t) for t in config.taints]} if config.taints else {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": config.name, "labels": labels}, "spec": spec}


LAB_KUBELET_VERSION = "v1.33.0-lab"


def node_status(config: NodeConfig, *, started: str, boot_id: str | None = None,
                kubelet_version: str = LAB_KUBELET_VERSION, ready: bool = True,
                ready_since: str | None = None) -> dict[str, Any]:
    resources = {"cpu": config.cpu, "memory": config.memory, "pods": str(config.pods),
                 "ephemeral-storage": "1Ti"}
    if config.gpus:
        resources[GPU_RESOURCE] = str(config.gpus)
    heartbeat = rfc3339()
    return {
        "capacity": resources,
        "allocatable": dict(resources),
        "conditions": [
            {"type": t, "status": "False", "reason": r, "message": m,
             "lastHeartbeatTime": heartbeat, "lastTransitionTime": started}
            for t, r, m in (
                ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID"))
        ] + [{"type": "Ready", "status": "True" if ready else "False",
              "reason": "KubeletReady" if ready else "KubeletNotReady",
              "message": "kubelet is posting ready status (drainsafe lab)" if ready
              else "node is rebooting (drainsafe lab)",
              "lastHeartbeatTime": heartbeat,
              "lastTransitionTime": ready_since or started}],
        "addresses": [{"type": "InternalIP", "address": config.host_ip},
                      {"type": "Hostname", "address": config.name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": config.name, "systemUUID": config.name,
                     "bootID": boot_id or started,
                     "kernelVersion": "lab", "osImage": "drainsafe lab",
                     "containerRuntimeVersion": "lab://process",
                     "kubeletVersion": kubelet_version,
                     "kubeProxyVersion": kubelet_version, "operatingSystem": "linux",
                     "architecture": "amd64"},
    }


# --- one container -------------------------------------------------------------------------

@dataclass
class ContainerState:
    spec: dict[str, Any]
    restart_count: int = 0
    process: Container | None = None
    started: bool = False
    ready: bool = False
    state: dict[str, Any] = field(default_factory=lambda: {
        "waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    probes: list[ProbeWorker] = field(default_factory=list)
    startup_ok: bool = True
    termination: TerminationRecord | None = None
    exit_code: int | None = None

    reported: dict[str, set[str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    def _reported(self, field_name: str, state: dict[str, Any]) -> dict[str, Any]:
        """The state, with an explicit null for each kind reported before and gone now, so
        the strategic merge patch drops it (a JSON null for a key never sent would be
        stored by a server that keeps nulls in new list items)."""
        seen = self.reported.setdefault(field_name, set())
        out: dict[str, Any] = {kind: None for kind in seen if kind not in state}
        out.update(state)
        seen.update(state)
        return out

    def container_id(self, pod_uid: str) -> str:
        """Unique as a runtime's: by the pod's UID, never its name, and the attempt."""
        return f"lab://{pod_uid}/{self.name}/{self.restart_count}"

    def status(self, pod_uid: str) -> dict[str, Any]:
        status: dict[str, Any] = {
            "name": self.name,
            "image": str(self.spec.get("image") or "lab/process"),
            "imageID": "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self._reported("state", self.state),
            "lastState": self._reported("lastState", self.last_state),
        }
        if self.process is not None:
            status["containerID"] = self.container_id(pod_uid)
        return status


# --- one pod -------------------------------------------------------------------------------

class PodWorker:
    """Everything the kubelet does for one pod, from start to deletion."""

    def __init__(self, kubelet: Kubelet, pod: dict[str, Any]) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.uid = str(meta.get("uid", ""))
        self.namespace = str(meta.get("namespace", "default"))
        self.name = str(meta["name"])
        self.containers = [ContainerState(dict(c)) for c in pod["spec"].get("containers") or []]
        self.pod_ip = ""
        self.start_time = rfc3339()
        self.phase = "Pending"
        self.conditions: dict[str, dict[str, Any]] = {}
        self.virtual: VirtualSettings | None = None
        self.terminating = False
        self.finished = asyncio.Event()
        self._dirty = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._main: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._termination: asyncio.Task[None] | None = None
        self.records: dict[str, TerminationRecord] = {}
        self._launched = False  # past the wait for a running kubelet; containers starting
        self._lost: dict[str, str] = {}  # containers running at a power loss: their startedAt
        self._stop_args: tuple[int | None, bool] = (None, True)  # begin_termination's

    @property
    def key(self) -> str:
        return key_of(self.pod)

    @property
    def dir(self) -> Path:
        return volumes.pod_dir(self.kubelet.state_dir, self.namespace, self.name, self.uid)

    def start(self) -> None:
        self._writer = asyncio.ensure_future(self._write_status())
        self._main = asyncio.ensure_future(self._run())

    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp") and not self.terminating:
            self.begin_termination()

    def stopping(self) -> bool:
        return self.terminating

    def begin_termination(self, *, grace: int | None = None, delete: bool = True) -> None:
        if self.terminating:
            return
        self.terminating = True
        self._stop_args = (grace, delete)
        self._termination = asyncio.ensure_future(self._terminate(grace, delete))

    # status ----------------------------------------------------------------------------

    def _set_condition(self, kind: str, ok: bool, reason: str = "") -> None:
        status = "True" if ok else "False"
        old = self.conditions.get(kind)
        if old is not None and old["status"] == status:
            return
        cond: dict[str, Any] = {"type": kind, "status": status,
                                "lastTransitionTime": rfc3339()}
        if reason:
            cond["reason"] = reason
        elif old is not None and old.get("reason"):
            cond["reason"] = None  # the strategic merge patch must clear the old reason
        self.conditions[kind] = cond

    def mark_dirty(self) -> None:
        all_ready = bool(self.containers) and all(c.ready for c in self.containers)
        reason = "" if all_ready else "ContainersNotReady"
        self._set_condition("ContainersReady", all_ready, reason)
        self._set_condition("Ready", all_ready, reason)
        self._dirty.set()

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "phase": self.phase,
            "conditions": list(self.conditions.values()),
            "hostIP": self.kubelet.config.host_ip,
            "hostIPs": [{"ip": self.kubelet.config.host_ip}],
            "startTime": self.start_time,
            "qosClass": _qos_class(self.pod),
            "containerStatuses": [c.status(self.uid) for c in self.containers],
        }
        if self.pod_ip:
            status["podIP"] = self.pod_ip
            status["podIPs"] = [{"ip": self.pod_ip}]
        return status

    async def _write_status(self) -> None:
        while True:
            await self._dirty.wait()
            await self.kubelet.reach_api()  # a node that is down or cut off writes nothing
            # Coalesce a burst of changes (IP, started, ready...) into one patch, as the
            # kubelet's status manager batches its syncs.
            await asyncio.sleep(STATUS_COALESCE_SECONDS)
            self._dirty.clear()
            try:
                await self.kubelet.patch_pod_status(self.namespace, self.name, self.status())
            except ApiError as exc:
                if exc.status.code == 404:
                    return
                log.warning("status of %s: %s", self.key, exc)
                self._dirty.set()
                await asyncio.sleep(0.5)
            except httpx.HTTPError as exc:
                log.warning("status of %s: %s", self.key, exc)
                self._dirty.set()
                await asyncio.sleep(0.5)

    async def flush_status(self) -> None:
        """Write the current status now (before deletion, so watchers see the final state)."""
        await self.kubelet.reach_api()
        self._dirty.clear()
        with contextlib.suppress(ApiError, httpx.HTTPError):
            await self.kubelet.patch_pod_status(self.namespace, self.name, self.status())

    # running ---------------------------------------------------------------------------

    async def _run(self) -> None:
        await self.kubelet.up.wait()  # a pod bound while its node is down starts after the boot
        self._launched = True
        self._set_condition("PodScheduled", True)
        self._set_condition("Initialized", True)
        try:
            self.virtual = virtual_settings(self.pod)
            ports = [] if self.virtual else declared_tcp_ports(self.pod)
            self.pod_ip = self.kubelet.ips.allocate(self.uid, ports)
        except (ContainerConfigError, RuntimeError) as exc:
            for c in self.containers:
                c.state = {"waiting": {"reason": "CreateContainerConfigError",
                                       "message": str(exc)}}
            self.mark_dirty()
            return
        # Logs and working directories of pods are the lab user's alone (0700).
        private_dir(self.dir.parent)
        private_dir(self.dir)
        try:
            self._prepare_volumes()
        except OSError as exc:
            for c in self.containers:
                c.state = {"waiting": {"reason": "CreateContainerConfigError",
                                       "message": f"volumes: {exc}"}}
            self.mark_dirty()
            return
        self.mark_dirty()
        for c in self.containers:
            if self.terminating:
                return
            await self._start_container(c)
        if any(c.process is not None for c in self.containers):
            self.phase = "Running"
        self.mark_dirty()

    def _prepare_volumes(self) -> None:
        """The pod's emptyDir and claim volumes, linked into each container's working
        directory at its mountPaths (drainsafe.lab.node.volumes)."""
        dirs = volumes.volume_dirs(self.pod, self.kubelet.state_dir, self.dir)
        links = [m for c in self.containers
                 for m in volumes.mounts(c.spec, dirs, self.dir / c.name)]
        volumes.prepare(dirs, links)

    def _ctx(self) -> PodContext:
        return PodContext.from_pod(self.pod, pod_ip=self.pod_ip,
                                   host_ip=self.kubelet.config.host_ip)

    def _target(self, c: ContainerState) -> Target:
        env = {} if self.virtual else container_env(c.spec, self._ctx())
        return Target(self.pod_ip, handlers.named_ports(c.spec), env, self.dir / c.name)

    async def _start_container(self, c: ContainerState) -> None:
        try:
            if self.virtual is not None:
                c.process = VirtualContainer(
                    exit_after_sigterm=self.virtual.exit_after_sigterm_seconds)
            else:
                ctx = self._ctx()
                env = container_env(c.spec, ctx)
                argv = container_argv(c.spec, env)
                proc = ProcessContainer(argv, env=process_environment(
                                            env, ctx,
                                            kubeconfig=self.kubelet.state_dir / "kubeconfig"),
                                        cwd=self.dir / c.name,
                                        log_path=self.dir / f"{c.name}.log")
                await proc.start()
                c.process = proc
            probes = {} if self.virtual else container_probes(c.spec, where=c.name)
        except (ContainerConfigError, ProbeSpecError, handlers.ActionError) as exc:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self.mark_dirty()
            return
        c.state = {"running": {"startedAt": rfc3339()}}
        c.exit_code = None
        c.startup_ok = ProbeType.STARTUP not in probes
        c.started = c.startup_ok and self.virtual is None
        c.ready = (c.started and ProbeType.READINESS not in probes)
        self._spawn(self._supervise(c, c.process))
        if self.virtual is not None:
            self._spawn(self._virtual_ready(c, self.virtual.startup_seconds))
        self._start_probes(c, probes)
        self.mark_dirty()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _virtual_ready(self, c: ContainerState, after: float) -> None:
        await asyncio.sleep(after)
        if c.process is not None and c.process.returncode is None and not self.terminating:
            c.started = c.ready = True
            self.mark_dirty()

    def _start_probes(self, c: ContainerState, probes: dict[ProbeType, Any]) -> None:
        assert c.process is not None
        started_at = c.process.started_at
        target = self._target(c)
        for kind, spec in probes.items():
            gate = self._gate(c, kind)
            worker = ProbeWorker(spec, target, started_at=started_at,
                                 on_result=self._probe_listener(c),
                                 client=self.kubelet.http, gate=gate)
            worker.start()
            c.probes.append(worker)

    def _probe_listener(self, c: ContainerState) -> Callable[[ProbeType, bool | None, Outcome],
                                                              None]:
        return lambda kind, result, outcome: self._on_probe(c, kind, result, outcome)

    def _gate(self, c: ContainerState, kind: ProbeType) -> Callable[[], bool]:
        def gate() -> bool:
            # Liveness and readiness wait for the startup probe; liveness and startup
            # probes stop once the pod is terminating (readiness keeps running).
            if kind is not ProbeType.STARTUP and not c.startup_ok:
                return False
            return kind is ProbeType.READINESS or not self.terminating
        return gate

    def _on_probe(self, c: ContainerState, kind: ProbeType, result: bool | None,
                  outcome: Outcome) -> None:
        if kind is ProbeType.STARTUP and result:
            if not c.startup_ok:
                c.startup_ok = c.started = True
                if not any(w.spec.kind is ProbeType.READINESS for w in c.probes):
                    c.ready = True
                self.mark_dirty()
        elif kind is ProbeType.STARTUP and result is False:
            self._spawn(self._restart(c, "startup", f"Startup probe failed: {outcome.message}"))
        elif kind is ProbeType.READINESS:
            ready = bool(result) and c.started and c.process is not None \
                and c.process.returncode is None
            if ready != c.ready:
                c.ready = ready
                self.mark_dirty()
        elif kind is ProbeType.LIVENESS and result is False:
            self._spawn(self._restart(c, "liveness",
                                      f"Liveness probe failed: {outcome.message}"))

    async def _stop_probes(self, c: ContainerState) -> None:
        workers, c.probes = c.probes, []
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)

    async def _restart(self, c: ContainerState, probe: str, why: str) -> None:
        """Kill a container that failed its liveness or startup probe; _supervise restarts it."""
        if self.terminating or c.process is None or c.process.returncode is not None:
            return
        await self._stop_probes(c)
        self.kubelet.record_event(self.pod, "Warning", "Unhealthy", why)
        self.kubelet.record_event(self.pod, "Normal", "Killing",
                                  f"Container {c.name} failed probe, will be restarted")
        grace = kill_grace(self.pod, c.spec, probe)  # an explicit 0 stays 0
        await kill_container(c.process, grace=grace, prestop=self._prestop(c))

    async def _supervise(self, c: ContainerState, proc: Container) -> None:
        code = await proc.wait()
        c.exit_code = code
        c.ready = False
        finished = rfc3339()
        started = c.state.get("running", {}).get("startedAt", finished)
        reason = "Completed" if code == 0 else "Error"
        c.state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": started,
                                  "finishedAt": finished,
                                  "containerID": c.container_id(self.uid)}}
        await self._stop_probes(c)
        self.mark_dirty()
        if self.terminating:
            return
        policy = str(self.pod["spec"].get("restartPolicy") or "Always")
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            delay = self._backoff(c)
            c.last_state = c.state
            c.state = {"waiting": {"reason": "CrashLoopBackOff" if delay else "ContainerCreating",
                                   "message": f"back-off {delay:g}s restarting failed "
                                   f"container={c.name}"}}
            self.mark_dirty()
            await asyncio.sleep(delay)
            if self.stopping():  # termination may have begun during the back-off
                return
            c.restart_count += 1
            await self._start_container(c)
        elif all(x.exit_code is not None for x in self.containers):
            self.phase = "Succeeded" if all(x.exit_code == 0 for x in self.containers) \
                else "Failed"
            self.mark_dirty()

    def _backoff(self, c: ContainerState) -> float:
        base = self.kubelet.restart_backoff
        if c.restart_count == 0 or base <= 0:
            return 0.0
        return float(min(base * 2 ** (c.restart_count - 1), MAX_BACKOFF_SECONDS))

    def _prestop(self, c: ContainerState) -> Callable[[], Any] | None:
        hook = (c.spec.get("lifecycle") or {}).get("preStop")
        if not hook:
            return None
        if self.virtual is not None and "sleep" not in hook:
            return None  # a virtual container has nothing to exec into or answer HTTP
        target = self._target(c)

        async def run() -> Outcome:
            try:
                outcome = await handlers.run_action(hook, target, timeout=None,
                                                    client=self.kubelet.http)
            except handlers.ActionError as exc:
                outcome = Outcome(False, str(exc))
            if not outcome.ok:
                self.kubelet.record_event(self.pod, "Warning", "FailedPreStopHook",
                                          f"PreStopHook failed: {outcome.message[:200]}")
            return outcome
        return run

    # termination -----------------------------------------------------------------------

    async def _terminate(self, grace: int | None, delete: bool) -> None:
        if self._main is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._main)
        grace = effective_grace(self.pod) if grace is None else grace
        for c in self.containers:
            if c.process is not None and c.process.returncode is None:
                self.kubelet.record_event(self.pod, "Normal", "Killing",
                                          f"Stopping container {c.name}")
        results = await asyncio.gather(*(self._kill(c, grace) for c in self.containers),
                                       return_exceptions=True)
        for c, result in zip(self.containers, results, strict=True):
            if isinstance(result, TerminationRecord):
                self.records[c.name] = result
                c.termination = result
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for c in self.containers:
            c.ready = False
            if "terminated" not in c.state:
                code = c.exit_code if c.exit_code is not None else 0
                c.state = {"terminated": {"exitCode": code,
                                          "reason": "Completed" if code == 0 else "Error",
                                          "finishedAt": rfc3339()}}
        # Terminal phase before deletion (kubelet >= 1.27, kubernetes/kubernetes#115331).
        ok = all((c.exit_code or 0) == 0 for c in self.containers)
        self.phase = "Succeeded" if ok else "Failed"
        self.mark_dirty()
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        if delete:
            await self.flush_status()
            await self.kubelet.delete_pod(self.namespace, self.name)
        self.kubelet.ips.release(self.pod_ip)
        # Gone from the API and no process left: its directory goes (emptyDirs, logs).
        volumes.remove(self.dir)
        self.kubelet.terminated.append(self)
        self.finished.set()

    async def _kill(self, c: ContainerState, grace: int) -> TerminationRecord | None:
        await self._stop_probes_except_readiness(c)
        if c.process is None or c.process.returncode is not None:
            return None
        record = await kill_container(c.process, grace=grace, prestop=self._prestop(c))
        c.exit_code = record.exit_code
        return record

    async def _stop_probes_except_readiness(self, c: ContainerState) -> None:
        keep = [w for w in c.probes if w.spec.kind is ProbeType.READINESS]
        stop = [w for w in c.probes if w.spec.kind is not ProbeType.READINESS]
        c.probes = keep
        await asyncio.gather(*(w.stop() for w in stop), return_exceptions=True)

    # the node's reboot -----------------------------------------------------------------

    async def power_loss(self) -> None:
        """The machine goes down (lab.node.reboot): every process of the pod dies at once,
        preStop hooks included. Nothing is written to the API (the kubelet is down with
        it); boot() starts the containers again, or finishes a termination under way."""
        if self.finished.is_set():
            return
        if self._main is not None and self._launched and not self._main.done():
            # Its containers are being started (nothing in between waits on the API).
            with contextlib.suppress(Exception):
                await asyncio.shield(self._main)
        if self._termination is not None and not self._termination.done():
            self._termination.cancel()  # its hooks die with the machine
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._termination
            self._termination = None
        # The kubelet's own work on the pod ends too: watching for exits, a crash loop's
        # back-off, a probe's kill. (A process being started when cancelled is killed.)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._lost = {c.name: str(c.state["running"].get("startedAt") or "")
                      for c in self.containers
                      if c.process is not None and c.process.returncode is None
                      and "running" in c.state}
        for c in self.containers:
            await self._stop_probes(c)
            c.ready = c.started = False
            if c.process is not None:
                c.process.send(signal.SIGKILL)
        for c in self.containers:
            if c.process is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(5):
                        await c.process.wait()

    async def boot(self) -> None:
        """After the boot, the kubelet syncs the pod again. Its sandbox is gone, so every
        container is started anew per restartPolicy (kuberuntime computePodActions):
        Always all of them, OnFailure all but those that succeeded, Never none (the pod
        then fails). A container that was running shows the runtime's record of it after a
        restart: terminated, exit code 255, reason Unknown (containerd's CRI restart.go
        loadContainer: unknownExitCode, unknownExitReason); each started one counts a
        restart."""
        lost, self._lost = self._lost, {}
        if self.terminating:
            # A pod deleted before or during the down time: its containers are gone, so
            # the kubelet only finishes the deletion.
            if self._termination is None:
                self._termination = asyncio.ensure_future(self._terminate(*self._stop_args))
            return
        if not self._launched:
            return  # bound while the node was down: its own start goes on now
        now = rfc3339()
        for c in self.containers:
            if c.name in lost:
                c.exit_code = UNKNOWN_EXIT_CODE
                c.state = {"terminated": {
                    "exitCode": UNKNOWN_EXIT_CODE, "reason": UNKNOWN_EXIT_REASON,
                    "startedAt": lost[c.name], "finishedAt": now,
                    "containerID": c.container_id(self.uid)}}
        policy = str(self.pod["spec"].get("restartPolicy") or "Always")
        again = [c for c in self.containers if c.process is not None and (
            policy == "Always" or (policy == "OnFailure" and c.exit_code != 0))]
        if again:
            self.kubelet.record_event(self.pod, "Normal", "SandboxChanged",
                                      "Pod sandbox changed, it will be killed and re-created.")
        for c in again:
            if self.stopping():  # deleted meanwhile
                return
            if "terminated" in c.state:
                c.last_state = c.state
            c.restart_count += 1
            await self._start_container(c)
        if not again and all(c.exit_code is not None for c in self.containers):
            self.phase = "Succeeded" if all(c.exit_code == 0 for c in self.containers) \
                else "Failed"
        self.mark_dirty()

    async def abandon(self) -> None:
        """Stop at once (lab shutdown): SIGKILL every container, no API calls."""
        for c in self.containers:
            if c.process is not None:
                c.process.send(signal.SIGKILL)
        for task in [*self._tasks, self._main, self._writer, self._termination]:
            if task is not None:
                task.cancel()
        for c in self.containers:
            await self._stop_probes(c)
        pending = [t for t in [*self._tasks, self._main, self._writer, self._termination]
                   if t is not None]
        await asyncio.gather(*pending, return_exceptions=True)
        for c in self.containers:
            if c.process is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(5):
                        await c.process.wait()
        self.kubelet.ips.release(self.pod_ip)


def _qos_class(pod: dict[str, Any]) -> str:
    containers = pod.get("spec", {}).get("containers") or []
    requests = [c.get("resources", {}).get("requests") or {} for c in containers]
    limits = [c.get("resources", {}).get("limits") or {} for c in containers]
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(
        lim.get("cpu") and lim.get("memory")
        and all(req.get(k, lim.get(k)) == lim.get(k) for k in ("cpu", "memory"))
        for req, lim in zip(requests, limits, strict=True))
    return "Guaranteed" if guaranteed else "Burstable"


# --- the kubelet ---------------------------------------------------------------------------

class Kubelet:
    def __init__(self, client: AsyncClient, config: NodeConfig, *, state_dir: Path,
                 http: httpx.AsyncClient, restart_backoff: float = 10.0,
                 api_slots: asyncio.Semaphore | None = None,
                 heartbeat_seconds: float = HEARTBEAT_SECONDS,
                 lease_seconds: float = NODE_LEASE_SECONDS) -> None:
        self.client = client
        self.config = config
        self.state_dir = state_dir
        self.http = http
        # Requests in flight to the API at once (the kubelet's kubeAPIQPS/Burst limits):
        # without a bound, 1,000 pods starting together queue past the client's timeout.
        self.api_slots = api_slots or asyncio.Semaphore(API_CONCURRENCY)
        self.restart_backoff = restart_backoff
        self.heartbeat_seconds = heartbeat_seconds
        self.lease_seconds = lease_seconds
        self.ips = PodIPs(config.subnet)
        self.pods: dict[str, PodWorker] = {}  # by uid
        self.terminated: list[PodWorker] = []  # finished terminations, with their records
        self._started = rfc3339()
        self.boot_id = str(uuid.uuid4())  # as /proc/sys/kernel/random/boot_id: one per boot
        self.kubelet_version = LAB_KUBELET_VERSION
        self.ready = True
        self._ready_since = self._started
        self.rebooting = False
        # Set while the kubelet runs; a rebooting node's is down: it writes nothing to the
        # API and starts nothing until the boot.
        self.up = asyncio.Event()
        self.up.set()
        # Set while the API can hear the kubelet; a cut-off node's cannot (lab.node.
        # partition): it writes nothing and the pod changes it would watch wait in _held.
        self.connected = asyncio.Event()
        self.connected.set()
        self._held: dict[str, tuple[str, dict[str, Any]]] = {}  # by pod uid
        self._heartbeat: asyncio.Task[None] | None = None
        self._events: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self.config.name

    async def reach_api(self) -> None:
        """Until the kubelet's writes can reach the API server."""
        await self.up.wait()
        await self.connected.wait()

    async def register(self) -> None:
        manifest = node_manifest(self.config)
        try:
            await self.client.create(Node.from_dict(manifest))  # type: ignore[call-overload]
        except ApiError as exc:
            if exc.status.code != 409:
                raise
            await self.client.patch(Node, self.name, {"metadata": manifest["metadata"]},
                                    patch_type=PatchType.MERGE)
        await self._post_status()
        self._heartbeat = asyncio.ensure_future(self._beat())

    async def _post_status(self) -> None:
        status = node_status(self.config, started=self._started, boot_id=self.boot_id,
                             kubelet_version=self.kubelet_version, ready=self.ready,
                             ready_since=self._ready_since)
        await self.client.patch(Node.Status, self.name, {"status": status},
                                patch_type=PatchType.STRATEGIC)

    async def replace_machine(self) -> None:
        """A new machine under the same name: a new boot, and the Node registered again
        (a new UID once the old object was deleted), as a replaced cloud VM's kubelet does."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        self._started = self._ready_since = rfc3339()
        self.boot_id = str(uuid.uuid4())
        await self.register()

    async def reboot(self, request: RebootRequest) -> None:
        """A reboot (and an upgrade, with a kubelet version) as the API sees one
        (lab.node.reboot): every container dies, NotReady, down for a while without
        heartbeats or pod status, then a new boot ID, the kubelet's version, Ready, a
        NodeRebooted event, and the pods' containers started again (PodWorker.boot)."""
        if self.rebooting:
            return
        self.rebooting = True
        try:
            # taken first, so the watch does not hand the same request over again
            await self.client.patch(Node, self.name,
                                    {"metadata": {"annotations": {REBOOT: None}}},
                                    patch_type=PatchType.MERGE)
            if self._heartbeat is not None:
                self._heartbeat.cancel()
                await asyncio.gather(self._heartbeat, return_exceptions=True)
            self.up.clear()
            workers = list(self.pods.values())
            await asyncio.gather(*(w.power_loss() for w in workers), return_exceptions=True)
            # Posted here for the node lifecycle controller, which on a cluster marks the
            # silent node NotReady after its grace period.
            self.ready, self._ready_since = False, rfc3339()
            await self._post_status()
            await asyncio.sleep(request.down_seconds)
            self._started = self._ready_since = rfc3339()
            self.boot_id = str(uuid.uuid4())
            if request.kubelet_version:
                self.kubelet_version = request.kubelet_version
            self.ready = True
            await self._post_status()
            await self._post_node_event(
                "Warning", "NodeRebooted",
                f"Node {self.name} has been rebooted, boot id: {self.boot_id}")
            self.up.set()
            await asyncio.gather(*(w.boot() for w in workers), return_exceptions=True)
            if self.connected.is_set():
                self._heartbeat = asyncio.ensure_future(self._beat())
        finally:
            self.up.set()
            self.rebooting = False

    async def _post_node_event(self, kind: str, reason: str, message: str) -> None:
        stamp = rfc3339()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{self.name}.{time.time_ns():x}", "namespace": "default"},
            "involvedObject": {"kind": "Node", "apiVersion": "v1", "name": self.name,
                               "uid": self.name},
            "reason": reason, "message": message, "type": kind, "count": 1,
            "firstTimestamp": stamp, "lastTimestamp": stamp,
            "source": {"component": "kubelet", "host": self.name},
        }
        with contextlib.suppress(ApiError, httpx.HTTPError, OSError):
            await self.client.create(Event.from_dict(event))  # type: ignore[call-overload]

    async def _beat(self) -> None:
        """The lease renewed every quarter of its duration, the status every
        heartbeat_seconds; the first renewal at once (a kubelet starting or coming back)."""
        loop = asyncio.get_running_loop()
        status_at = loop.time() + self.heartbeat_seconds
        while True:
            with contextlib.suppress(ApiError, httpx.HTTPError, OSError):
                await self._renew_lease()
            if loop.time() >= status_at:
                status_at = loop.time() + self.heartbeat_seconds
                with contextlib.suppress(ApiError, httpx.HTTPError, OSError):
                    await self._post_status()
            await asyncio.sleep(min(self.lease_seconds * LEASE_RENEW_FRACTION,
                                    max(0.0, status_at - loop.time())))

    async def _renew_lease(self) -> None:
        renewed = {"spec": {"renewTime": rfc3339_micro()}}
        try:
            await self.client.patch(Lease, self.name, renewed, namespace="kube-node-lease",
                                    patch_type=PatchType.MERGE)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            node = await self.client.get(Node, self.name)
            uid = node.metadata.uid if node.metadata is not None else None
            lease = {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": "kube-node-lease",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                  "name": self.name,
                                                  "uid": uid}]},
                "spec": {"holderIdentity": self.name,
                         "leaseDurationSeconds": max(1, round(self.lease_seconds)),
                         "renewTime": renewed["spec"]["renewTime"]}}
            await self.client.create(Lease.from_dict(lease))  # type: ignore[call-overload]

    def cut_off(self) -> None:
        """The node loses the API server (lab.node.partition): heartbeats stop, writes wait."""
        if not self.connected.is_set():
            return
        self.connected.clear()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

    async def reconnect(self) -> None:
        """Back in touch: Ready posted again (with a transition), heartbeats resume, and
        the pod changes missed meanwhile are handled as a relist would hand them over."""
        if self.connected.is_set():
            return
        self._ready_since = rfc3339()
        self.connected.set()
        with contextlib.suppress(ApiError, httpx.HTTPError, OSError):
            await self._post_status()
        if self._heartbeat is None and not self.rebooting:
            self._heartbeat = asyncio.ensure_future(self._beat())
        held, self._held = self._held, {}
        for kind, pod in held.values():
            self.handle(kind, pod)

    def handle(self, kind: str, pod: dict[str, Any]) -> None:
        uid = str(pod["metadata"].get("uid", ""))
        if not self.connected.is_set():
            self._held[uid] = (kind, pod)  # its watch is down: the last state counts
            return
        worker = self.pods.get(uid)
        if kind == "DELETED":
            if worker is not None and not worker.terminating:
                # Force-deleted from the API: stop the containers without further API calls,
                # with the grace a v1.31 kubelet gives them (the spec's; see effective_grace).
                worker.pod = pod
                worker.begin_termination(grace=effective_grace(pod), delete=False)
            return
        if worker is None:
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                return  # already finished; nothing to run
            worker = PodWorker(self, pod)
            self.pods[uid] = worker
            worker.start()
            self._forget_when_done(worker)
        worker.update(pod)

    def _forget_when_done(self, worker: PodWorker) -> None:
        async def forget() -> None:
            await worker.finished.wait()
            self.pods.pop(worker.uid, None)
        task = asyncio.ensure_future(forget())
        self._events.add(task)
        task.add_done_callback(self._events.discard)

    async def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await self.reach_api()
        async with self.api_slots:
            await self.client.patch(Pod.Status, name, {"status": status}, namespace=namespace,
                                    patch_type=PatchType.STRATEGIC)

    async def delete_pod(self, namespace: str, name: str) -> None:
        await self.reach_api()
        async with self.api_slots:
            with contextlib.suppress(ApiError):
                await self.client.delete(Pod, name, namespace=namespace, grace_period=0)

    def record_event(self, pod: dict[str, Any], kind: str, reason: str, message: str) -> None:
        """Post an Event about a pod (best effort, as the kubelet's recorder)."""
        task = asyncio.ensure_future(self._post_event(pod, kind, reason, message))
        self._events.add(task)
        task.add_done_callback(self._events.discard)

    async def _post_event(self, pod: dict[str, Any], kind: str, reason: str,
                          message: str) -> None:
        meta = pod["metadata"]
        stamp = rfc3339()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{time.time_ns():x}",
                         "namespace": meta.get("namespace", "default")},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"],
                               "namespace": meta.get("namespace", "default"),
                               "uid": meta.get("uid", "")},
            "reason": reason, "message": message, "type": kind, "count": 1,
            "firstTimestamp": stamp, "lastTimestamp": stamp,
            "source": {"component": "kubelet", "host": self.name},
        }
        await self.reach_api()
        async with self.api_slots:
            with contextlib.suppress(ApiError, httpx.HTTPError, OSError, Exception):
                await self.client.create(Event.from_dict(event))  # type: ignore[call-overload]

    async def shutdown(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        await asyncio.gather(*(w.abandon() for w in list(self.pods.values())),
                             return_exceptions=True)
        self.pods.clear()
        for task in list(self._events):
            task.cancel()
        await asyncio.gather(*self._events, return_exceptions=True)


class NodePool:
    """The kubelets of one lab, sharing one pod watch (dispatch by spec.nodeName).

    The watch is the project's informer (drainsafe.kube.watch) over `watch_client`."""

    def __init__(self, client: AsyncClient, configs: list[NodeConfig], *, state_dir: Path,
                 watch_client: KubeClient, restart_backoff: float = 10.0,
                 lease_seconds: float = NODE_LEASE_SECONDS) -> None:
        self.client = client
        self.http = handlers.probe_client()
        self.api_slots = asyncio.Semaphore(API_CONCURRENCY)
        self.kubelets = {c.name: Kubelet(client, c, state_dir=state_dir, http=self.http,
                                         restart_backoff=restart_backoff,
                                         api_slots=self.api_slots,
                                         lease_seconds=lease_seconds) for c in configs}
        self.informer = Informer(watch_client, api_path("v1", "pods"), on_event=self._dispatch)
        # Each kubelet watches its Node, as a real one does; here only for a reboot request.
        self.node_informer = Informer(watch_client, api_path("v1", "nodes"),
                                      on_event=self._node_event)
        self._reboots: set[asyncio.Task[None]] = set()

    def _node_event(self, kind: str, node: dict[str, Any]) -> None:
        kubelet = self.kubelets.get(str(node["metadata"].get("name")))
        if kubelet is not None and kind != "DELETED":
            # The pool plays the network between node and API server (lab.node.partition).
            if is_cut_off(node):
                kubelet.cut_off()
            elif not kubelet.connected.is_set():
                self._spawn(kubelet.reconnect())
        request = requested(node) if kind != "DELETED" else None
        if kubelet is None or request is None or kubelet.rebooting:
            return
        self._spawn(kubelet.reboot(request))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._reboots.add(task)
        task.add_done_callback(self._reboots.discard)

    def _dispatch(self, kind: str, pod: dict[str, Any]) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        kubelet = self.kubelets.get(str(node)) if node else None
        if kubelet is not None:
            kubelet.handle(kind, pod)

    async def start(self) -> None:
        await asyncio.gather(*(k.register() for k in self.kubelets.values()))
        await self.informer.start(sync_timeout=30)
        await self.node_informer.start(sync_timeout=30)

    def worker(self, namespace: str, name: str) -> PodWorker | None:
        for kubelet in self.kubelets.values():
            for w in kubelet.pods.values():
                if w.namespace == namespace and w.name == name:
                    return w
        return None

    def pids(self) -> list[int]:
        found = []
        for kubelet in self.kubelets.values():
            for w in kubelet.pods.values():
                for c in w.containers:
                    if c.process is not None and c.process.pid is not None \
                            and c.process.returncode is None:
                        found.append(c.process.pid)
        return found

    async def stop(self) -> None:
        await self.informer.stop()
        await self.node_informer.stop()
        for task in list(self._reboots):
            task.cancel()
        await asyncio.gather(*self._reboots, return_exceptions=True)
        await asyncio.gather(*(k.shutdown() for k in self.kubelets.values()),
                             return_exceptions=True)
        await self.http.aclose()
