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

import asyncio
import pathlib
import sys
from typing import Any

import pytest
import yaml

from drainsafe.demo.fleetload import FleetRun, deploy, fleet, under_load
from drainsafe.demo.scenario import NAMESPACE, ScenarioSettings
from drainsafe.kube import KubeClient, api_path
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab

from .guardlab import KUBECTL_DIR, install, kubectl, lab_path_env

pytestmark = pytest.mark.e2e
PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
NAME = "fleet-upgrade"
POOL = "drainsafe.io/test-pool"
# Scaled down: a 2 s model load, 0.5 s drain delay and streams, short enough to keep the
# test lean, long enough that a break before make shows as a 0 Ready sample.
SETTINGS = ScenarioSettings(propagation=0.3, drain_delay=0.5, stream_seconds=0.5,
                            model_load=2, concurrency=2, warmup=1.0, wait_timeout=90)
WORKLOADS = fleet(SETTINGS)


def _chosen(lab: Lab) -> list[str]:
    """4 nodes that run none of the controller's replicas (a leader draining its own node
    is another test's subject), those with the workloads' pods first."""
    assert lab.control_plane is not None
    store = lab.control_plane.store
    controllers = {p["spec"].get("nodeName") for p in store.items(PODS, "drainsafe-system")}
    busy = {p["spec"].get("nodeName") for p in store.items(PODS, NAMESPACE)}
    free = sorted((n["metadata"]["name"] for n in store.items(NODES, "")
                   if n["metadata"]["name"] not in controllers), key=lambda n: n not in busy)
    assert len(free) >= 4, (controllers, free)
    return sorted(free[:4])


def _pods_on(lab: Lab, nodes: list[str]) -> dict[str, str]:
    """uid -> app of the workloads' pods on `nodes`."""
    assert lab.control_plane is not None
    return {p["metadata"]["uid"]: p["metadata"]["labels"]["app"]
            for p in lab.control_plane.store.items(PODS, NAMESPACE)
            if p["spec"].get("nodeName") in nodes}


class Follow:
    """What the test saw of the operation: `kubectl get` rows, node states, cordons."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, int]] = []  # (PHASE, DONE, TOTAL) as printed
        self.states: dict[str, list[str]] = {}
        self.most_cordoned = 0
        self.marked: list[str] = []
        self.status: dict[str, Any] = {}


def _row(out: str) -> tuple[str, int, int] | None:
    """PHASE, DONE, TOTAL of `kubectl get nodemaintenance NAME --no-headers` (None before
    the controller wrote a status: the columns are empty)."""
    cols = out.split()
    if len(cols) < 4 or not (cols[2].isdigit() and cols[3].isdigit()):
        return None
    return cols[1], int(cols[2]), int(cols[3])


async def _maintain(lab: Lab, tmp: pathlib.Path, chosen: list[str], seen: Follow) -> None:
    """The operation: label, `kubectl apply -f`, mark each node maintained when it waits,
    until the phase is final."""
    assert lab.control_plane is not None
    store = lab.control_plane.store
    code, out = await kubectl(lab, "1.33", "label", "node", *chosen, f"{POOL}=gpu")
    assert code == 0, out
    manifest = tmp / "maintenance.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "drainsafe.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": NAME},
        "spec": {"nodeSelector": {"matchLabels": {POOL: "gpu"}}, "maxParallelNodes": 2,
                 "uncordon": "WhenMaintained", "reason": "driver upgrade"}}))
    code, out = await kubectl(lab, "1.33", "apply", "-f", str(manifest))
    assert code == 0, out
    finished = asyncio.Event()
    marks: list[asyncio.Task[None]] = []

    async def mark(node: str) -> None:
        if not seen.marked:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "drainsafe", "maintenance", "done", node,
                "--maintenance", NAME, f"--kubeconfig={lab.kubeconfig}",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
            seen.marked.append(node)
            out_b, _ = await proc.communicate()
            assert proc.returncode == 0, out_b.decode()
        else:
            seen.marked.append(node)
            code, out = await kubectl(lab, "1.33", "annotate", "node", node,
                                      f"drainsafe.io/maintained={NAME}")
            assert code == 0, out

    async def printed() -> None:  # `kubectl get` as a person runs it, about every second
        while not finished.is_set():
            code, out = await kubectl(lab, "1.33", "get", "nodemaintenance", NAME,
                                      "--no-headers")
            if code == 0 and (row := _row(out)) is not None:
                seen.rows.append(row)
            await asyncio.sleep(1.0)

    rows = asyncio.create_task(printed())
    path = api_path("drainsafe.io/v1alpha1", "nodemaintenances", name=NAME)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 240
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        while True:
            seen.status = (await client.get(path)).get("status") or {}
            for n in seen.status.get("nodes") or []:
                states = seen.states.setdefault(n["name"], [])
                if not states or states[-1] != n["state"]:
                    states.append(n["state"])
                if n["state"] == "AwaitingMaintenance" and n["name"] not in seen.marked:
                    marks.append(asyncio.create_task(mark(n["name"])))
            seen.most_cordoned = max(seen.most_cordoned, sum(
                bool(store.get(NODES, "", n)["spec"].get("unschedulable")) for n in chosen))
            if seen.status.get("phase") in ("Succeeded", "Failed"):
                break
            assert loop.time() < deadline, f"not finished: {seen.status}"
            await asyncio.sleep(0.1)
    finished.set()
    await asyncio.gather(rows, *marks)
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance", NAME, "--no-headers")
    row = _row(out)
    assert code == 0 and row is not None, out
    seen.rows.append(row)


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
        chosen = _chosen(lab)
        before = _pods_on(lab, chosen)
        # Each kind has a pod to move, so each of the engine's paths runs (surge for the
        # Deployment and the StatefulSet, group surge for the LeaderWorkerSet).
        assert set(before.values()) == {s.app for s in WORKLOADS}, (chosen, before)
        seen = Follow()
        run: FleetRun = await under_load(lab, WORKLOADS,
                                         lambda: _maintain(lab, tmp_path, chosen, seen),
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
