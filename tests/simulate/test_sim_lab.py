"""Validation against the lab: the same small upgrade run for real and in the simulator.

The lab: 3 one-GPU nodes, a Deployment of 2 one-GPU pods running plain uvicorn with the
streaming workload (every request a 3 s SSE stream), terminationGracePeriodSeconds 2 and no
drain delay, the kube-proxy-like ClusterIP path with a 1 s propagation delay, an open-loop
load of RATE requests/s on new connections. Each node holding a pod is drained in turn with
the real `kubectl drain` (its pod's replacement goes to the free GPU), then uncordoned.

The simulator: the same fleet (2 nodes drained plus 1 spare, which the scenario expresses as
a surge node that is not drained), the same rate, durations, grace and propagation, and no
shutdown deadline (plain uvicorn waits for its streams until SIGKILL).

What must agree, and the tolerance (stated, not tuned per run):
- requests refused in the race (no response), per drained pod: the lab's count within
  0.5x .. 2x of the simulator's expectation. The lab's window is a little longer than the
  configured 1 s: the endpoints controller and the watch add a control-plane hop the
  scenario does not model;
- streams cut by SIGKILL, per drained pod: within 0.5x .. 2x;
- node drain time (cordon to empty): kubectl's wall time is the simulator's plus at most
  2.5 s and the delay this run measured, never less than the simulator's minus 0.5 s.
  kubectl only notices the pod is gone at its next poll (kubernetes/kubectl
  pkg/drain/drain.go, waitForDelete polls every 1 s), after the kubelet has seen the
  process exit and removed the pod. Measured here: 2.3-3.7 s against the simulator's
  2.0 s on a quiet machine. On a busy one, the lab (in this process) and kubectl (a
  process of its own) wait for the CPU: the margin adds how long the lab's event loop
  was stalled during the drain (LoopStalls) and what a no-op kubectl cost just before.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lightkube.resources.core_v1 import Pod

from drainsafe.demo.scenario import ScenarioSettings
from drainsafe.lab.cluster import Lab, pids_alive
from drainsafe.lab.node.probes import LoopStalls
from drainsafe.simulate.scenario import parse_scenario
from drainsafe.simulate.simulation import simulate
from drainsafe.verify.load import LoadSpec
from drainsafe.verify.loadproc import run_load_process

pytestmark = pytest.mark.e2e

KUBECTL = Path("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")
PROPAGATION = 1.0
RATE = 20.0
STREAM_SECONDS = 3.0
TOKEN_INTERVAL = 0.25
GRACE = 2
NAME = "llm"

UVICORN = [sys.executable, "-m", "uvicorn", "drainsafe.workload.streaming:app",
           "--host", "$(POD_IP)", "--port", "8000", "--no-access-log"]


def deployment() -> dict[str, Any]:
    labels = {"app": NAME}
    container = {
        "name": "server", "image": "vllm/vllm-openai", "command": UVICORN,
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": 8000}],
        "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"},
                           "periodSeconds": 1, "failureThreshold": 1},
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"terminationGracePeriodSeconds": GRACE,
                                           "containers": [container]}}}}


def service() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": "default"},
            "spec": {"selector": {"app": NAME},
                     "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}


def mirror_scenario(seed: int, strategy: str = "kubectl") -> dict[str, Any]:
    return {
        "name": "lab-mirror", "seed": seed,
        "fleet": {"nodes": 2, "gpus_per_node": 1},
        "traffic": {"duration": 40},
        "consumers": [{"name": "clusterip", "share": 1.0, "propagation": PROPAGATION}],
        "workloads": [{
            "name": NAME, "replicas": 2, "gpus": 1, "rate": RATE,
            "durations": STREAM_SECONDS, "startup": 2,
            "termination": {"grace": GRACE, "drain_delay": 0, "shutdown_deadline": None},
        }],
        "upgrade": {"strategy": strategy, "parallelism": 1, "surge_nodes": 1,
                    "node_upgrade": 5, "start": 5},
    }


async def kubectl(lab: Lab, *args: str) -> str:
    binary = str(KUBECTL) if KUBECTL.exists() else "kubectl"
    proc = await asyncio.create_subprocess_exec(
        binary, f"--kubeconfig={lab.kubeconfig}", f"--cache-dir={lab.state_dir / 'kcache'}",
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": str(lab.kubeconfig)})
    try:
        async with asyncio.timeout(90):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, (args, out.decode(), err.decode())
    return out.decode()


async def pod_nodes(lab: Lab) -> dict[str, str]:
    assert lab.client is not None
    return {p.metadata.name: p.spec.nodeName  # type: ignore[union-attr]
            async for p in lab.client.list(Pod, namespace="default", labels={"app": NAME})
            if p.metadata is not None and p.spec is not None and p.spec.nodeName
            and p.metadata.deletionTimestamp is None}


@pytest.mark.skipif(shutil.which("kubectl") is None and not KUBECTL.exists(),
                    reason="kubectl not installed")
@pytest.mark.timeout(180)
async def test_lab_and_simulator_agree_on_failures_and_drain_time(tmp_path: Path) -> None:
    started: set[int] = set()
    drain_seconds: list[float] = []
    delays: list[tuple[float, float]] = []  # (loop stalled during the drain, kubectl no-op)
    evicted = 0
    stalls = LoopStalls.for_loop()
    stalls.acquire()
    async with Lab(tmp_path / "lab", nodes=3, gpus_per_node=1,
                   propagation_seconds=PROPAGATION, ingress=False, seed=11) as lab:
        try:
            await lab.apply(deployment(), service())
            await lab.wait_available("default", NAME, timeout=60)
            await lab.wait_backends("default", NAME, 2, timeout=30)
            started.update(lab.pids())
            body = json.dumps({"stream": True, "duration": STREAM_SECONDS,
                               "token_interval": TOKEN_INTERVAL}).encode()
            spec = LoadSpec(url=lab.service_url("default", NAME) + "/v1/completions",
                            duration=150, rate=RATE, method="POST", body=body,
                            headers=(("content-type", "application/json"),),
                            keepalive=False, timeout=30, pod_header=None)
            stop = asyncio.Event()
            load = asyncio.ensure_future(run_load_process(spec, stop=stop))
            try:
                await kubectl(lab, "get", "nodes")  # API discovery cached before timing
                await asyncio.sleep(STREAM_SECONDS + 0.5)  # streams in flight everywhere
                nodes = sorted(set((await pod_nodes(lab)).values()))
                for i, node in enumerate(nodes):
                    noop = time.monotonic()
                    await kubectl(lab, "get", "nodes")  # what one kubectl costs right now
                    began = time.monotonic()
                    out = await kubectl(lab, "drain", node, "--ignore-daemonsets",
                                        "--delete-emptydir-data", "--timeout=60s")
                    drain_seconds.append(time.monotonic() - began)
                    delays.append((stalls.stalled(began, time.monotonic()), began - noop))
                    evicted += out.count("evicted")
                    await lab.wait_available("default", NAME, timeout=60)
                    await lab.wait_backends("default", NAME, 2, timeout=30)
                    started.update(lab.pids())
                    await kubectl(lab, "uncordon", node)
                    if i + 1 < len(nodes):
                        await asyncio.sleep(STREAM_SECONDS + 0.5)  # back to a steady state
            finally:
                stop.set()
                run = await load
        finally:
            started.update(lab.pids())
            stalls.release()
    assert pids_alive(started) == []

    failed = [r for r in run.results if not r.outcome.ok]
    race = [r for r in failed if r.headers_at is None]
    cut = [r for r in failed if r.headers_at is not None]
    ok = len(run.results) - len(failed)
    assert evicted == 2, drain_seconds
    assert ok > RATE * 10, "traffic really flowed through the drains"

    base = parse_scenario(mirror_scenario(0))
    sims = [simulate(dataclasses.replace(base, seed=seed)) for seed in range(50)]
    assert {len(s.lifecycle.deleted_at) for s in sims} == {2}
    sim_race = float(sum(s.counts.expected["race"] for s in sims)) / len(sims)
    sim_cut = float(sum(s.counts.expected["cut_sigkill"] for s in sims)) / len(sims)
    sim_drain = float(sum(s.node_drain_seconds().mean() for s in sims)) / len(sims)

    report = (f"lab: {len(race)} refused, {len(cut)} cut, {ok} ok, drains "
              f"{[round(d, 2) for d in drain_seconds]}; simulator: race {sim_race:.1f}, "
              f"cut {sim_cut:.1f}, drain {sim_drain:.2f} s; "
              f"lab failure kinds {sorted({r.outcome.label for r in failed})}; measured "
              f"(loop stalled, kubectl no-op) {[(round(a, 2), round(b, 2)) for a, b in delays]}")
    print(report)
    assert 0.5 * sim_race <= len(race) <= 2.0 * sim_race, report
    assert 0.5 * sim_cut <= len(cut) <= 2.0 * sim_cut, report
    for seconds, (stalled, noop) in zip(drain_seconds, delays, strict=True):
        assert sim_drain - 0.5 <= seconds <= sim_drain + 2.5 + stalled + noop, report


@pytest.mark.timeout(180)
async def test_lab_and_simulator_agree_on_the_surge_path(tmp_path: Path) -> None:
    """The same comparison for `drainsafe drain` (surge-first, the engine itself, in
    process) against the simulator's `drainsafe` strategy: the old pod is evicted only once
    its surge pod is Ready, so the node drain time is the start-up plus the old pod's exit,
    and Ready never drops below 2, in the lab as in the model. The lab's start-up (process
    start to the first passing readiness probe) is measured here and given to the model.

    Tolerances, stated (not tuned per run):
    - failures (refused in the race, cut by SIGKILL): 0.5x .. 2x the model's, as on the
      kubectl path. The old pod is evicted as soon as the surge pod is a ready endpoint,
      before the proxy routes to it, so it carries half the traffic (not a third) through
      its race window, in the lab and in the model, which adds an endpoint after the same
      propagation delay as it removes one. (Before it did, the model gave a third: 13.3
      against the lab's 22-26 refused and 20-25 cut.)
    - node drain time (cordon to the old pod gone) within the model's -1.0 s .. +3.0 s
      plus how long the event loop (the lab's, the engine's and the load's) was measured
      stalled during the drain: on top of kubectl's watch-to-exit lag, the engine waits
      for the surge pod on a watch, for its endpoint, and for the budget's status before
      it evicts."""
    from drainsafe.drain.execute import DrainSettings, NodeDrainer
    from drainsafe.kube import Informer, KubeClient, api_path
    from drainsafe.kube.objects import is_ready

    started: set[int] = set()
    drain_seconds: list[float] = []
    phases: list[tuple[float, ...]] = []
    startups: list[float] = []
    ready_counts: list[int] = []
    stalled: list[float] = []  # the loop's measured stalls during each drain
    stalls = LoopStalls.for_loop()
    stalls.acquire()
    async with Lab(tmp_path / "lab", nodes=3, gpus_per_node=1,
                   propagation_seconds=PROPAGATION, ingress=False, seed=11) as lab:
        try:
            await lab.apply(deployment(), service())
            await lab.wait_available("default", NAME, timeout=60)
            await lab.wait_backends("default", NAME, 2, timeout=30)
            started.update(lab.pids())
            body = json.dumps({"stream": True, "duration": STREAM_SECONDS,
                               "token_interval": TOKEN_INTERVAL}).encode()
            spec = LoadSpec(url=lab.service_url("default", NAME) + "/v1/completions",
                            duration=150, rate=RATE, method="POST", body=body,
                            headers=(("content-type", "application/json"),),
                            keepalive=False, timeout=30, pod_header=None)
            async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
                ready: dict[str, bool] = {}
                seen: dict[str, float] = {}

                def on_pod(kind: str, pod: dict[str, Any]) -> None:
                    name = pod["metadata"]["name"]
                    now = time.monotonic()
                    seen.setdefault(name, now)
                    if is_ready(pod) and not ready.get(name) and kind != "ADDED":
                        startups.append(now - seen[name])  # created -> Ready, as watched
                    if kind == "DELETED":
                        ready.pop(name, None)
                    else:
                        ready[name] = is_ready(pod) and not pod["metadata"].get(
                            "deletionTimestamp")
                    ready_counts.append(sum(ready.values()))

                pods = Informer(client, api_path("v1", "pods", namespace="default"),
                                label_selector=f"app={NAME}", on_event=on_pod)
                await pods.start()
                ready_counts.clear()
                stop = asyncio.Event()
                load = asyncio.ensure_future(run_load_process(spec, stop=stop))
                try:
                    await asyncio.sleep(STREAM_SECONDS + 0.5)
                    nodes = sorted(set((await pod_nodes(lab)).values()))
                    for i, node in enumerate(nodes):
                        began = time.monotonic()
                        report = await NodeDrainer(client, node, DrainSettings(timeout=60)).run()
                        stalled.append(stalls.stalled(began, time.monotonic()))
                        assert report.ok, report.failure
                        [moved] = [p for p in report.pods if p.outcome == "evicted"]
                        assert moved.strategy == "surge"
                        assert report.cordoned_at is not None and moved.terminated_at
                        drain_seconds.append(moved.terminated_at - report.cordoned_at)
                        phases.append(tuple(round(t - report.cordoned_at, 2) for t in (
                            moved.replacement_ready_at or 0, moved.evicted_at or 0,
                            moved.terminated_at)))
                        await lab.wait_backends("default", NAME, 2, timeout=30)
                        started.update(lab.pids())
                        assert lab.client is not None
                        await kubectl(lab, "uncordon", node)
                        if i + 1 < len(nodes):
                            await asyncio.sleep(STREAM_SECONDS + 0.5)
                finally:
                    stop.set()
                    run = await load
                    await pods.stop()
        finally:
            started.update(lab.pids())
            stalls.release()
    assert pids_alive(started) == []

    failed = [r for r in run.results if not r.outcome.ok]
    race = [r for r in failed if r.headers_at is None]
    cut = [r for r in failed if r.headers_at is not None]
    ok = len(run.results) - len(failed)
    assert len(drain_seconds) == 2
    assert ok > RATE * 10, "traffic really flowed through the drains"
    assert min(ready_counts) >= 2, ready_counts  # never below: the surge pod came first

    assert len(startups) == 2, startups  # the two surge pods
    startup = max(startups)
    data = mirror_scenario(0, "drainsafe")
    data["workloads"][0]["startup"] = round(startup, 2)
    base = parse_scenario(data)
    sims = [simulate(dataclasses.replace(base, seed=seed)) for seed in range(50)]
    assert {len(s.lifecycle.deleted_at) for s in sims} == {2}
    assert all(s.min_ready() == {NAME: 2} for s in sims)
    sim_race = float(sum(s.counts.expected["race"] for s in sims)) / len(sims)
    sim_cut = float(sum(s.counts.expected["cut_sigkill"] for s in sims)) / len(sims)
    sim_drain = float(sum(s.node_drain_seconds().mean() for s in sims)) / len(sims)

    report = (f"lab: {len(race)} refused, {len(cut)} cut, {ok} ok, drains "
              f"{[round(d, 2) for d in drain_seconds]} (replacement Ready, evicted, gone: "
              f"{phases}), start-ups {[round(s, 2) for s in startups]} s, "
              f"loop stalled {[round(s, 2) for s in stalled]} s; simulator: "
              f"race {sim_race:.1f}, cut {sim_cut:.1f}, drain {sim_drain:.2f} s")
    print(report)
    assert 0.5 * sim_race <= len(race) <= 2.0 * sim_race, report
    assert 0.5 * sim_cut <= len(cut) <= 2.0 * sim_cut, report
    for seconds, lost in zip(drain_seconds, stalled, strict=True):
        assert sim_drain - 1.0 <= seconds <= sim_drain + 3.0 + lost, report



# -- a LeaderWorkerSet: groups of 2 pods, a worker's node drained (issue 29) --

GROUP_SETTINGS = ScenarioSettings(propagation=0.5, drain_delay=1.0, model_load=2, warmup=1.0,
                                  kind="LeaderWorkerSet", group_size=2, nodes=7)


def group_mirror(tool: str, startup: float, seed: int = 0) -> dict[str, Any]:
    """The lab's LWS in the simulator: 2 groups of a leader and a worker on 7 one-GPU
    nodes (first fit: group 0 on nodes 0 and 1), the node of group 0's worker drained,
    drainsafe serve's drain delay and deadline, the harness's closed-loop streams as a rate
    (Little's law: concurrency / stream length), the PDB of the harness (maxUnavailable =
    one group's pods) and the start-up this run measured."""
    s = GROUP_SETTINGS
    deadline = s.shutdown_timeout if s.shutdown_timeout is not None \
        else max(s.grace - s.drain_delay - 5, 1)
    return {
        "name": "lab-mirror-lws", "seed": seed,
        "fleet": {"nodes": s.nodes, "gpus_per_node": 1},
        "traffic": {"duration": 60},
        "consumers": [{"name": "clusterip", "share": 1.0, "propagation": s.propagation}],
        "workloads": [{
            "name": NAME, "replicas": s.replicas, "group_size": s.group_size, "gpus": 1,
            "rate": s.concurrency / s.stream_seconds, "durations": s.stream_seconds,
            "startup": round(startup, 2), "pdb": {"maxUnavailable": s.group_size},
            "termination": {"grace": s.grace, "drain_delay": s.drain_delay,
                            "shutdown_deadline": deadline},
        }],
        "upgrade": {"strategy": "drainsafe" if tool == "drainsafe" else "kubectl",
                    "parallelism": 1, "nodes": [1], "node_upgrade": 600, "start": 5},
    }


def seconds_short(result: Any, want: int) -> float:
    """Simulated seconds with fewer than `want` Ready groups."""
    lc = result.lifecycle
    ends = np.append(lc.ready_times[1:], lc.end)
    return float(((ends - lc.ready_times) * (lc.ready_counts[:, 0] < want)).sum())


async def two_groups_settled(lab: Lab) -> None:
    """The stand-in group removed again: 4 pods, none terminating (the kubectl run then
    picks its worker's node among groups 0 and 1 only)."""
    from drainsafe.demo.scenario import APP, NAMESPACE
    from drainsafe.kube import Informer, KubeClient, api_path
    from drainsafe.kube.objects import is_terminating

    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, Informer(
            client, api_path("v1", "pods", namespace=NAMESPACE),
            label_selector=f"app={APP}") as pods:
        await pods.wait_for(lambda c: len(c) == 4 and not any(
            is_terminating(p) for p in c.values()), timeout=60, what="groups 0 and 1 only")


@pytest.mark.timeout(240)
async def test_lab_and_simulator_agree_on_a_group_drain(tmp_path: Path) -> None:
    """A LeaderWorkerSet of 2 groups of 2 (lws v0.10.0, the lab's controller,
    RecreateGroupOnPodRestart) on 7 one-GPU nodes, under the demo harness's streaming load
    through a Service over the leaders: the node of a worker drained with `drainsafe drain`
    (a stand-in group first), then another worker's node with the real `kubectl drain` (the
    whole group goes and reloads). The simulator, given the run's measured start-up,
    predicts for each: the lowest count of Ready groups (2 and 1: exact), the node drain
    time (cordon, here the drain's start, to the worker gone), and for kubectl the seconds
    with a group short (the old leader's exit plus the recreated group's start-up).

    Tolerances, derived as for the single-pod cases above: node drain time within the
    model's -1.0 s .. +3.0 s, plus the event loop's measured stalls during the run and, for
    kubectl, what a no-op kubectl cost just before (its process start precedes its
    eviction); kubectl's seconds short within -1.0 s .. +3.0 s plus the same (the recreated
    group turns Ready at a readiness probe's period, 1 s, after its model load)."""
    from drainsafe.demo.scenario import run_drain_under_load

    stalls = LoopStalls.for_loop()
    stalls.acquire()
    began = time.monotonic()
    seen: set[int] = set()
    async with Lab(tmp_path / "lab", nodes=GROUP_SETTINGS.nodes, gpus_per_node=1,
                   propagation_seconds=GROUP_SETTINGS.propagation, ingress=False, seed=11,
                   restart_backoff=0.5) as lab:
        try:
            async def with_lws(lab: Any) -> list[dict[str, Any]]:
                await lab.install_leaderworkerset()
                return []

            t0 = time.monotonic()
            ours = await run_drain_under_load(lab, "drainsafe", GROUP_SETTINGS,
                                              prepare=with_lws)
            ours_stalled = stalls.stalled(t0, time.monotonic())
            seen.update(lab.pids())
            await two_groups_settled(lab)
            await kubectl(lab, "uncordon", ours.node)
            theirs_stalled, noop = 0.0, 0.0
            if shutil.which("kubectl") is not None or KUBECTL.exists():
                await kubectl(lab, "get", "nodes")  # API discovery cached
                t0 = time.monotonic()
                await kubectl(lab, "get", "nodes")  # what one kubectl costs right now
                noop = time.monotonic() - t0
                theirs = await run_drain_under_load(lab, "kubectl", GROUP_SETTINGS)
                theirs_stalled = stalls.stalled(t0, time.monotonic())
            else:
                theirs = None
        finally:
            seen.update(lab.pids())
            stalls.release()
    assert pids_alive(seen) == []
    print(f"group lab case: {time.monotonic() - began:.1f} s")

    runs = [("drainsafe", ours, ours_stalled, 0.0)]
    if theirs is not None:
        runs.append(("kubectl", theirs, theirs_stalled, noop))
    for tool, r, stalled, lag in runs:
        assert r.exit_code == 0, r.detail
        assert r.ok > 20, r.to_dict()
        assert r.group_startup_seconds is not None and r.empty_seconds is not None, \
            r.to_dict()
        sims = [simulate(parse_scenario(group_mirror(tool, r.group_startup_seconds, seed)))
                for seed in range(20)]
        assert all(s.finished for s in sims)
        sim_lowest = {s.min_ready()[NAME] for s in sims}
        sim_drain = float(np.mean([s.node_drain_seconds().mean() for s in sims]))
        sim_short = float(np.mean([seconds_short(s, 2) for s in sims]))
        report = (f"{tool}: lab lowest Ready groups {r.lowest_ready}, node drained in "
                  f"{r.empty_seconds:.2f} s, {r.seconds_below_desired:.2f} s a group short, "
                  f"group start-up {r.group_startup_seconds:.2f} s (pods' "
                  f"{r.startup_seconds:.2f} s), failed {r.failed}, loop stalled "
                  f"{stalled:.2f} s, kubectl no-op {lag:.2f} s; simulator lowest "
                  f"{sorted(sim_lowest)}, drain {sim_drain:.2f} s, short {sim_short:.2f} s")
        print(report)
        assert sim_lowest == {r.lowest_ready}, report
        assert r.lowest_ready == (2 if tool == "drainsafe" else 1), report
        assert sim_drain - 1.0 <= r.empty_seconds <= sim_drain + 3.0 + stalled + lag, report
        if tool == "kubectl":
            assert sim_short - 1.0 <= r.seconds_below_desired \
                <= sim_short + 3.0 + stalled + lag, report


@pytest.mark.timeout(240)
async def test_lab_and_simulator_agree_on_a_shared_surge() -> None:
    """A Deployment's surge shared by three nodes (issue 30), lab against model:
    bench/bench_shared_surge_lab.py's case (6 one-GPU nodes, the streaming Deployment of 3
    pods on 3 of them behind a Service, `drainsafe drain` of those 3 with
    `--max-parallel-nodes 3`, as a user runs it) and the simulator's default (today's
    engine) on the same settings, given the start-up this run measured (the slowest new
    pod, created -> Ready).

    Tolerances, stated (not tuned per run): the three parts held at once in the lab (the
    record's parts, watched); Ready never below 3 in either; no failed request in either;
    the drain's span the model has (its report's first cordon to its last old pod gone;
    the command's start, plan and restore are not modelled) no less than the model's minus
    1.0 s (the readiness probe period landing early, as on the surge path), no more than
    the model's plus 3.0 s (the surge path's engine lag, one surge: all three run at once)
    plus what a no-op of the command cost just before (the engine is a process of its own,
    waiting for the CPU as that did) plus how long the lab's loop was measured stalled. The
    lock's model (upgrade.surge_sharing: lock) must be slower by at least two start-ups:
    its three surges take turns."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_shared_surge_lab",
        Path(__file__).resolve().parents[2] / "bench" / "bench_shared_surge_lab.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    lab = await bench.one(6, 3, 4.0)
    assert lab["exit"] == 0, lab
    startup = lab["startup"]
    assert startup is not None, lab
    model = bench.predict(6, 3, 4.0, startup=startup)
    shared, lock = model["shared"], model["lock"]
    report = f"lab: {lab}; model: {model}"
    print(report)
    assert lab["most_parts"] == 3, report
    assert lab["lowest"] == "3/3" and shared["lowest"] == "100%", report
    assert lab["failed"] == 0 and shared["failed"] == 0, report
    low = shared["seconds"] - 1.0
    high = shared["seconds"] + 3.0 + lab["noop_seconds"] + lab["stalled"]
    assert lab["cordon_to_gone"] is not None, report
    assert low <= lab["cordon_to_gone"] <= high, report
    assert lock["seconds"] >= shared["seconds"] + 2 * startup, report
