"""NodeMaintenance (issue 30): the controller's leader SIGKILLed at every seam where it
writes its progress, in the real controller process; the next leader finishes.

`kubectl apply -k deploy/controller` (2 replicas, kept to one node that is never drained,
DRAINSAFE_FAILPOINTS set: drainsafe.failpoint) on one lab of 4 GPU nodes, shared by the
cases. Each case arms one failpoint and creates a NodeMaintenance over two nodes
(maxParallelNodes 1, maxUnavailable 1), one of them running pods of the workload. The
leader stops dead at the point (the whole process: nothing it would have done after it
reaches the cluster); the test checks the cluster is as the point says, SIGKILLs the
leader's process group and deletes its pod, and the other replica takes the Lease and
finishes from the status and the records the killed one left.

Each case asserts: the operation Succeeded with both nodes Uncordoned; no node cordoned
twice and no pod evicted twice (the API server's request log), only pods of the selected
nodes evicted, and every workload pod that ran on them evicted once; never more than one
node in progress nor unavailable, the workload never below its desired Ready count, and
never surged for more than one node's pods at once (0.1 s samples); the workload's replicas
back at their base with no surge record, no cordon, record or pending taint left on the
nodes; and `drainsafe audit` clean.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import NamedTuple

import pytest
import pytest_asyncio

from drainsafe.controller.maintenance_release import FINALIZER
from drainsafe.drain.ownership import PROGRESS, SURGE, Progress, ProgressState
from drainsafe.failpoint import ENV, POINTS, Point
from drainsafe.kube import KubeClient, api_path
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab, virtual_deployment
from drainsafe.maintenance.maintained import MAINTAINED
from drainsafe.maintenance.progress import NodeState
from drainsafe.maintenance.spec import Uncordon

from .guardlab import KUBECTL_DIR, audit_clean, install, lab_path_env, ready_pods
from .maintlab import (
    DEPLOYMENTS,
    NODES,
    REPLICAS,
    eventually,
    evictions,
    lab_store,
    left_as_before,
    maintenance_rt,
    mark_awaiting,
    nm_states,
    nm_status,
    sampling,
)

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]
LEASES = BY_KEY["coordination.k8s.io/leases"]
HPAS = BY_KEY["autoscaling/horizontalpodautoscalers"]
NAMESPACE = "drainsafe-system"
LEASE = "drainsafe-controller"


@dataclass(frozen=True)
class Killed:
    """A lab with the controller installed, and the directory its failpoints are armed in."""

    lab: Lab
    points: pathlib.Path
    controllers: str  # the node the controller's replicas are kept to


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def killed(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Killed]:
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    points = tmp_path_factory.mktemp("failpoints")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", lab_path_env())
        async with Lab(tmp_path_factory.mktemp("kills") / "lab", nodes=4, gpus_per_node=2,
                       propagation_seconds=0.2, restart_backoff=0.5) as lab:
            controllers = max(n["metadata"]["name"] for n in lab_store(lab).items(NODES, ""))
            # A 3 s Lease: the next leader takes over 3-5 s after the kill (retry every 2 s).
            await install(lab, "--lease-seconds=3", env={ENV: str(points)}, node=controllers)
            await lab.wait_established("nodemaintenances.drainsafe.io")
            # Its HPA pins the replicas (min = max): a surge raises both bounds first, and
            # the next leader must give them back exactly (drain.scale's autoscaler record).
            await lab.apply(virtual_deployment("llm", replicas=REPLICAS, startup_seconds=0.5,
                                               exit_after_sigterm_seconds=0.2, gpus=1),
                            {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                             "metadata": {"name": "llm", "namespace": "default"},
                             "spec": {"scaleTargetRef": {"apiVersion": "apps/v1",
                                                         "kind": "Deployment", "name": "llm"},
                                      "minReplicas": REPLICAS, "maxReplicas": REPLICAS}})
            await lab.wait_available("default", "llm", timeout=60)
            yield Killed(lab, points, controllers)


class Case(NamedTuple):
    """A point, the operation's uncordon mode, what the cluster shows of the node the
    leader stopped at (its row in the status, None: every row Pending; whether it is
    cordoned; the drain's record on it, None: none), and who leads next: the other replica
    (the killed pod deleted) or, restarted by the kubelet in the same pod, the killed one's
    own identity (as after an OOM kill), which retakes its Lease at once."""

    point: Point
    uncordon: Uncordon
    row: NodeState | None
    cordoned: bool
    record: ProgressState | None
    restart: bool = False


CASES = {
    "selected": Case("maintenance.operation.selected", "Immediately", None, False, None),
    "wave-started": Case("maintenance.wave.started", "Immediately", "Cordoned", False, None,
                         restart=True),
    "cordoned": Case("maintenance.node.cordoned", "Immediately", "Cordoned", True, "queued"),
    "draining": Case("maintenance.node.draining", "Immediately", "Draining", True, "queued",
                     restart=True),
    "surged": Case("drain.surged", "Immediately", "Draining", True, "draining"),
    "evicted": Case("drain.evicted", "Immediately", "Draining", True, "draining",
                    restart=True),
    "drained": Case("maintenance.node.drained", "Immediately", "Draining", True, "drained"),
    "uncordoning": Case("maintenance.node.uncordoning", "Immediately", "Drained", True,
                        "drained", restart=True),
    "uncordoned": Case("maintenance.node.uncordoned", "Immediately", "Drained", False, None),
    "awaiting": Case("maintenance.node.awaiting", "WhenMaintained", "AwaitingMaintenance",
                     True, "drained", restart=True),
    "uncordoning-maintained": Case("maintenance.node.uncordoning", "WhenMaintained",
                                   "AwaitingMaintenance", True, "drained"),
}


RELEASE: Point = "maintenance.release.given-back"  # test_leader_killed_while_deleting_...
CHECK_WORKER: Point = "check.worker.checked"  # not the controller's: tests/check/test_parallel.py


async def test_every_point_has_a_case() -> None:
    assert {c.point for c in CASES.values()} | {RELEASE, CHECK_WORKER} == set(POINTS)


def _placement(lab: Lab, controllers: str) -> dict[str, list[str]]:
    """The workload's Ready pods (UIDs) on each node the controller does not run on."""
    out: dict[str, list[str]] = {n["metadata"]["name"]: [] for n in lab_store(lab).items(
        NODES, "") if n["metadata"]["name"] != controllers}
    for pod in ready_pods(lab, "llm"):
        if pod["spec"]["nodeName"] in out:
            out[pod["spec"]["nodeName"]].append(pod["metadata"]["uid"])
    return out


def _at_kill(lab: Lab, name: str
             ) -> tuple[str, tuple[NodeState | None, bool, ProgressState | None]]:
    """The node the leader stopped at, and what the cluster shows of it (as a Case says
    it); fire-once, so the first node the operation took (with maxParallelNodes 1, the
    only one neither Pending nor done)."""
    started = [n for n, s in nm_states(lab, name).items() if s not in ("Pending", "Uncordoned")]
    if not started:
        return "", (None, False, None)
    (node,) = started
    obj = lab_store(lab).get(NODES, "", node)
    record = Progress.of(obj).state if PROGRESS in (
        obj["metadata"].get("annotations") or {}) else None
    return node, (nm_states(lab, name)[node], bool(obj["spec"].get("unschedulable")), record)


async def _arm(killed: Killed, point: Point) -> tuple[list[str], set[str]]:
    """With both replicas up (the other takes over at once, not after a pod start), two
    nodes the controller does not run on, the busiest first (it has workload pods), and
    the workload's pods on them; then `point` armed."""
    lab = killed.lab
    await lab.wait_available(NAMESPACE, LEASE, timeout=60)
    where = _placement(lab, killed.controllers)
    busy = max(where, key=lambda n: len(where[n]))
    nodes = [busy, min((n for n in where if n != busy), key=lambda n: len(where[n]))]
    on_nodes = {uid for n in nodes for uid in where[n]}
    assert on_nodes, where
    (killed.points / f"{point}.hit").unlink(missing_ok=True)
    (killed.points / point).touch()
    return nodes, on_nodes


def _leader(lab: Lab) -> tuple[str, int | None]:
    """The Lease's holder and its controller process (None: not running)."""
    assert lab.nodes is not None
    holder = lab_store(lab).get(LEASES, NAMESPACE, LEASE)["spec"]["holderIdentity"]
    worker = lab.nodes.worker(NAMESPACE, holder)
    running = [] if worker is None else [c.process.pid for c in worker.containers
                                         if c.process is not None and c.process.returncode is None]
    return holder, (running[0] if running else None)


async def _stopped(killed: Killed, point: Point) -> tuple[str, int]:
    """The leader stopped at `point`: its pod and pid (the point's own word, checked
    against the Lease: no other replica reaches it)."""
    hit = killed.points / f"{point}.hit"
    await eventually(f"the leader at {point}", hit.exists, timeout=60)
    holder, pid = _leader(killed.lab)
    assert pid is not None and int(hit.read_text()) == pid, "not the leader"
    return holder, pid


async def _kill(client: KubeClient, holder: str, pid: int, *, restart: bool) -> None:
    """SIGKILL to the leader's process group; unless `restart`, its pod deleted too, so
    the other replica leads next, a Lease later."""
    os.killpg(pid, signal.SIGKILL)
    if not restart:
        await client.request("DELETE", api_path("v1", "pods", namespace=NAMESPACE,
                                                name=holder),
                             params={"gracePeriodSeconds": "0"})


def _hpa_as_before(lab: Lab) -> None:
    hpa = lab_store(lab).get(HPAS, "default", "llm")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (REPLICAS, REPLICAS), hpa
    assert not [a for a in hpa["metadata"].get("annotations") or {}
                if a.startswith("drainsafe.io/")], hpa["metadata"]


async def _create(client: KubeClient, name: str, nodes: list[str], uncordon: Uncordon
                  ) -> None:
    await client.post(api_path("drainsafe.io/v1alpha1", "nodemaintenances"), {
        "apiVersion": "drainsafe.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"nodeNames": nodes, "maxParallelNodes": 1, "maxUnavailable": 1,
                 "uncordon": uncordon, "reason": "killed leader"}})


@pytest.mark.parametrize("case", list(CASES))
async def test_leader_killed_at_each_seam_the_next_leader_finishes(
        killed: Killed, case: str) -> None:
    lab, c = killed.lab, CASES[case]
    point, uncordon = c.point, c.uncordon
    name = f"killed-{case}"
    store = lab_store(lab)
    nodes, on_nodes = await _arm(killed, point)
    most_pods = max(len(_placement(lab, killed.controllers)[n]) for n in nodes)
    marker = asyncio.create_task(mark_awaiting(lab, name))
    try:
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, \
                sampling(lab, name, nodes, uncordon) as seen:
            await _create(client, name, nodes, uncordon)
            holder, pid = await _stopped(killed, point)
            first, stopped = _at_kill(lab, name)
            surge_at_kill = SURGE in (store.get(DEPLOYMENTS, "default", "llm")["metadata"]
                                      .get("annotations") or {})
            hpa_at_kill = store.get(HPAS, "default", "llm")["spec"]["minReplicas"]
            await _kill(client, holder, pid, restart=c.restart)
            seen.records.clear()  # from here on: the drain records the next leader writes
            await eventually(f"{name} finished", lambda: nm_status(lab, name).get("phase")
                             in ("Succeeded", "Failed"), timeout=90)
    finally:
        marker.cancel()
        await asyncio.gather(marker, return_exceptions=True)
    # where the leader stopped: the seam the point names
    assert stopped == (c.row, c.cordoned, c.record), (stopped, c)
    surging = case in ("surged", "evicted")  # the surge and the HPA's raised bounds in place
    assert (surge_at_kill, hpa_at_kill > REPLICAS) == (surging, surging), hpa_at_kill
    # finished by another process: the other replica, or (restarted: whichever takes the
    # Lease first) the same pod's new container
    after, now = _leader(lab)
    assert now not in (None, pid) and (c.restart or after != holder), (holder, pid, after, now)
    status = nm_status(lab, name)
    assert status["phase"] == "Succeeded", status
    assert [(n["name"], n["state"]) for n in status["nodes"]] == [
        (n, "Uncordoned") for n in nodes], status["nodes"]
    # the budgets and the capacity, at every 0.1 s sample
    assert seen.most_in_progress <= 1 and seen.most_unavailable <= 1, seen
    assert seen.lowest_ready >= REPLICAS, seen
    # each node drained once: cordoned once, each of its pods evicted once, no other pod
    assert all(n == 1 for n in seen.cordons.values()), seen.cordons
    evicted = evictions(lab, seen)
    assert all(n == 1 for n in evicted.values()), evicted
    assert {node for _, node in evicted} <= set(nodes), evicted
    assert on_nodes <= {uid for uid, _ in evicted}, "a pod there was not drained"
    if stopped[2] == "drained":  # drained before the kill: its drain never runs again
        assert seen.records.get(first, set()) <= {"drained"}, seen.records
    # never a surge on top of a surge: at most one node's pods surged at once
    assert seen.most_replicas <= REPLICAS + most_pods, seen
    low = status.get("lowestCapacity")
    assert low is None or low["percent"] == "100%", low  # make before break throughout
    left_as_before(lab, nodes)
    _hpa_as_before(lab)
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        for n in nodes:  # the external tool's mark, for the next case's clean slate
            await client.patch(api_path("v1", "nodes", name=n),
                               {"metadata": {"annotations": {MAINTAINED: None}}})
    await audit_clean(lab)



async def test_leader_killed_while_deleting_the_next_leader_removes_the_finalizer(
        killed: Killed) -> None:
    """Deleted with its first node AwaitingMaintenance (cordoned, drained, recorded) and the
    other Pending (soft-tainted): the leader gives both back and stops before removing its
    finalizer; killed there, the next leader finds nothing left to give back, removes the
    finalizer, and the object goes. Nothing forgotten: no cordon, record, pending taint or
    surge; no pod evicted twice."""
    lab = killed.lab
    name = "killed-deleting"
    store = lab_store(lab)
    nodes, _ = await _arm(killed, RELEASE)
    path = api_path("drainsafe.io/v1alpha1", "nodemaintenances", name=name)
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, \
            sampling(lab, name, nodes, "WhenMaintained") as seen:
        await _create(client, name, nodes, "WhenMaintained")
        await eventually("a node AwaitingMaintenance", lambda: "AwaitingMaintenance" in
                         nm_states(lab, name).values())
        await client.request("DELETE", path)
        holder, pid = await _stopped(killed, RELEASE)
        obj = store.peek(maintenance_rt(lab), "", name)
        assert obj is not None and obj["metadata"]["deletionTimestamp"], obj
        assert obj["metadata"]["finalizers"] == [FINALIZER], obj["metadata"]
        left_as_before(lab, nodes)  # given back before the kill
        await _kill(client, holder, pid, restart=False)
        await eventually(f"{name} gone", lambda: store.peek(maintenance_rt(lab), "", name)
                         is None, timeout=90)
    assert store.get(LEASES, NAMESPACE, LEASE)["spec"]["holderIdentity"] != holder
    assert seen.most_in_progress <= 1 and seen.most_unavailable <= 1, seen
    assert seen.lowest_ready >= REPLICAS, seen
    evicted = evictions(lab, seen)
    assert all(n == 1 for n in evicted.values()), evicted
    assert {node for _, node in evicted} <= set(nodes), evicted
    assert all(n == 1 for n in seen.cordons.values()), seen.cordons
    left_as_before(lab, nodes)
    _hpa_as_before(lab)
    await audit_clean(lab)
