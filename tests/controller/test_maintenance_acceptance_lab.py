"""NodeMaintenance acceptance (issue 30): a lab of 6 one-GPU nodes, streaming load through
the Services of a Deployment, a StatefulSet and a LeaderWorkerSet; `kubectl apply -k
deploy/controller`, then `kubectl apply -f` of a NodeMaintenance over 4 nodes (a label
selector), maxParallelNodes 2, uncordon WhenMaintained. Every node is marked maintained as
soon as it waits for it (the first with `drainsafe maintenance done`, the others with
`kubectl annotate`, both the documented ways), and ends drained and uncordoned; no request
fails or is cut; no workload is below its desired Ready count (whole groups for the
LeaderWorkerSet) at any 0.1 s sample or change; `kubectl get nodemaintenance` shows the
progress as it goes. The workloads' sizes and why: drainsafe.demo.fleetload."""

from __future__ import annotations

import pathlib

import pytest

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

from .guardlab import KUBECTL_DIR, install, lab_path_env

pytestmark = pytest.mark.e2e
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


async def test_four_of_six_nodes_two_at_a_time_under_load_of_three_workloads(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    async with Lab(tmp_path / "lab", nodes=6, gpus_per_node=1,
                   propagation_seconds=SETTINGS.propagation, restart_backoff=0.5) as lab:
        await lab.install_leaderworkerset()
        await install(lab)
        await lab.wait_established("nodemaintenances.drainsafe.io")
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
        unschedulable = [n for n in chosen
                         if store.get(NODES, "", n)["spec"].get("unschedulable")]

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
    # Make before break: at least one surge pod's start-up before its old pod could go.
    assert run.seconds >= SETTINGS.model_load, run.seconds
