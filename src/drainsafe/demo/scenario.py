"""One drain under streaming load, on the lab: the scenario behind `drainsafe demo` and
bench/bench_drain.py.

A lab of GPU nodes runs the example streaming server (drainsafe.workload.streaming) with
2 replicas, one GPU each, behind a Service and a PDB (maxUnavailable 1). Constant streaming
load goes through the Service's ClusterIP path, whose proxies learn about endpoint changes
after a propagation delay. Then one GPU node is drained, either with `drainsafe drain`
(drain-aware pods: `drainsafe serve` with a drain delay) or with `kubectl drain` (naive
pods: plain uvicorn, no drain delay; or the drain-aware pods, to compare the tools alone).

Measured: every request's outcome, when the drain command returned, when the node was
empty of the workload's pods, when the service was back at its full Ready count, the
lowest Ready count (every 0.1 s and at every change), the replacement's start-up time, and
the lower bound of make before break: replacement start-up + drain delay + longest
in-flight request (the old pod may only go once its replacement serves, and then takes
its drain delay and its last request).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.kube.objects import is_ready, is_terminating
from drainsafe.verify.load import LoadRun, LoadSpec, run_load
from drainsafe.verify.record import (
    POD_DELETED,
    POD_READY,
    POD_TERMINATING,
    LifecycleEvent,
    Record,
)

Tool = Literal["drainsafe", "kubectl"]
Strategy = Literal["surge", "evict"]
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
    grace: int = 30
    drain_aware: bool = True
    strategy: Strategy = "surge"  # drainsafe drain --strategy
    min_available: int | None = None  # the PDB: minAvailable N instead of maxUnavailable 1
    hpa_min: int | None = None  # an HPA owns the scale: minReplicas N (maxReplicas +2)


def kubectl_binary() -> str | None:
    if KUBECTL_VERSIONED.exists():
        return str(KUBECTL_VERSIONED)
    return shutil.which("kubectl")


def llm_manifests(s: ScenarioSettings) -> list[dict[str, Any]]:
    if s.drain_aware:
        # Readiness is on drainsafe serve's admin port (the pod IP: lab pods share the
        # host), which the Service does not list.
        command = [sys.executable, "-m", "drainsafe", "serve",
                   "drainsafe.workload.streaming:app", "--host", "$(POD_IP)", "--port", "8000",
                   "--admin-host", "$(POD_IP)", "--admin-port", "8490",
                   "--no-access-log", "--drain-delay", f"{s.drain_delay:g}",
                   "--shutdown-timeout", f"{max(s.grace - s.drain_delay - 5, 1):g}"]
        ready, ready_port = "/readyz", "drainsafe-admin"
        ports = [{"name": "http", "containerPort": 8000},
                 {"name": "drainsafe-admin", "containerPort": 8490}]
    else:
        command = [sys.executable, "-m", "uvicorn", "drainsafe.workload.streaming:app",
                   "--host", "$(POD_IP)", "--port", "8000", "--no-access-log"]
        ready, ready_port = "/health", "http"
        ports = [{"name": "http", "containerPort": 8000}]
    container = {
        "name": "server", "image": "vllm/vllm-openai", "command": command,
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                # drainsafe serve names the pod in each response (x-drainsafe-pod).
                {"name": "POD_NAME",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "DRAINSAFE_GRACE_SECONDS", "value": str(s.grace)}],
        "ports": ports,
        "resources": {"requests": {"cpu": "100m", "nvidia.com/gpu": "1"},
                      "limits": {"nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": ready, "port": ready_port},
                           "initialDelaySeconds": int(s.model_load), "periodSeconds": 1,
                           "failureThreshold": 1},
    }
    labels = {"app": APP}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": APP, "namespace": NAMESPACE},
         "spec": {"replicas": s.replicas, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"terminationGracePeriodSeconds": s.grace,
                                        "containers": [container]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": APP, "namespace": NAMESPACE},
         "spec": {"selector": labels,
                  "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": APP, "namespace": NAMESPACE},
         "spec": {**({"maxUnavailable": 1} if s.min_available is None
                     else {"minAvailable": s.min_available}),
                  "selector": {"matchLabels": labels}}},
        *([] if s.hpa_min is None else [
            {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
             "metadata": {"name": APP, "namespace": NAMESPACE},
             "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                         "name": APP},
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
    replicas_after: int | None = None  # the Deployment's spec.replicas afterwards
    annotations_left: list[str] = field(default_factory=list)  # drainsafe.io/* afterwards
    longest_request_seconds: float = 0.0  # the longest successful request of the run
    replicas: int = 0
    startup_seconds: float | None = None  # replacement created -> Ready
    lower_bound_seconds: float = 0.0
    exit_code: int = 0
    detail: str = ""
    record: Record | None = None

    @property
    def total_failed(self) -> int:
        return sum(self.failed.values())

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "record"}
        out["total_failed"] = self.total_failed
        return out


class ReadyTracker:
    """Watches the workload's pods; remembers when the Ready count changed (for capacity)
    and each pod's lifecycle (for the timeline)."""

    def __init__(self, t0: Callable[[], float]) -> None:
        self.t0 = t0
        self.history: list[tuple[float, int]] = []
        self.events: list[LifecycleEvent] = []
        self.created: dict[str, float] = {}
        self.ready_at: dict[str, float] = {}
        self.node_of: dict[str, str] = {}
        self.deleted_at: dict[str, float] = {}
        self.disruption_target: set[str] = set()
        self._state: dict[str, tuple[bool, bool]] = {}

    def on_event(self, kind: str, pod: dict[str, Any]) -> None:
        now = time.time()
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get("app") != APP:
            return
        name = str(meta.get("name"))
        ready = is_ready(pod)
        terminating = is_terminating(pod)
        self.created.setdefault(name, now)
        if (pod.get("spec") or {}).get("nodeName"):
            self.node_of[name] = str(pod["spec"]["nodeName"])
        if any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or []):
            self.disruption_target.add(name)
        before = self._state.get(name, (False, False))
        if kind == "DELETED":
            self._state.pop(name, None)
            self.deleted_at[name] = now
            self.events.append(LifecycleEvent(t=now - self.t0(), kind=POD_DELETED, pod=name))
        else:
            self._state[name] = (ready and not terminating, terminating)
            if ready and not before[0] and not terminating:
                self.ready_at.setdefault(name, now)
                self.events.append(LifecycleEvent(t=now - self.t0(), kind=POD_READY, pod=name))
            if terminating and not before[1]:
                self.events.append(LifecycleEvent(t=now - self.t0(), kind=POD_TERMINATING,
                                                  pod=name))
        count = sum(1 for r, _ in self._state.values() if r)
        if not self.history or self.history[-1][1] != count:
            self.history.append((now, count))

    def ready(self) -> int:
        return sum(1 for r, _ in self._state.values() if r)

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


async def _kubectl(binary: str, kubeconfig: Path, *args: str, timeout: float) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        binary, f"--kubeconfig={kubeconfig}", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode()


async def run_drain_under_load(
    lab: Any, tool: Tool, s: ScenarioSettings, *, say: Callable[[str], None] = lambda _m: None,
) -> ScenarioResult:
    """Deploy (if needed), load, drain one node with `tool`, measure. `lab` is a started Lab."""
    from drainsafe.drain.execute import DrainSettings, NodeDrainer

    await lab.apply(*llm_manifests(s))
    await lab.wait_available(NAMESPACE, APP, timeout=120)
    await lab.wait_backends(NAMESPACE, APP, s.replicas, timeout=60)
    url = lab.service_url(NAMESPACE, APP)
    body = json.dumps({"stream": True, "duration": s.stream_seconds,
                       "token_interval": 0.05}).encode()
    spec = LoadSpec(url=f"{url}/v1/completions", method="POST", body=body, duration=600,
                    concurrency=s.concurrency, timeout=s.stream_seconds * 5 + 10,
                    headers=(("content-type", "application/json"),),
                    # A new connection per request: each one is routed afresh by the
                    # ClusterIP proxy, as many clients behind a Service are.
                    keepalive=False)
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        pods, _ = await client.list(api_path("v1", "pods", namespace=NAMESPACE),
                                    {"labelSelector": f"app={APP}"})
        node = sorted(p["spec"]["nodeName"] for p in pods)[0]
        result = ScenarioResult(tool=tool, drain_aware=s.drain_aware, node=node,
                                replicas=s.replicas)
        loop = asyncio.get_running_loop()
        zero = (loop.time(), time.time())
        tracker = ReadyTracker(lambda: zero[1])
        informer = Informer(client, api_path("v1", "pods", namespace=NAMESPACE),
                            label_selector=f"app={APP}", on_event=tracker.on_event)
        await informer.start()
        stop = asyncio.Event()
        loader = asyncio.ensure_future(run_load(spec, stop=stop, clock_zero=zero))
        old = [p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == node]
        result.old_pods = old
        samples: list[int] = []
        sampling = asyncio.Event()

        async def sample() -> None:
            await sampling.wait()
            while True:  # the issue's 0.1 s samples, beside the change history
                samples.append(tracker.ready())
                await asyncio.sleep(0.1)

        sampler = asyncio.ensure_future(sample())
        try:
            await asyncio.sleep(s.warmup)
            say(f"draining {node} with {tool} drain under load")
            started = time.time()
            known = set(tracker.created)
            sampling.set()
            if tool == "drainsafe":
                from drainsafe.drain.plan import DrainOptions

                settings = DrainSettings(timeout=300,
                                         options=DrainOptions(strategy=s.strategy))
                result.strategy = s.strategy
                report = await NodeDrainer(client, node, settings).run()
                result.exit_code = 0 if report.ok else 1
                result.detail = report.failure
            else:
                binary = kubectl_binary()
                if binary is None:
                    raise RuntimeError("kubectl is not installed")
                code, out = await _kubectl(binary, lab.kubeconfig, "drain", node,
                                           "--ignore-daemonsets", "--delete-emptydir-data",
                                           "--timeout=300s", timeout=330)
                result.exit_code = code
                result.detail = out.strip().splitlines()[-1] if out.strip() else ""
                result.strategy = "evict"
            returned = time.time()
            result.command_seconds = returned - started
            result.ready_at_return = tracker.ready()
            # Keep the load on until capacity is back and the endpoint changes have landed.
            await informer.wait_for(lambda _c: tracker.ready() >= s.replicas, timeout=120,
                                    what="full Ready capacity")
            await informer.wait_for(lambda _c: all(n in tracker.deleted_at for n in old),
                                    timeout=120, what="the old pods gone")
            await asyncio.sleep(s.propagation + 1)
        finally:
            stop.set()
            run: LoadRun = await loader
            await informer.stop()
            sampler.cancel()
        result.samples = len(samples)
        result.lowest_ready = min([*samples, tracker.lowest_since(started)])
        result.evicted_by_api = sorted(n for n in old if n in tracker.disruption_target)
        result.pods_created = len(set(tracker.created) - known)
        gone = [tracker.deleted_at[n] for n in old if n in tracker.deleted_at]
        result.empty_seconds = max(gone) - started if gone and len(gone) == len(old) else None
        dep = await client.get(api_path("apps/v1", "deployments", namespace=NAMESPACE,
                                        name=APP))
        result.replicas_after = (dep.get("spec") or {}).get("replicas")
        result.annotations_left = sorted(
            k for k in ((dep.get("metadata") or {}).get("annotations") or {})
            if k.startswith("drainsafe.io/"))
        back = tracker.capacity_back(started, s.replicas)
        result.capacity_seconds = None if back is None else back - started
        new = [n for n in tracker.ready_at if tracker.created.get(n, 0) >= started]
        if new:
            result.startup_seconds = max(tracker.ready_at[n] - tracker.created[n] for n in new)
        longest = max((r.total for r in run.results if r.outcome.ok),
                      default=s.stream_seconds)
        result.longest_request_seconds = longest
        result.lower_bound_seconds = (
            (s.drain_delay if s.drain_aware else 0.0) + longest
            + (result.startup_seconds or s.model_load)
        )
        record = Record.from_run(run, [
            *tracker.events,
            LifecycleEvent(t=started - zero[1], kind="drain_started", pod=node),
            LifecycleEvent(t=returned - zero[1], kind="drain_returned", pod=node),
        ])
        result.record = record
        for r in run.results:
            label = r.outcome.label
            if r.outcome.ok:
                result.ok += 1
            else:
                result.failed[label] = result.failed.get(label, 0) + 1
                if label in ("truncated", "drain_marker"):
                    result.truncated += 1
    return result
