"""NodeMaintenance acceptance (issue 30): a lab of 6 one-GPU nodes, streaming load through
the Services of a Deployment, a StatefulSet and a LeaderWorkerSet; `kubectl apply -k
deploy/controller` (overlaid as an operator keeps it off the nodes it drains: on the
lab's 2 system nodes, by nodeSelector and toleration), then `kubectl apply -f` of a
NodeMaintenance over 4 nodes (a label selector), maxParallelNodes 2, uncordon
WhenMaintained. Every node is marked maintained as soon as it waits for it (the first
with `drainsafe maintenance done`, the others with `kubectl annotate`, both the
documented ways), and ends drained and uncordoned; no request fails or is cut; no
workload is below its desired Ready count (whole groups for the LeaderWorkerSet) at any
0.1 s sample or change; `kubectl get nodemaintenance` shows the progress as it goes.
The workloads' sizes and why, and where the controller runs: drainsafe.demo.fleetload.

Then, on the same lab (one lab for both: the suite's time), the simulator against the lab
for one small pool: the same NodeMaintenance settings run by `drainsafe simulate`'s model
(drainsafe.simulate.maintenance: the controller's own wave planner) predict the waves, the
total time and the lowest capacity of a real one."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from drainsafe.demo.fleetload import (
    FleetRun,
    Followed,
    deploy,
    fleet,
    maintain,
    maintained_nodes,
    under_load,
)
from drainsafe.demo.scenario import NAMESPACE, ScenarioSettings
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab
from drainsafe.lab.node.probes import LoopStalls
from drainsafe.simulate.scenario import parse_scenario
from drainsafe.simulate.simulation import simulate

from .guardlab import KUBECTL_DIR, install, kubectl, lab_path_env, until

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]
PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
# Scaled down: a 2 s model load, 0.5 s drain delay and streams, short enough to keep the
# test lean, long enough that a break before make shows as a 0 Ready sample.
SETTINGS = ScenarioSettings(propagation=0.3, drain_delay=0.5, stream_seconds=0.5,
                            model_load=2, concurrency=2, warmup=1.0, wait_timeout=90)
WORKLOADS = fleet(SETTINGS)


def _pods_on(lab: Lab, nodes: list[str]) -> dict[str, str]:
    """uid -> app of the workloads' pods on `nodes`."""
    assert lab.control_plane is not None
    return {p["metadata"]["uid"]: p["metadata"]["labels"]["app"]
            for p in lab.control_plane.store.items(PODS, NAMESPACE)
            if p["spec"].get("nodeName") in nodes}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def lab(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Lab]:
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = lab_path_env()  # the controller's pods run `drainsafe` from PATH
    try:
        async with Lab(tmp_path_factory.mktemp("maintenance") / "lab", nodes=6,
                       gpus_per_node=1, system_nodes=2, propagation_seconds=SETTINGS.propagation,
                       restart_backoff=0.5) as lab:
            await lab.install_leaderworkerset()
            await install(lab, system_nodes=True)
            await lab.wait_established("nodemaintenances.drainsafe.io")
            yield lab
    finally:
        os.environ["PATH"] = path


async def test_four_of_six_nodes_two_at_a_time_under_load_of_three_workloads(
        lab: Lab, tmp_path: pathlib.Path) -> None:
    await deploy(lab, WORKLOADS)
    assert lab.control_plane is not None
    store = lab.control_plane.store
    chosen = await maintained_nodes(lab, 4)
    before = _pods_on(lab, chosen)
    # Each kind has a pod to move, so each of the engine's paths runs (surge for the
    # Deployment and the StatefulSet, group surge for the LeaderWorkerSet).
    assert set(before.values()) == {s.app for s in WORKLOADS}, (chosen, before)
    seen = Followed()
    run: FleetRun = await under_load(lab, WORKLOADS,
                                     lambda: maintain(lab, chosen, tmp_path, seen),
                                     warmup=SETTINGS.warmup)
    left = {p["metadata"]["uid"] for p in store.items(PODS, NAMESPACE)}
    unschedulable = [n for n in chosen if store.get(NODES, "", n)["spec"].get("unschedulable")]

    status = seen.status
    assert status.get("phase") == "Succeeded", "\n".join(
        [repr(n) for n in status.get("nodes", [])] + [repr(seen.states)])
    assert (status["done"], status["total"], status.get("failed", 0)) == (4, 4, 0), status
    assert sorted(n["name"] for n in status["nodes"]) == chosen
    # Each node was drained, waited for its maintenance, was marked, then uncordoned.
    for node in chosen:
        assert seen.states[node][-2:] == ["AwaitingMaintenance", "Uncordoned"], seen.states
    assert sorted(seen.marked) == chosen and unschedulable == []
    assert seen.most_cordoned == 2, seen.most_cordoned  # maxParallelNodes used, never above
    # Every pod that ran on a maintained node left it (replaced, not lost).
    assert not set(before) & left
    # `kubectl get` showed the progress as it went: DONE rising, at least two readings.
    done = [d for _phase, d, _total in seen.rows]
    assert done == sorted(done) and len(set(done)) >= 2, seen.rows
    assert seen.rows[-1] == ("Succeeded", 4, 4), seen.rows
    for w in run.workloads:
        assert w.samples >= 20, w
        assert w.lowest_ready >= w.desired, f"{w.app} Ready fell to {w.lowest_ready}: {w}"
        assert w.failed == {} and w.truncated == 0, w
        assert w.ok >= 10 and w.pods_created >= 1, w
        assert w.replicas_after == w.desired and w.annotations_left == [], w
    # The controller's own readings (its drains' watches) agree: LOWEST 100 %.
    assert status["lowestCapacity"]["percent"] == "100%", status["lowestCapacity"]
    # Make before break: at least one surge pod's start-up before its old pod could go.
    assert run.seconds >= SETTINGS.model_load, run.seconds


# The small pool: three Deployments of one one-GPU pod each, one per node, so the three
# nodes' surges are independent (the engine surges one workload at a time, and both
# planners, the controller's and the simulator's, hold a node whose workload a node in
# progress surges: docs/simulate.md, NodeMaintenance); the other three nodes are the
# simulator's spare nodes (free GPUs, not drained, in the cluster both planners read
# before their first wave, so both plan it by room alike). maxParallelNodes 2 over 3
# nodes: two waves. uncordon Immediately: a node_upgrade of 0.
POOL_WORKLOADS = tuple(dataclasses.replace(SETTINGS, kind="Deployment", app=f"pool-{c}",
                                           replicas=1) for c in "abc")
RECONCILE_SECONDS = 0.5  # the controller's reconcile period (controller.config)


def _mirror(startup: float) -> dict[str, Any]:
    s = SETTINGS
    deadline = max(s.grace - s.drain_delay - 5, 1)  # demo.scenario's drainsafe serve flags
    return {
        "name": "lab-pool", "seed": 0,
        "fleet": {"nodes": 3, "gpus_per_node": 1},
        "traffic": {"duration": 60},
        "consumers": [{"name": "clusterip", "share": 1.0, "propagation": s.propagation}],
        "workloads": [{
            "name": w.app, "replicas": 1, "gpus": 1,
            "rate": w.concurrency / w.stream_seconds,  # closed loop, Little's law
            "durations": w.stream_seconds, "startup": round(startup, 2),
            "pdb": {"maxUnavailable": 1},
            "termination": {"grace": s.grace, "drain_delay": s.drain_delay,
                            "shutdown_deadline": deadline},
        } for w in POOL_WORKLOADS],
        # The controller's engine as the lab runs it: a Deployment's surge shared (the
        # simulator's default, named so a change of default cannot slip by).
        "upgrade": {"strategy": "drainsafe", "surge_sharing": "shared", "surge_nodes": 3,
                    "node_upgrade": 0, "maintenance": {"max_parallel_nodes": 2}},
    }


async def test_the_simulator_predicts_a_small_pools_waves_time_and_capacity(
        lab: Lab, tmp_path: pathlib.Path) -> None:
    """Tolerances, derived, not tuned: the simulator is given the start-up this run
    measured (the slowest surge pod, created -> Ready), so
    - the lab cannot be faster than the model by more than the start-ups' spread and
      1.0 s per wave (the surge-path lab-vs-sim test's lower slack for the kubelet's
      readiness probe period landing early);
    - nor slower by more than, per wave, 3.0 s (that test's upper slack on cordon -> old
      pod gone: the engine's watch-to-exit and endpoint lags), 1.0 s for what the
      reconciler adds around it (status Cordoned, Draining, Drained, Uncordoned, the
      cordon and uncordon: six writes, and the preflight's reads) and the reconcile period
      (the next node starts at the next pass), plus 1.0 s for `kubectl apply` and the first
      status, plus how long this process's event loop (the lab's) was measured stalled;
    - the waves are the same (2 nodes, then 1), and neither dips below desired."""
    assert lab.control_plane is not None
    store = lab.control_plane.store
    # The acceptance test's workloads make way (the pool is sized for the 6 GPUs alone).
    code, out = await kubectl(lab, "1.33", "delete", "--ignore-not-found", "--wait=false",
                              "deployment/chat", "statefulset/embed", "leaderworkerset/llm")
    assert code == 0, out
    await until(lambda: not any(p["metadata"]["labels"].get("app") in ("chat", "embed", "llm")
                                for p in store.items(PODS, NAMESPACE)),
                timeout=60, what="the acceptance workloads gone")
    await deploy(lab, POOL_WORKLOADS)
    chosen = await maintained_nodes(lab, 3, pool="sim")
    assert sorted(_pods_on(lab, chosen).values()) == [w.app for w in POOL_WORKLOADS]
    seen = Followed()
    stalls = LoopStalls.for_loop()
    stalls.acquire()
    began = time.monotonic()
    try:
        run = await under_load(lab, POOL_WORKLOADS, lambda: maintain(
            lab, chosen, tmp_path, seen, name="pool-roll", pool="sim",
            uncordon="Immediately"), warmup=SETTINGS.warmup)
        stalled = stalls.stalled(began, time.monotonic())
    finally:
        stalls.release()
    assert seen.status.get("phase") == "Succeeded", seen.status
    startups = [w.startup_seconds for w in run.workloads]
    assert all(s is not None for s in startups), run.workloads
    slowest, fastest = max(startups), min(startups)  # type: ignore[type-var]
    assert slowest is not None and fastest is not None

    sim = simulate(parse_scenario(_mirror(slowest)))
    lab_waves = sorted(n["wave"] for n in seen.status["nodes"])
    starts = sim.lifecycle.node_drain_started
    sim_waves = sorted(1 + int(t > starts.min()) for t in starts)
    report = (f"lab: {run.seconds:.2f} s, lowest {run.lowest_fraction:.0%}, waves "
              f"{lab_waves}, start-ups {[round(s or 0, 2) for s in startups]}, loop "
              f"stalled {stalled:.2f} s, states {seen.states}; simulator: "
              f"{sim.upgrade_time:.2f} s, lowest {sim.min_capacity:.0%}, waves {sim_waves}")
    print(report)
    assert sim.finished and lab_waves == sim_waves == [1, 1, 2], report
    # Neither planner started a node its preflight then refused (both plan by room).
    assert sim.lifecycle.deferrals == 0, report
    # (a deferred node goes from Cordoned back to Pending)
    assert all("Pending" not in states[1:] for states in seen.states.values()), report
    assert sim.min_capacity == 1.0 and run.lowest_fraction == 1.0, report
    assert run.total_failed == 0 and sim.failed == 0, report
    waves = 2
    low = sim.upgrade_time - waves * ((slowest - fastest) + 1.0)
    high = sim.upgrade_time + waves * (3.0 + 1.0 + RECONCILE_SECONDS) + 1.0 + stalled
    assert low <= run.seconds <= high, report
