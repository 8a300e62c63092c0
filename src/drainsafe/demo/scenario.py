"""One drain under streaming load, on the lab: the scenario behind `drainsafe demo`,
bench/bench_drain.py and the drain's acceptance tests.

A lab of GPU nodes runs the example streaming server (drainsafe.workload.streaming) with
2 replicas, one GPU each, behind a Service and a PDB (maxUnavailable 1). Constant streaming
load goes through the Service's ClusterIP path, whose proxies learn about endpoint changes
after a propagation delay: short requests, and optionally long generations beside them (the
seeds' 90 s generation against the default 30 s grace). Then one GPU node is drained, with
`drainsafe drain` or `kubectl drain`, on one of three pod settings:
- naive: plain uvicorn, no preStop, readiness on /health (it closes its listener at SIGTERM
  and waits for open streams until SIGKILL);
- the seeds' recommendation: plain uvicorn with a preStop `touch shutting-down; sleep N`,
  a readiness probe that fails once that file exists, and a grace period covering hook and
  longest request;
- drain-aware: `drainsafe serve` with a drain delay and a shutdown deadline.

With kind LeaderWorkerSet (kubernetes-sigs/lws v0.10.0, the lab's controller) the workload
is `replicas` groups of `group_size` pods, one GPU each, every pod running the server; a
ClusterIP Service selects the leaders (worker-index 0; the headless Service lws makes is
named as the set, so this one is `llm-leaders`), the PDB selects every pod of the groups,
capacity is counted in whole Ready groups, and the node drained is one holding a worker.

Measured: every request's outcome, the pods' lifecycle (verify's watch: created, Ready,
endpoint changes, termination, exit code, deletion), when the drain command returned, when
the node was empty of the workload's pods, the Ready count over time (at every change and
every 0.1 s), when the service was back at its full Ready count, the replacement's start-up,
and lower bounds from the settings alone (so they are bounds whatever the run measured).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.kube.objects import (
    DEFAULT_GRACE_SECONDS,
    LWS_WORKER_INDEX_LABEL,
    condition,
    is_active,
    is_ready,
    lws_group_of,
    lws_ready_groups,
    uid_of,
)
from drainsafe.server.config import ADMIN_PORT_NAME, DEFAULT_ADMIN_PORT, DEFAULT_READY_PATH
from drainsafe.shell import EXIT_FAILED, EXIT_OK
from drainsafe.verify.load import LoadRun, LoadSpec, RequestResult
from drainsafe.verify.loadproc import run_load_process
from drainsafe.verify.record import (
    POD_EXITED,
    POD_READY,
    LifecycleEvent,
    Record,
)

Tool = Literal["drainsafe", "kubectl"]
Strategy = Literal["surge", "evict"]
Kind = Literal["Deployment", "StatefulSet", "LeaderWorkerSet"]
API: dict[Kind, tuple[str, str]] = {"Deployment": ("apps/v1", "deployments"),
                                    "StatefulSet": ("apps/v1", "statefulsets"),
                                    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/v1",
                                                        "leaderworkersets")}
KUBECTL_VERSIONED = Path("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")
APP = "llm"
NAMESPACE = "default"


@dataclass(frozen=True)
class ScenarioSettings:
    nodes: int = 3
    replicas: int = 2
    propagation: float = 1.0  # endpoint change -> proxies
    drain_delay: float = 2.0  # drainsafe serve keeps accepting this long after SIGTERM
    stream_seconds: float = 1.0  # each request's generation time
    model_load: float = 4.0  # replacement start-up (readiness initial delay)
    concurrency: int = 8
    warmup: float = 1.5
    grace: int = DEFAULT_GRACE_SECONDS
    drain_aware: bool = True
    prestop_sleep: float = 0.0  # plain uvicorn: preStop `touch shutting-down; sleep N`
    readiness_gate: bool = False  # plain uvicorn: readiness fails once shutting-down exists
    shutdown_timeout: float | None = None  # drainsafe serve's deadline (None: grace - delay - 5)
    long_seconds: float = 0.0  # a second load class of long generations (0: none)
    long_concurrency: int = 0
    token_interval: float = 0.05
    wait_timeout: float = 120.0  # for capacity to come back and the old pods to go
    guarded: bool = False  # a controller holds evictions until a stand-in is Ready
    strategy: Strategy = "surge"  # drainsafe drain --strategy
    min_available: int | None = None  # the PDB: minAvailable N instead of maxUnavailable 1
    hpa_min: int | None = None  # an HPA owns the scale: minReplicas N (maxReplicas +2)
    kind: Kind = "Deployment"  # the workload's controller (a StatefulSet: `llm-0`, ...)
    group_size: int = 2  # a LeaderWorkerSet's pods per group (replicas counts groups)
    app: str = APP  # the workload's name and `app` label (several workloads in one lab)
    gpus: int = 1  # nvidia.com/gpu per pod (0: a CPU-only tier)


def service_name(s: ScenarioSettings) -> str:
    """The Service the load goes through (a LeaderWorkerSet's own headless Service takes
    the set's name)."""
    return f"{s.app}-leaders" if s.kind == "LeaderWorkerSet" else s.app


def grouped(s: ScenarioSettings) -> int | None:
    return s.group_size if s.kind == "LeaderWorkerSet" else None


def kubectl_binary() -> str | None:
    if KUBECTL_VERSIONED.exists():
        return str(KUBECTL_VERSIONED)
    return shutil.which("kubectl")


READY_MARKER = "shutting-down"
"""The seeds' readiness gate: preStop creates it (in the container's directory, the lab's
working directory of the pod), and the readiness probe fails once it exists."""


def _health_check() -> list[str]:
    """An exec probe's HTTP GET of /health on the pod IP, with the Python the lab runs (curl
    may not be installed); -I -S keeps it to the standard library, started in ~20 ms."""
    return [sys.executable, "-I", "-S", "-c",
            "import os,urllib.request as u;"
            "u.urlopen('http://'+os.environ['POD_IP']+':8000/health',timeout=1)"]


def llm_manifests(s: ScenarioSettings) -> list[dict[str, Any]]:
    lifecycle: dict[str, Any] = {}
    ports: list[dict[str, Any]] = [{"name": "http", "containerPort": 8000}]
    if s.drain_aware:
        deadline = s.shutdown_timeout if s.shutdown_timeout is not None \
            else max(s.grace - s.drain_delay - 5, 1)
        # Readiness is on drainsafe serve's admin port (the pod IP: lab pods share the
        # host), which the Service does not list.
        command = [sys.executable, "-m", "drainsafe", "serve",
                   "drainsafe.workload.streaming:app", "--host", "$(POD_IP)", "--port", "8000",
                   "--admin-host", "$(POD_IP)", "--admin-port", str(DEFAULT_ADMIN_PORT),
                   "--no-access-log", "--drain-delay", f"{s.drain_delay:g}",
                   "--shutdown-timeout", f"{deadline:g}"]
        probe: dict[str, Any] = {"httpGet": {"path": DEFAULT_READY_PATH,
                                             "port": ADMIN_PORT_NAME}}
        ports.append({"name": ADMIN_PORT_NAME, "containerPort": DEFAULT_ADMIN_PORT})
    else:
        command = [sys.executable, "-m", "uvicorn", "drainsafe.workload.streaming:app",
                   "--host", "$(POD_IP)", "--port", "8000", "--no-access-log"]
        probe = {"httpGet": {"path": "/health", "port": "http"}}
        if s.prestop_sleep > 0 or s.readiness_gate:
            # The seeds' recipe (draining-a-gpu-node): fail readiness at once, then wait
            # for proxies to catch up before SIGTERM.
            lifecycle = {"preStop": {"exec": {"command": [
                "/bin/sh", "-c", f"touch {READY_MARKER}; sleep {s.prestop_sleep:g}"]}}}
        if s.readiness_gate:
            probe = {"exec": {"command": [
                "/bin/sh", "-c",
                f"! test -f {READY_MARKER} && exec \"$0\" \"$@\"", *_health_check()]}}
    container: dict[str, Any] = {
        "name": "server", "image": "vllm/vllm-openai", "command": command,
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                # drainsafe serve names the pod in each response (x-drainsafe-pod).
                {"name": "POD_NAME",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "DRAINSAFE_GRACE_SECONDS", "value": str(s.grace)},
                # The workload refuses generations above this; the long class may exceed 90 s.
                {"name": "DRAINSAFE_WORKLOAD_MAX_DURATION",
                 "value": f"{max(90.0, s.long_seconds, s.stream_seconds):g}"}],
        "ports": ports,
        "resources": ({"requests": {"cpu": "100m", "nvidia.com/gpu": str(s.gpus)},
                       "limits": {"nvidia.com/gpu": str(s.gpus)}} if s.gpus
                      else {"requests": {"cpu": "100m"}}),
        # An exec probe starts a process: on a loaded machine that can take over the
        # default 1 s timeout, which would drop a healthy pod from the endpoints.
        "readinessProbe": {**probe, "initialDelaySeconds": int(s.model_load),
                           "periodSeconds": 1, "failureThreshold": 1,
                           "timeoutSeconds": 3 if "exec" in probe else 1},
        **({"lifecycle": lifecycle} if lifecycle else {}),
    }
    labels = {"app": s.app}
    template = {"metadata": {"labels": labels},
                "spec": {"terminationGracePeriodSeconds": s.grace, "containers": [container]}}
    if s.kind == "LeaderWorkerSet":
        workload: dict[str, Any] = {
            "apiVersion": API[s.kind][0], "kind": s.kind,
            "metadata": {"name": s.app, "namespace": NAMESPACE},
            "spec": {"replicas": s.replicas, "leaderWorkerTemplate": {
                "size": s.group_size, "workerTemplate": template}}}
        # The leaders serve; one eviction takes a whole group, so the budget lets one
        # group's pods go (drainsafe.pdb reads it in groups).
        serves = {**labels, LWS_WORKER_INDEX_LABEL: "0"}
        unavailable = s.group_size
    else:
        workload = {"apiVersion": "apps/v1", "kind": s.kind,
                    "metadata": {"name": s.app, "namespace": NAMESPACE},
                    "spec": {"replicas": s.replicas, "selector": {"matchLabels": labels},
                             **({"serviceName": s.app} if s.kind == "StatefulSet" else {}),
                             "template": template}}
        serves, unavailable = labels, 1
    return [
        workload,
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": service_name(s), "namespace": NAMESPACE},
         "spec": {"selector": serves,
                  "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": s.app, "namespace": NAMESPACE},
         "spec": {**({"maxUnavailable": unavailable} if s.min_available is None
                     else {"minAvailable": s.min_available}),
                  "selector": {"matchLabels": labels}}},
        *([] if s.hpa_min is None else [
            {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
             "metadata": {"name": s.app, "namespace": NAMESPACE},
             "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": s.kind,
                                         "name": s.app},
                      "minReplicas": s.hpa_min, "maxReplicas": s.replicas + 2}}]),
    ]


@dataclass
class ScenarioResult:
    tool: Tool
    drain_aware: bool
    node: str
    ok: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    truncated: int = 0
    strategy: str = ""
    command_seconds: float = 0.0  # drain start -> the drain command returned
    capacity_seconds: float | None = None  # drain start -> full Ready count again
    empty_seconds: float | None = None  # drain start -> no pod of the workload on the node
    ready_at_return: int = 0
    lowest_ready: int = 0  # during the drain, every 0.1 s sample and every change
    samples: int = 0
    old_pods: list[str] = field(default_factory=list)
    evicted_by_api: list[str] = field(default_factory=list)  # DisruptionTarget seen
    pods_created: int = 0  # pods of the workload created during the drain
    replicas_after: int | None = None  # the workload's spec.replicas afterwards
    annotations_left: list[str] = field(default_factory=list)  # drainsafe.io/* afterwards
    longest_request_seconds: float = 0.0  # the longest successful request of the run
    replicas: int = 0  # desired: pods, or a LeaderWorkerSet's groups
    capacity_unit: str = "replicas"  # what lowest_ready and ready_history count ("groups")
    startup_seconds: float | None = None  # replacement created -> Ready
    # A LeaderWorkerSet: a new group's first pod created -> its last pod Ready (the leader's
    # pods come first, its workers' StatefulSet after it)
    group_startup_seconds: float | None = None
    lower_bound_seconds: float = 0.0  # of the drain command's time, from the settings alone
    capacity_bound_seconds: float = 0.0  # of the time to full Ready capacity, from settings
    causes: dict[str, int] = field(default_factory=dict)  # failed requests by cause
    seconds_below_desired: float = 0.0  # from the drain's start to the run's end
    drain_at: float = 0.0  # when the drain started, seconds since the run's zero
    zero_at: float = 0.0  # the run's zero, wall time (time.time())
    ready_history: list[tuple[float, int]] = field(default_factory=list)  # (t, Ready)
    kills: list[float] = field(default_factory=list)  # containers' exits by SIGKILL (t)
    left_cordoned: bool = False  # the node was unschedulable when the run ended
    exit_code: int = 0
    detail: str = ""
    record: Record | None = None

    @property
    def total_failed(self) -> int:
        return sum(self.failed.values())

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("record", "ready_history")}
        out["total_failed"] = self.total_failed
        return out


class ReadyTracker:
    """Watches the workload's pods; remembers when the Ready count changed (for capacity),
    when each pod was created, Ready and deleted, by UID (a StatefulSet's or a group's
    recreation takes the old pod's name, and lws may delete that recreation too: lws#998).
    The timeline's events come from verify's lifecycle watch (drainsafe.verify.watch),
    their one home. With `group_size` (a LeaderWorkerSet) the count is of whole Ready
    groups, as drain counts them (kube.objects.lws_ready_groups, the home of "group
    Ready")."""

    def __init__(self, t0: Callable[[], float], group_size: int | None = None,
                 app: str = APP) -> None:
        self.t0 = t0
        self.app = app
        self.group_size = group_size
        self.history: list[tuple[float, int]] = []
        self.created: dict[str, float] = {}
        self.ready_at: dict[str, float] = {}
        self.node_of: dict[str, str] = {}
        self.deleted_at: dict[str, float] = {}
        self.disruption_target: set[str] = set()
        self._pods: dict[str, dict[str, Any]] = {}  # the latest of each pod not deleted
        self.group_of: dict[str, int] = {}  # by UID: an LWS pod's group index

    def on_event(self, kind: str, pod: dict[str, Any]) -> None:
        now = time.time()
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get("app") != self.app:
            return
        name = str(meta.get("name"))
        uid = uid_of(pod) or name  # (a test's pod may have none)
        self.created.setdefault(uid, now)
        if (group := lws_group_of(pod)) is not None:
            self.group_of[uid] = group[1]
        if (pod.get("spec") or {}).get("nodeName"):
            self.node_of[name] = str(pod["spec"]["nodeName"])
        if (condition(pod, "DisruptionTarget") or {}).get("status") == "True":
            self.disruption_target.add(uid)
        before = self._pods.get(name)
        if kind == "DELETED":
            self._pods.pop(name, None)
            self.deleted_at[uid] = now
        else:
            self._pods[name] = pod
            if _serving(pod) and not (before is not None and (uid_of(before) or name) == uid
                                      and _serving(before)):
                self.ready_at.setdefault(uid, now)
        count = self.ready()
        if not self.history or self.history[-1][1] != count:
            self.history.append((now, count))

    def ready(self) -> int:
        """Ready pods, or whole Ready groups of a LeaderWorkerSet."""
        if self.group_size is None:
            return sum(1 for p in self._pods.values() if _serving(p))
        return len(lws_ready_groups(self._pods.values(), self.group_size))

    def capacity_back(self, since: float, want: int) -> float | None:
        """When the Ready count last returned to `want` after `since` (None: never dipped
        or not back)."""
        dipped = False
        back: float | None = None
        for t, count in self.history:
            if t < since:
                continue
            if count < want:
                dipped, back = True, None
            elif dipped and back is None:
                back = t
        return back if dipped else (since if self.ready() >= want else None)

    def lowest_since(self, since: float) -> int:
        """The lowest Ready count from `since` on, at every change."""
        before = [c for t, c in self.history if t < since]
        counts = [c for t, c in self.history if t >= since] + before[-1:]
        return min(counts) if counts else self.ready()


def _serving(pod: dict[str, Any]) -> bool:
    return is_ready(pod) and is_active(pod)


async def run_kubectl(binary: str, kubeconfig: Path, *args: str, timeout: float) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        binary, f"--kubeconfig={kubeconfig}", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode()


@dataclass
class Progress:
    """What a running scenario has seen so far, for a live display (read, never waited on)."""

    phase: str = ""
    ready: int = 0
    ok: int = 0
    failed: int = 0


def _load_spec(url: str, seconds: float, concurrency: int, s: ScenarioSettings) -> LoadSpec:
    body = json.dumps({"stream": True, "duration": seconds,
                       "token_interval": s.token_interval}).encode()
    return LoadSpec(url=f"{url}/v1/completions", method="POST", body=body, duration=86400,
                    concurrency=concurrency, timeout=seconds * 2 + 10,
                    headers=(("content-type", "application/json"),),
                    # A new connection per request: each one is routed afresh by the
                    # ClusterIP proxy, as many clients behind a Service are.
                    keepalive=False)


def lower_bounds(tool: Tool, s: ScenarioSettings) -> tuple[float, float]:
    """(drain command, full Ready capacity) lower bounds from the settings alone.

    Evict first (kubectl): the pod cannot be gone before its preStop hook returned (the hook
    runs to its end before SIGTERM), and the replacement is created only at the eviction and
    cannot be Ready before its readiness probe's initialDelaySeconds (the model load).
    Make before break (drainsafe drain, or any drain under drainsafe's controller): the
    stand-in must be Ready (initialDelaySeconds) before the eviction, and drainsafe serve
    keeps serving for its drain delay after it; capacity never has to drop, so its bound
    is 0."""
    if tool == "kubectl" and not s.guarded:
        return s.prestop_sleep, float(int(s.model_load))
    return float(int(s.model_load)) + (s.drain_delay if s.drain_aware else 0.0), 0.0


async def run_drain_under_load(
    lab: Any, tool: Tool, s: ScenarioSettings, *, say: Callable[[str], None] = lambda _m: None,
    progress: Progress | None = None,
    prepare: Callable[[Any], Awaitable[list[dict[str, Any]]]] | None = None,
    kubectl: str | None = None, kubectl_args: tuple[str, ...] = (),
    on_drain_progress: Callable[[str], None] | None = None,
    turn: Callable[[], Awaitable[None]] | None = None,
    on_load_stopped: Callable[[], None] | None = None,
) -> ScenarioResult:
    """Deploy (if needed), load, drain one node with `tool`, measure. `lab` is a started Lab.
    `prepare(lab)` runs first (e.g. installs a controller) and returns manifests to apply
    before the workload's. `kubectl`: the binary for tool "kubectl" (default: 1.33's, else
    the one on PATH), `kubectl_args` added to its drain command. `on_drain_progress`
    receives `drainsafe drain`'s progress lines (a benchmark's timeline of where the
    drain's time goes). `turn()` is awaited once the workload serves, before anything is
    measured, and `on_load_stopped()` called when the load stops (the streams in flight
    still finishing): the demo's runs take turns there, each drained alone while the next
    one deploys and the last one's streams end."""
    from drainsafe.demo import measure
    from drainsafe.drain.execute import DrainSettings, NodeDrainer
    from drainsafe.verify.watch import LifecycleWatch

    live = progress or Progress()
    extra = [] if prepare is None else await prepare(lab)
    say("deploying the streaming server: 2 replicas, a Service, a PDB; loading the model")
    await lab.apply(*extra, *llm_manifests(s))
    await wait_workload(lab, s, timeout=s.wait_timeout + s.model_load)
    await lab.wait_backends(NAMESPACE, service_name(s), s.replicas, timeout=60)
    url = lab.service_url(NAMESPACE, service_name(s))
    specs = [_load_spec(url, s.stream_seconds, s.concurrency, s)]
    if s.long_concurrency and s.long_seconds > 0:
        specs.append(_load_spec(url, s.long_seconds, s.long_concurrency, s))
    if turn is not None:
        await turn()

    def counted(r: RequestResult) -> None:
        if r.outcome.ok:
            live.ok += 1
        else:
            live.failed += 1

    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        pods, _ = await client.list(api_path("v1", "pods", namespace=NAMESPACE),
                                    {"labelSelector": f"app={s.app}"})
        # A LeaderWorkerSet: a node holding a worker (the leaders serve the traffic).
        node = sorted(p["spec"]["nodeName"] for p in pods if grouped(s) is None
                      or (p["metadata"].get("labels") or {}).get(LWS_WORKER_INDEX_LABEL)
                      != "0")[0]
        result = ScenarioResult(tool=tool, drain_aware=s.drain_aware, node=node,
                                replicas=s.replicas,
                                capacity_unit="replicas" if grouped(s) is None else "groups")
        loop = asyncio.get_running_loop()
        zero = (loop.time(), time.time())
        tracker = ReadyTracker(lambda: zero[1], grouped(s), s.app)

        def on_pod(kind: str, pod: dict[str, Any]) -> None:
            tracker.on_event(kind, pod)
            live.ready = tracker.ready()

        informer = Informer(client, api_path("v1", "pods", namespace=NAMESPACE),
                            label_selector=f"app={s.app}", on_event=on_pod)
        lifecycle = LifecycleWatch(client, NAMESPACE, f"app={s.app}", clock_zero=zero)
        await informer.start()
        # The initial list adds the pods one by one: that is not a dip in capacity.
        tracker.history = [(time.time(), tracker.ready())]
        await lifecycle.start()
        stop = asyncio.Event()
        say("streaming load: warming up")
        # The load runs in its own process: in this loop it would starve the lab's (issue 28).
        loaders = [asyncio.ensure_future(run_load_process(spec, stop=stop, clock_zero=zero,
                                                          on_result=counted))
                   for spec in specs]
        # The pods on the node, by UID -> name.
        old = {uid_of(p): p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == node}
        result.old_pods = sorted(old.values())
        samples: list[int] = []
        sampling = asyncio.Event()

        async def sample() -> None:
            await sampling.wait()
            while True:  # the issue's 0.1 s samples, beside the change history
                samples.append(tracker.ready())
                await asyncio.sleep(0.1)

        sampler = asyncio.ensure_future(sample())
        started = returned = time.time()
        try:
            await asyncio.sleep(s.warmup)
            say(f"{tool} drain {node}")
            started = time.time()
            known = set(tracker.created)
            sampling.set()
            if tool == "drainsafe":
                from drainsafe.drain.plan import DrainOptions

                settings = DrainSettings(timeout=300 + s.wait_timeout,
                                         options=DrainOptions(strategy=s.strategy))
                result.strategy = s.strategy
                report = await NodeDrainer(client, node, settings,
                                           on_progress=on_drain_progress).run()
                result.exit_code = EXIT_OK if report.ok else EXIT_FAILED
                result.detail = report.failure
            else:
                binary = kubectl or kubectl_binary()
                if binary is None:
                    raise RuntimeError("kubectl is not installed")
                code, out = await run_kubectl(binary, lab.kubeconfig, "drain", node,
                                           "--ignore-daemonsets", "--delete-emptydir-data",
                                           "--timeout=300s", *kubectl_args, timeout=330)
                result.exit_code = code
                result.detail = out.strip().splitlines()[-1] if out.strip() else ""
                result.strategy = "evict"
            returned = time.time()
            result.command_seconds = returned - started
            result.ready_at_return = tracker.ready()
            # Keep the load on until capacity is back and the endpoint changes have landed.
            say(f"{tool} drain returned; waiting for full Ready capacity")
            await informer.wait_for(lambda _c: tracker.ready() >= s.replicas,
                                    timeout=s.wait_timeout, what="full Ready capacity")
            say("waiting for the old pods to go")
            await informer.wait_for(lambda _c: all(n in tracker.deleted_at for n in old),
                                    timeout=s.wait_timeout, what="the old pods gone")
            await asyncio.sleep(s.propagation + 1)
        finally:
            stop.set()
            if on_load_stopped is not None:
                on_load_stopped()
            say("load stopped; letting the streams in flight finish")
            runs: list[LoadRun] = list(await asyncio.gather(*loaders))
            ended = time.time()
            await lifecycle.stop()
            await informer.stop()
            sampler.cancel()
        run = _merge(runs)
        node_obj = await client.get(api_path("v1", "nodes", name=node))
        result.left_cordoned = bool((node_obj.get("spec") or {}).get("unschedulable"))
        result.samples = len(samples)
        result.lowest_ready = min([*samples, tracker.lowest_since(started)])
        result.evicted_by_api = sorted(n for u, n in old.items()
                                       if u in tracker.disruption_target)
        result.pods_created = len(set(tracker.created) - known)
        gone = [tracker.deleted_at[n] for n in old if n in tracker.deleted_at]
        result.empty_seconds = max(gone) - started if gone and len(gone) == len(old) else None
        dep = await client.get(api_path(*API[s.kind], namespace=NAMESPACE, name=s.app))
        result.replicas_after = (dep.get("spec") or {}).get("replicas")
        result.annotations_left = sorted(
            k for k in ((dep.get("metadata") or {}).get("annotations") or {})
            if k.startswith("drainsafe.io/"))
    back = tracker.capacity_back(started, s.replicas)
    result.capacity_seconds = None if back is None else back - started
    # Every pod created during the drain: stand-ins and recreations (a StatefulSet's or
    # a group's, under the old names).
    new = [n for n in tracker.ready_at if tracker.created.get(n, 0) >= started]
    if new:
        result.startup_seconds = max(tracker.ready_at[u] - tracker.created[u] for u in new)
        spans: dict[int, tuple[float, float]] = {}
        for u in new:
            born, ready = tracker.created[u], tracker.ready_at[u]
            if (group := tracker.group_of.get(u)) is not None:
                first, last = spans.get(group, (born, ready))
                spans[group] = (min(first, born), max(last, ready))
        if spans:
            result.group_startup_seconds = max(last - first for first, last in spans.values())
    result.longest_request_seconds = max((r.total for r in run.results if r.outcome.ok),
                                         default=0.0)
    result.lower_bound_seconds, result.capacity_bound_seconds = lower_bounds(tool, s)
    result.drain_at = started - zero[1]
    result.zero_at = zero[1]
    result.ready_history = [(t - zero[1], c) for t, c in tracker.history]
    result.seconds_below_desired = measure.seconds_below(
        result.ready_history, result.drain_at, ended - zero[1], s.replicas)
    result.kills = [e.t for e in lifecycle.events if e.kind == POD_EXITED
                    and e.detail.split(" (")[0].endswith(f"exit {measure.SIGKILL_EXIT}")]
    result.causes = measure.causes(run.results, result.kills)
    result.truncated = measure.truncated(run.results)
    # Pods that were Ready before the run get a lane too (verify's watch reports changes).
    before = [LifecycleEvent(t=0.0, kind=POD_READY, pod=p["metadata"]["name"],
                             detail="Ready before the run") for p in pods if is_ready(p)]
    result.record = Record.from_run(run, [
        *before,
        *lifecycle.events,
        LifecycleEvent(t=result.drain_at, kind="drain_started", pod=node),
        LifecycleEvent(t=returned - zero[1], kind="drain_returned", pod=node),
    ])
    for r in run.results:
        if r.outcome.ok:
            result.ok += 1
        else:
            result.failed[r.outcome.label] = result.failed.get(r.outcome.label, 0) + 1
    return result


async def wait_workload(lab: Any, s: ScenarioSettings, *, timeout: float) -> None:
    """Until the workload has all its replicas Available (a Deployment: the lab's rollout
    status test; a StatefulSet: status.availableReplicas at its generation)."""
    if s.kind == "Deployment":
        await lab.wait_available(NAMESPACE, s.app, timeout=timeout)
        return

    def available(cache: Mapping[str, dict[str, Any]]) -> bool:
        sts = cache.get(f"{NAMESPACE}/{s.app}") or {}
        st = sts.get("status") or {}
        if s.kind == "LeaderWorkerSet":  # whole Ready groups (it has no observedGeneration)
            return st.get("readyReplicas") == s.replicas == st.get("replicas")
        return (st.get("observedGeneration") == (sts.get("metadata") or {}).get("generation")
                and st.get("availableReplicas") == s.replicas == st.get("replicas"))

    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, Informer(
            client, api_path(*API[s.kind], namespace=NAMESPACE)) as informer:
        await informer.wait_for(available, timeout=timeout,
                                what=f"StatefulSet {NAMESPACE}/{s.app} Available")


def _merge(runs: list[LoadRun]) -> LoadRun:
    """The load classes as one run (same clock zero), requests in start order."""
    first = runs[0]
    results = sorted((r for run in runs for r in run.results), key=lambda r: r.start)
    return LoadRun(spec=first.spec, started_at=first.started_at, results=results,
                   not_started=sum(run.not_started for run in runs),
                   elapsed=max(run.elapsed for run in runs))
