"""Several workloads under streaming load while one operation drains a set of nodes: the
scenario behind the NodeMaintenance acceptance test (issue 30,
tests/controller/test_maintenance_acceptance_lab.py) and bench/bench_maintenance.py.

Each workload is drainsafe.demo.scenario's streaming server (its manifests, Service and PDB;
its ReadyTracker, which counts whole Ready groups for a LeaderWorkerSet), named apart by
`ScenarioSettings.app`; the load through each workload's Service is verify's load process,
a new connection per request. The operation is any coroutine (a NodeMaintenance applied and
followed, `drainsafe drain -l`, `kubectl drain` node by node); measured around it: its
time, every workload's Ready count at every 0.1 s sample and every change, every request's
outcome, and what was left on the workloads afterwards.

`FLEET` sizes the three workloads for 6 one-GPU nodes of which 4 are maintained two at a
time: with two nodes cordoned, 4 GPUs remain schedulable, and make before break must find
room for a surge pod per drained replica and a whole new group for a LeaderWorkerSet whose
group loses a pod (drain.groupsurge). A Deployment of 1 (1 GPU), a LeaderWorkerSet of
1 group x 2 (2 GPUs) and a CPU-only StatefulSet of 1 use 3 GPUs: at worst 1 GPU pod plus
the group are on the two cordoned nodes and 3 of the 4 free GPUs are needed. A fourth GPU
pod (a GPU StatefulSet) would leave 2 free GPUs where the group and a replica need 3.
The drainsafe controller runs beside them on system nodes (Lab's system_nodes: tainted,
without GPUs), pinned there by nodeSelector and toleration, so no maintained node holds a
replica and every workload pod is on a worker, whatever the scheduler's scores.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from drainsafe.demo import measure
from drainsafe.demo.scenario import (
    API,
    NAMESPACE,
    ReadyTracker,
    ScenarioSettings,
    grouped,
    kubectl_binary,
    llm_manifests,
    run_kubectl,
    service_name,
    wait_workload,
)
from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.kube.objects import meta
from drainsafe.lab.cluster import SYSTEM_ROLE
from drainsafe.verify.load import LoadRun, LoadSpec
from drainsafe.verify.loadproc import run_load_process


def fleet(base: ScenarioSettings) -> tuple[ScenarioSettings, ...]:
    """The three workloads (module docstring: why these sizes)."""
    return (replace(base, kind="Deployment", app="chat", replicas=1),
            replace(base, kind="StatefulSet", app="embed", replicas=1, gpus=0),
            replace(base, kind="LeaderWorkerSet", app="llm", replicas=1, group_size=2))


def gpu_pods(workloads: Sequence[ScenarioSettings]) -> int:
    return sum(s.replicas * (grouped(s) or 1) for s in workloads if s.gpus)


async def deploy(lab: Any, workloads: Sequence[ScenarioSettings]) -> None:
    """Apply every workload, until each is Available and its Service has its backends."""
    await lab.apply(*[m for s in workloads for m in llm_manifests(s)])
    await asyncio.gather(*(wait_workload(lab, s, timeout=s.wait_timeout + s.model_load)
                           for s in workloads))
    for s in workloads:
        await lab.wait_backends(NAMESPACE, service_name(s), s.replicas, timeout=60)


@dataclass
class WorkloadOutcome:
    app: str
    kind: str
    desired: int  # replicas (groups for a LeaderWorkerSet)
    lowest_ready: int = 0  # during the operation: every 0.1 s sample and every change
    samples: int = 0
    ok: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # by outcome label
    truncated: int = 0  # streams that had started and did not finish
    pods_created: int = 0  # during the operation (surges and replacements)
    startup_seconds: float | None = None  # the slowest new pod's created -> Ready
    replicas_after: int | None = None
    annotations_left: list[str] = field(default_factory=list)  # drainsafe.io/* afterwards

    @property
    def total_failed(self) -> int:
        return sum(self.failed.values())


@dataclass
class FleetRun:
    seconds: float = 0.0  # operation started -> returned
    capacity_seconds: float = 0.0  # operation started -> every workload at desired again
    workloads: list[WorkloadOutcome] = field(default_factory=list)

    @property
    def lowest_fraction(self) -> float:
        """The lowest Ready/desired of any workload."""
        return min((w.lowest_ready / w.desired for w in self.workloads), default=1.0)

    @property
    def total_failed(self) -> int:
        return sum(w.total_failed for w in self.workloads)

    @property
    def truncated(self) -> int:
        return sum(w.truncated for w in self.workloads)

    @property
    def ok(self) -> int:
        return sum(w.ok for w in self.workloads)


def _load_spec(url: str, s: ScenarioSettings) -> LoadSpec:
    body = json.dumps({"stream": True, "duration": s.stream_seconds,
                       "token_interval": s.token_interval}).encode()
    return LoadSpec(url=f"{url}/v1/completions", method="POST", body=body, duration=86400,
                    concurrency=s.concurrency, timeout=s.stream_seconds * 2 + 10,
                    headers=(("content-type", "application/json"),), keepalive=False)


async def under_load(lab: Any, workloads: Sequence[ScenarioSettings],
                     operation: Callable[[], Awaitable[None]], *,
                     warmup: float = 1.0) -> FleetRun:
    """Load every workload's Service, run `operation`, keep the load on until every
    workload is back at its desired Ready count and the endpoints have settled, measure."""
    run = FleetRun()
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        zero = (asyncio.get_running_loop().time(), time.time())
        trackers = {s.app: ReadyTracker(lambda: zero[1], grouped(s), s.app) for s in workloads}

        def on_pod(kind: str, pod: dict[str, Any]) -> None:
            for t in trackers.values():  # each keeps its own app's pods
                t.on_event(kind, pod)

        informer = Informer(client, api_path("v1", "pods", namespace=NAMESPACE),
                            on_event=on_pod)
        await informer.start()
        for t in trackers.values():  # the initial list is not a dip
            t.history = [(time.time(), t.ready())]
        stop = asyncio.Event()
        loaders = {s.app: asyncio.ensure_future(run_load_process(
            _load_spec(lab.service_url(NAMESPACE, service_name(s)), s), stop=stop,
            clock_zero=zero)) for s in workloads}
        samples: dict[str, list[int]] = {s.app: [] for s in workloads}
        sampling = asyncio.Event()

        async def sample() -> None:
            await sampling.wait()
            while True:  # the 0.1 s samples, beside each tracker's change history
                for app, t in trackers.items():
                    samples[app].append(t.ready())
                await asyncio.sleep(0.1)

        sampler = asyncio.ensure_future(sample())
        started = time.time()
        known: dict[str, set[str]] = {}
        try:
            await asyncio.sleep(warmup)
            started = time.time()
            known = {app: set(t.created) for app, t in trackers.items()}
            sampling.set()
            await operation()
            run.seconds = time.time() - started
            await informer.wait_for(
                lambda _c: all(trackers[s.app].ready() >= s.replicas for s in workloads),
                timeout=max(s.wait_timeout for s in workloads), what="full Ready capacity")
            run.capacity_seconds = time.time() - started
            await asyncio.sleep(max(s.propagation for s in workloads) + 1)
        finally:
            stop.set()
            runs: dict[str, LoadRun] = {app: await f for app, f in loaders.items()}
            await informer.stop()
            sampler.cancel()
        for s in workloads:
            t = trackers[s.app]
            results = runs[s.app].results
            out = WorkloadOutcome(app=s.app, kind=s.kind, desired=s.replicas)
            out.samples = len(samples[s.app])
            out.lowest_ready = min([*samples[s.app], t.lowest_since(started)])
            out.ok = sum(1 for r in results if r.outcome.ok)
            for r in results:
                if not r.outcome.ok:
                    out.failed[r.outcome.label] = out.failed.get(r.outcome.label, 0) + 1
            out.truncated = measure.truncated(results)
            out.pods_created = len(set(t.created) - known.get(s.app, set()))
            new = [t.ready_at[u] - t.created[u] for u in t.ready_at
                   if u not in known.get(s.app, set())]
            if new:
                out.startup_seconds = max(new)
            obj = await client.get(api_path(*API[s.kind], namespace=NAMESPACE, name=s.app))
            out.replicas_after = (obj.get("spec") or {}).get("replicas")
            out.annotations_left = sorted(
                k for k in ((obj.get("metadata") or {}).get("annotations") or {})
                if k.startswith("drainsafe.io/"))
            run.workloads.append(out)
    return run


MAINTENANCE = "fleet-upgrade"
POOL = "drainsafe.io/maintenance-pool"  # the label the maintained nodes get (the selector)
CONTROLLER_NAMESPACE = "drainsafe-system"


async def maintained_nodes(lab: Any, count: int, pool: str = "gpu") -> list[str]:
    """`count` worker nodes, those holding the workloads' pods first, labelled
    POOL=`pool`. Never a system node (SYSTEM_ROLE): the set-up pins the drainsafe
    controller there, as an operator deploys it off the nodes it drains, so the choice
    does not depend on where the scheduler's scores put the controller's replicas or the
    workloads. A worker that runs a controller replica anyway (a leader draining its own
    node is another test's subject) is an error in the set-up, said as such."""
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        nodes, _ = await client.list(api_path("v1", "nodes"))
        pods, _ = await client.list(api_path("v1", "pods"))
        workers = [meta(n)["name"] for n in nodes
                   if SYSTEM_ROLE not in (meta(n).get("labels") or {})]
        busy = {p["spec"].get("nodeName") for p in pods if meta(p).get("namespace") == NAMESPACE}
        if len(workers) < count:
            raise RuntimeError(f"only {len(workers)} worker nodes: {workers}")
        chosen = sorted(sorted(workers, key=lambda n: (n not in busy, n))[:count])
        controllers = {p["spec"].get("nodeName") for p in pods
                       if meta(p).get("namespace") == CONTROLLER_NAMESPACE}
        if controllers & set(chosen):
            raise RuntimeError(f"controller replicas on {sorted(controllers & set(chosen))}: "
                               "install it on the system nodes")
        for name in chosen:
            await client.patch(api_path("v1", "nodes", name=name),
                               {"metadata": {"labels": {POOL: pool}}})
    return chosen


@dataclass
class Followed:
    """What was seen of a NodeMaintenance while it ran."""

    rows: list[tuple[str, int, int]] = field(default_factory=list)  # kubectl get: PHASE DONE TOTAL
    states: dict[str, list[str]] = field(default_factory=dict)  # per node, each change
    most_cordoned: int = 0  # of the maintained nodes, at once (0.1 s samples)
    marked: list[str] = field(default_factory=list)  # in the order marked maintained
    status: dict[str, Any] = field(default_factory=dict)  # the last one read


def printed_row(out: str) -> tuple[str, int, int] | None:
    """PHASE, DONE, TOTAL of `kubectl get nodemaintenance NAME --no-headers` (None before
    the controller wrote a status: the columns are empty)."""
    cols = out.split()
    if len(cols) < 4 or not (cols[2].isdigit() and cols[3].isdigit()):
        return None
    return cols[1], int(cols[2]), int(cols[3])


async def maintain(lab: Any, nodes: Sequence[str], manifest_dir: Path, seen: Followed, *,
                   name: str = MAINTENANCE, pool: str = "gpu", max_parallel: int = 2,
                   uncordon: str = "WhenMaintained", cli_first: bool = True,
                   timeout: float = 240, kubectl: str | None = None) -> None:
    """`kubectl apply -f` of a NodeMaintenance `name` over the POOL=`pool` nodes, each node
    marked maintained as soon as it waits for it under WhenMaintained (the first by
    `drainsafe maintenance done` when `cli_first`, the others by `kubectl annotate`), until
    its phase is final; `kubectl get` about every second meanwhile, as a person follows it."""
    binary = kubectl or kubectl_binary()
    if binary is None:
        raise RuntimeError("kubectl is not installed")
    manifest = manifest_dir / f"{name}.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "drainsafe.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {POOL: pool}},
                 "maxParallelNodes": max_parallel, "uncordon": uncordon,
                 "reason": "driver upgrade"}}))
    code, out = await run_kubectl(binary, lab.kubeconfig, "apply", "-f", str(manifest),
                                  timeout=60)
    if code:
        raise RuntimeError(f"kubectl apply: {out}")
    finished = asyncio.Event()

    async def mark(node: str) -> None:
        seen.marked.append(node)
        if cli_first and len(seen.marked) == 1:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "drainsafe", "maintenance", "done", node,
                "--maintenance", name, f"--kubeconfig={lab.kubeconfig}",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
            text, _ = await proc.communicate()
            code, out = proc.returncode or 0, text.decode()
        else:
            code, out = await run_kubectl(binary, lab.kubeconfig, "annotate", "node", node,
                                          f"drainsafe.io/maintained={name}", timeout=60)
        if code:
            raise RuntimeError(f"marking {node} maintained: {out}")

    async def printed() -> None:
        while not finished.is_set():
            code, out = await run_kubectl(binary, lab.kubeconfig, "get", "nodemaintenance",
                                          name, "--no-headers", timeout=60)
            if code == 0 and (row := printed_row(out)) is not None:
                seen.rows.append(row)
            await asyncio.sleep(1.0)

    rows = asyncio.ensure_future(printed())
    marks: list[asyncio.Future[None]] = []
    path = api_path("drainsafe.io/v1alpha1", "nodemaintenances", name=name)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, Informer(
                client, api_path("v1", "nodes")) as node_informer:
            while True:
                seen.status = (await client.get(path)).get("status") or {}
                for n in seen.status.get("nodes") or []:
                    states = seen.states.setdefault(n["name"], [])
                    if not states or states[-1] != n["state"]:
                        states.append(n["state"])
                    if n["state"] == "AwaitingMaintenance" and n["name"] not in seen.marked:
                        marks.append(asyncio.ensure_future(mark(n["name"])))
                seen.most_cordoned = max(seen.most_cordoned, sum(
                    bool(((node_informer.get(n) or {}).get("spec") or {}).get("unschedulable"))
                    for n in nodes))
                if seen.status.get("phase") in ("Succeeded", "Failed"):
                    break
                if loop.time() > deadline:
                    raise TimeoutError(f"{name} not finished: {seen.status}")
                await asyncio.sleep(0.1)
    finally:
        finished.set()
        await asyncio.gather(rows, *marks)
    code, out = await run_kubectl(binary, lab.kubeconfig, "get", "nodemaintenance",
                                  name, "--no-headers", timeout=60)
    if code == 0 and (row := printed_row(out)) is not None:
        seen.rows.append(row)
