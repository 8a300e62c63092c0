"""NodeMaintenance (issue 30) on one lab of 4 GPU nodes, each operation run by a leader in
this process (the controller's own MaintenanceReconciler under a LeaderElector, over real
HTTP): a new leader keeping the lowest capacity a killed one read, break before make,
paused mid-drain, deleted mid-drain, maintainedWhen across a leader change, and waves by
surge room. The leader SIGKILLed at each seam of its writes, in the real controller
process, is test_maintenance_kills_lab.

Every 0.1 s a sampler (maintlab.sampling) reads the store: nodes in progress (<=
maxParallelNodes), selected nodes unavailable (<= maxUnavailable), Ready pods of the
workload (>= desired), the phase. Evictions are counted per pod UID from the API server's
request log. After each test `drainsafe audit -o json` exits 0: no forgotten cordon,
nothing left scaled up.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import pathlib
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import pytest_asyncio
import yaml

from drainsafe.controller.leader import LeaderElector
from drainsafe.controller.maintenance import MaintenanceReconciler
from drainsafe.controller.maintenance_release import FINALIZER
from drainsafe.drain import scale
from drainsafe.drain.cordon import cordon, uncordon
from drainsafe.drain.ownership import (
    CORDONED_BY,
    CORDONED_FOR,
    SURGE,
    Progress,
    maintenance_ref,
)
from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.kube.objects import parse_time, rfc3339
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab, virtual_deployment
from drainsafe.maintenance.capacity import LowestCapacity
from drainsafe.maintenance.maintained import MAINTAINED, wait_bound
from drainsafe.maintenance.pending import pending_of
from drainsafe.maintenance.progress import (
    NodeProgress,
    read_nodes,
    status_of,
)
from drainsafe.maintenance.spec import MaintainedWhen, Uncordon

from .guardlab import KUBECTL_DIR, audit_clean, kubectl, ready_pods
from .maintlab import (
    DEPLOYMENTS,
    NODES,
    PODS,
    REPLICAS,
    WORKLOAD,
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
ROOT = pathlib.Path(__file__).resolve().parents[2]
PERIOD = 0.2  # the reconciler's period here (the controller's default is 0.5 s)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lab(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Lab]:
    async with Lab(tmp_path_factory.mktemp("phases") / "lab", nodes=4, gpus_per_node=2,
                   propagation_seconds=0.2, restart_backoff=0.5) as lab:
        await lab.apply(*yaml.safe_load_all(
            (ROOT / "deploy/controller/nodemaintenance-crd.yaml").read_text()))
        await lab.wait_established("nodemaintenances.drainsafe.io")
        await lab.apply(virtual_deployment("llm", replicas=REPLICAS, startup_seconds=0.5,
                                           exit_after_sigterm_seconds=0.2, gpus=1))
        await lab.wait_available("default", "llm", timeout=60)
        yield lab


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow(lab: Lab) -> str:
    """A workload whose pods take 3 s to start: a node of it drains for certain at least
    that long, long enough to pause or delete the operation mid-drain on a busy machine."""
    await lab.apply(virtual_deployment("slow", replicas=1, startup_seconds=3.0,
                                       exit_after_sigterm_seconds=0.2, gpus=1))
    await lab.wait_available("default", "slow", timeout=60)
    return "slow"


def _slow_node(lab: Lab) -> tuple[dict[str, Any], list[str]]:
    """The slow workload's pod, and two nodes: its node, then the one with fewest pods."""
    (pod,) = ready_pods(lab, "slow")
    busy = pod["spec"]["nodeName"]
    where = _placement(lab)
    return pod, [busy, min((n for n in where if n != busy), key=lambda n: len(where[n]))]


def _placement(lab: Lab) -> dict[str, list[dict[str, Any]]]:
    """Each node's Ready workload pods."""
    out: dict[str, list[dict[str, Any]]] = {
        n["metadata"]["name"]: [] for n in lab_store(lab).items(NODES, "")}
    for pod in ready_pods(lab, "llm"):
        out[pod["spec"]["nodeName"]].append(pod)
    return out


def _pick(lab: Lab, *, first_busy: bool) -> list[str]:
    """Two nodes, one with workload pods and one without (3 pods on 4 nodes: there is
    one), so that the resumed operation has one real drain to do: the busy one first, or
    the idle one first (a drained node has no workload pods)."""
    where = _placement(lab)
    busy = sorted((n for n, p in where.items() if p), key=lambda n: -len(where[n]))
    idle = sorted(n for n, p in where.items() if not p)
    return [busy[0], idle[0]] if first_busy else [idle[0], busy[0]]


@asynccontextmanager
async def leader(lab: Lab, identity: str) -> AsyncIterator[MaintenanceReconciler]:
    """A new leader: the controller's reconciler and elector, as app.py wires them."""
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        nodes = await Informer(client, api_path("v1", "nodes")).start()
        elector = LeaderElector(client, "default", f"lease-{identity}", identity,
                                lease_seconds=2, retry_seconds=0.3)
        reconciler = MaintenanceReconciler(client, nodes)
        tasks = [asyncio.create_task(elector.run()),
                 asyncio.create_task(reconciler.run(elector, PERIOD))]
        try:
            yield reconciler
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await nodes.stop()


def _spec(nodes: list[str], uncordon: Uncordon, max_unavailable: int = 1) -> dict[str, Any]:
    return {"nodeNames": nodes, "maxParallelNodes": 1, "maxUnavailable": max_unavailable,
            "uncordon": uncordon, "reason": "phase test"}


async def _create(client: KubeClient, name: str, spec: dict[str, Any], *,
                  held: bool) -> None:
    await client.post(api_path("drainsafe.io/v1alpha1", "nodemaintenances"), {
        "apiVersion": "drainsafe.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name, **({"finalizers": [FINALIZER]} if held else {})},
        "spec": spec})


# -- a new leader keeps the lowest capacity the killed one read ---------------------------

KILLED_LOWEST = LowestCapacity(2, 3, WORKLOAD, node="constructed", at="2026-12-06T00:00:00Z")


async def test_a_new_leader_keeps_the_lowest_capacity_a_killed_one_read(lab: Lab) -> None:
    """What a leader killed mid-drain leaves (the status Draining with a reading below
    desired in status.lowestCapacity, the node cordoned and recorded, a surge in place),
    written here with the writers the reconciler and the drain use, then a new leader in
    this process: it finishes, and keeps the lower reading (its own read 100 %). The leader
    SIGKILLed at each seam, in the real controller, is test_maintenance_kills_lab; a
    reading below desired cannot come from a make-before-break drain there."""
    name = "killed-lowest"
    nodes = _pick(lab, first_busy=True)
    first = nodes[0]
    on_first = [p["metadata"]["uid"] for p in _placement(lab)[first]]
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        await _create(client, name, _spec(nodes, "Immediately"), held=True)
        await cordon(client, first, reason="phase test", state="draining",
                     operation=maintenance_ref(name))
        pods = {f"default/{p['metadata']['name']}": p["metadata"]["uid"]
                for p in _placement(lab)[first]}
        surge = await scale.begin(client, WORKLOAD, node=first, autoscaler=None, pods=pods)
        await scale.set_scale(client, WORKLOAD, surge, surge.replicas + len(pods))
        obj = await client.get(api_path("drainsafe.io/v1alpha1", "nodemaintenances",
                                        name=name))
        rows = [NodeProgress(first, "Draining", 1, "Draining", started=rfc3339()),
                NodeProgress(nodes[1])]
        obj["status"] = {**status_of(rows, "Immediately", False, 1, 1),
                         "lowestCapacity": KILLED_LOWEST.as_status()}
        await client.request("PUT", api_path("drainsafe.io/v1alpha1", "nodemaintenances",
                                             name=name, subresource="status"), body=obj)
    async with sampling(lab, name, nodes, "Immediately") as seen, leader(lab, name):
        await eventually(f"{name} finished",
                         lambda: nm_status(lab, name).get("phase") in ("Succeeded", "Failed"))
    status = nm_status(lab, name)
    assert status["phase"] == "Succeeded", status
    assert status["lowestCapacity"] == KILLED_LOWEST.as_status(), status
    assert seen.lowest_ready >= REPLICAS, seen
    evicted = evictions(lab, seen)
    assert all(n == 1 for n in evicted.values()), evicted
    assert set(on_first) <= {uid for uid, _ in evicted}, "a pod there was not drained"
    left_as_before(lab, nodes)
    await audit_clean(lab)


# -- break before make: the lowest capacity says so -------------------------------------

async def test_break_before_make_reads_below_desired_and_warns(lab: Lab) -> None:
    """drain.strategy evict (as kubectl drain, replacement first): the drain's own readings
    catch the workload one pod short, status.lowestCapacity keeps it, and a Warning Event
    says so; the same measure reads 100 % for the make-before-break phases above."""
    name = "break-before-make"
    nodes = _pick(lab, first_busy=True)[:1]
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        await _create(client, name, {**_spec(nodes, "Immediately"),
                                     "drain": {"strategy": "evict"}}, held=False)
    async with leader(lab, name):
        await eventually(f"{name} finished",
                     lambda: nm_status(lab, name).get("phase") in ("Succeeded", "Failed"))

        def warned() -> bool:
            return any(e["reason"] == "CapacityBelowDesired"
                       and e["involvedObject"]["name"] == name and e["type"] == "Warning"
                       for e in lab_store(lab).items(BY_KEY["events"], "default"))

        await eventually("the CapacityBelowDesired Event", warned, timeout=10)
    status = nm_status(lab, name)
    assert status["phase"] == "Succeeded", status
    low = status["lowestCapacity"]
    assert (low["workload"], low["desired"], low["node"]) == (WORKLOAD, REPLICAS, nodes[0])
    assert low["ready"] < REPLICAS and low["percent"] == f"{100 * low['ready'] // REPLICAS}%"
    await eventually("llm back at full capacity", lambda: len(ready_pods(lab, "llm")) == REPLICAS)
    left_as_before(lab, nodes)


# -- pause in the middle of a drain -------------------------------------------------------

async def test_paused_mid_drain_the_node_in_progress_finishes_and_no_other_starts(
        lab: Lab, slow: str) -> None:
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    name = "paused-mid-drain"
    old, nodes = _slow_node(lab)
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, \
            sampling(lab, name, nodes, "Immediately") as seen, leader(lab, name):
        await _create(client, name, _spec(nodes, "Immediately"), held=False)
        dep_path = api_path("apps/v1", "deployments", namespace="default", name="llm")
        await eventually("the first node draining with its surge in place", lambda: (
            nm_states(lab, name).get(nodes[0]) == "Draining"
            and SURGE in (lab_store(lab).get(DEPLOYMENTS, "default", slow)["metadata"]
                          .get("annotations") or {})))
        code, out = await kubectl(lab, "1.33", "patch", "nodemaintenance", name,
                                  "--type=merge", "-p", '{"spec":{"paused":true}}')
        assert code == 0, out
        paused_at = len(seen.phases)
        await eventually("the node in progress finished",
                     lambda: nm_states(lab, name).get(nodes[0]) == "Uncordoned")
        # finished means drained: the pod it surged for was replaced, elsewhere
        assert old["metadata"]["uid"] not in {p["metadata"]["uid"]
                                              for p in ready_pods(lab, slow)}
        assert ready_pods(lab, slow)[0]["spec"]["nodeName"] != nodes[0]
        await eventually("Paused", lambda: nm_status(lab, name).get("phase") == "Paused")
        # five reconcile passes with nothing in progress: none starts the next node
        await asyncio.sleep(5 * PERIOD)
        assert nm_states(lab, name)[nodes[1]] == "Pending"
        assert nodes[1] not in seen.cordoned
        # the node task's own writes say Paused too once the pause is read (no flapping)
        assert "Running" not in seen.phases[paused_at + 1:], seen.phases
        assert (await client.get(dep_path))["spec"]["replicas"] == REPLICAS
        code, out = await kubectl(lab, "1.33", "patch", "nodemaintenance", name,
                                  "--type=merge", "-p", '{"spec":{"paused":false}}')
        assert code == 0, out
        await eventually("Succeeded", lambda: nm_status(lab, name).get("phase") == "Succeeded")
    assert seen.most_in_progress <= 1 and seen.lowest_ready >= REPLICAS, seen
    assert all(n == 1 for n in evictions(lab, seen).values())
    assert all(n == 1 for n in seen.cordons.values()), seen.cordons
    left_as_before(lab, nodes)
    await audit_clean(lab)


# -- deleted in the middle of a drain -----------------------------------------------------

async def test_deleted_mid_drain_gives_back_its_cordons_and_surges(
        lab: Lab, slow: str) -> None:
    """uncordon: Never over a first node (drained: done, left cordoned) and the slow
    workload's node, deleted while that one drains with its surge in place: the drain
    stops, the surge is restored, the node uncordoned, its pod never evicted; the first
    node stays cordoned and recorded, as its spec asked; the object goes once the
    finalizer is removed."""
    name = "deleted-mid-drain"
    store = lab_store(lab)
    old, (busy, first) = _slow_node(lab)
    nodes = [first, busy]
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, \
            sampling(lab, name, nodes, "Never") as seen, leader(lab, name):
        # maxUnavailable 2: the first node, left cordoned once drained, stays unavailable
        await _create(client, name, _spec(nodes, "Never", max_unavailable=2), held=False)
        await eventually("the slow workload's node draining with its surge in place", lambda: (
            nm_states(lab, name).get(busy) == "Draining"
            and SURGE in (store.get(DEPLOYMENTS, "default", slow)["metadata"]
                          .get("annotations") or {})))
        assert nm_states(lab, name)[first] == "Drained"
        path = api_path("drainsafe.io/v1alpha1", "nodemaintenances", name=name)
        assert FINALIZER in (await client.get(path))["metadata"]["finalizers"]
        # The API server's answer: 200 with the object, marked, still held by the finalizer.
        answer = await client.request("DELETE", path)
        assert answer["metadata"]["deletionTimestamp"]
        assert answer["metadata"]["finalizers"] == [FINALIZER]
        await eventually("the NodeMaintenance gone",
                     lambda: store.peek(maintenance_rt(lab), "", name) is None)
        dep = store.get(DEPLOYMENTS, "default", slow)
        assert dep["spec"]["replicas"] == 1, "the surge was not restored"
        assert SURGE not in (dep["metadata"].get("annotations") or {})
        # the pod it surged for was never evicted: it serves on, where it was
        assert [p["metadata"]["uid"] for p in ready_pods(lab, slow)] == [
            old["metadata"]["uid"]]
    # the drain in progress stopped and was given back; the first node kept as specified
    left_as_before(lab, [busy])
    kept = store.get(NODES, "", first)
    assert kept["spec"].get("unschedulable")
    assert (kept["metadata"].get("annotations") or {}).get(
        "drainsafe.io/cordoned-for") == maintenance_ref(name)
    assert seen.most_in_progress <= 1 and seen.most_unavailable <= 2, seen
    assert seen.lowest_ready >= REPLICAS, seen
    assert all(n == 1 for n in evictions(lab, seen).values())
    assert old["metadata"]["uid"] not in {uid for uid, _ in evictions(lab, seen)}
    assert all(n == 1 for n in seen.cordons.values()), seen.cordons
    doc = await audit_clean(lab)
    assert [(n["node"], n["owned_by"]) for n in doc["nodes"]] == [(first, "drainsafe")]
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        await uncordon(client, first)  # as `drainsafe uncordon` would


# -- spec.maintainedWhen: a reboot, a node condition, a replaced node ---------------------

def _quiet_nodes(lab: Lab, count: int) -> list[str]:
    """`count` nodes without the slow workload, fewest workload pods first (short drains)."""
    slow_nodes = {p["spec"]["nodeName"] for p in ready_pods(lab, "slow")}
    where = _placement(lab)
    return sorted((n for n in where if n not in slow_nodes),
                  key=lambda n: (len(where[n]), n))[:count]


def _row(lab: Lab, name: str, node: str) -> dict[str, Any]:
    return next(n for n in nm_status(lab, name)["nodes"] if n["name"] == node)


async def _lab_reboot(lab: Lab, node: str, *args: str) -> str:
    """`drainsafe lab node reboot`, as a person runs it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", "lab", "node", "reboot", node,
        "--kubeconfig", str(lab.kubeconfig), "--down-seconds", "0.3", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    async with asyncio.timeout(60):
        out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    return out.decode()


async def test_maintained_when_rebooted_or_a_condition_across_a_leader_change(
        lab: Lab) -> None:
    """maintainedWhen {bootIDChanged, nodeCondition GPUDriverReady, annotation: false} over
    2 nodes: both wait AwaitingMaintenance with their boot ID recorded; the leader goes; one
    node is rebooted (`drainsafe lab node reboot`, an upgrade) and the other annotated; a
    new leader, which never saw the old boot ID, uncordons the rebooted one from the
    record, and keeps the annotated one (the annotation does not count) until `kubectl
    patch --subresource=status` sets the condition."""
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    name = "maintained-when"
    nodes = _quiet_nodes(lab, 2)
    rebooted, conditioned = nodes
    spec = {**_spec(nodes, "WhenMaintained", max_unavailable=2), "maxParallelNodes": 2,
            "maintainedWhen": {"annotation": False, "bootIDChanged": True,
                               "nodeCondition": {"type": "GPUDriverReady"}}}
    store = lab_store(lab)
    boots = {n: store.get(NODES, "", n)["status"]["nodeInfo"]["bootID"] for n in nodes}
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, \
            sampling(lab, name, nodes, "WhenMaintained") as seen:
        async with leader(lab, f"{name}-1"):
            await _create(client, name, spec, held=False)
            await eventually("both AwaitingMaintenance", lambda: set(
                nm_states(lab, name).values()) == {"AwaitingMaintenance"})
        for n in nodes:
            assert _row(lab, name, n)["recorded"]["bootID"] == boots[n]
            assert store.get(NODES, "", n)["spec"].get("unschedulable"), n
        await client.patch(api_path("v1", "nodes", name=conditioned),
                           {"metadata": {"annotations": {MAINTAINED: name}}})
        said = await _lab_reboot(lab, rebooted, "--kubelet-version", "v1.33.1-lab")
        after = store.get(NODES, "", rebooted)["status"]["nodeInfo"]
        assert after["bootID"] != boots[rebooted] and after["kubeletVersion"] == "v1.33.1-lab"
        assert f"boot ID {boots[rebooted]} -> {after['bootID']}" in said
        async with leader(lab, f"{name}-2"):
            await eventually(f"{rebooted} Uncordoned",
                         lambda: nm_states(lab, name)[rebooted] == "Uncordoned")
            assert _row(lab, name, rebooted)["message"] == "maintained: Rebooted"
            # the annotation came before the reboot, through the same watch: not counted
            assert nm_states(lab, name)[conditioned] == "AwaitingMaintenance"
            assert store.get(NODES, "", conditioned)["spec"].get("unschedulable")
            code, out = await kubectl(
                lab, "1.33", "patch", "node", conditioned, "--subresource=status", "-p",
                '{"status":{"conditions":[{"type":"GPUDriverReady","status":"True",'
                '"reason":"DriverUpgraded"}]}}')
            assert code == 0, out
            await eventually("Succeeded", lambda: nm_status(lab, name).get("phase") == "Succeeded")
        assert _row(lab, name, conditioned)["message"] == "maintained: Condition"
        await client.patch(api_path("v1", "nodes", name=conditioned),
                           {"metadata": {"annotations": {MAINTAINED: None}}})
    assert seen.lowest_ready >= REPLICAS and seen.most_in_progress <= 2, seen
    assert all(n == 1 for n in evictions(lab, seen).values())
    left_as_before(lab, nodes)
    await audit_clean(lab)


async def test_a_node_gone_while_awaiting_waits_and_its_replacement_is_maintained(
        lab: Lab) -> None:
    """bootIDChanged: the Node deleted while AwaitingMaintenance stays so, reason
    NodeGone; a new machine registering under the name (a new UID) is maintained
    (Replaced) and the operation Succeeds."""
    name = "replaced"
    (node,) = _quiet_nodes(lab, 1)
    spec = {**_spec([node], "WhenMaintained"), "maintainedWhen": {"bootIDChanged": True}}
    store = lab_store(lab)
    old_uid = store.get(NODES, "", node)["metadata"]["uid"]
    assert lab.nodes is not None
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, leader(lab, name):
        await _create(client, name, spec, held=False)
        await eventually("AwaitingMaintenance",
                     lambda: nm_states(lab, name).get(node) == "AwaitingMaintenance")
        await client.request("DELETE", api_path("v1", "nodes", name=node))
        await eventually("NodeGone", lambda: _row(lab, name, node)["reason"] == "NodeGone")
        assert nm_states(lab, name)[node] == "AwaitingMaintenance"
        await lab.nodes.kubelets[node].replace_machine()
        await eventually("Succeeded", lambda: nm_status(lab, name).get("phase") == "Succeeded")
    row = _row(lab, name, node)
    assert (row["state"], row["message"]) == ("Uncordoned", "maintained: Replaced")
    assert row["recorded"]["uid"] == old_uid != store.get(NODES, "", node)["metadata"]["uid"]
    left_as_before(lab, [node])
    await audit_clean(lab)


# -- maintainedWhen.timeoutSeconds: a node never marked --------------------------------

# Scaled down from the hours a real maintenance would allow. The leader change below comes
# GAP seconds into the wait, so a new leader that restarted the clock would fail the node
# TIMEOUT after it started, GAP - 1 s later than the deadline the status says.
TIMEOUT, GAP = 6, 3.0


async def test_a_node_never_marked_times_out_failed_cordoned_and_recorded(lab: Lab) -> None:
    """maintainedWhen.timeoutSeconds over 2 nodes, maxParallelNodes 1, maxUnavailable 2:
    the first is never marked. Its leader stops while it waits and a new one takes over:
    the node fails MaintenanceTimedOut at the deadline its row's finished time says (not
    TIMEOUT after the new leader began), while the operation runs on; it stays cordoned
    with drainsafe's record (audit lists it as drainsafe's); NodeFailed is a Warning
    Event; the second node drains, is marked and uncordoned, and only then the operation
    ends Failed. Deleting it gives the failed node back.

    Both nodes carry the operation's mark before it starts (kubectl annotate too early, or
    left over from an earlier operation of the name): it is recorded as there when each
    drain ended and does not count, so the first still times out, cordoned all along, and
    the second waits until marked again (a note after the name, as kubectl can)."""
    name = "timed-out"
    never, marked = nodes = _quiet_nodes(lab, 2)
    spec = {**_spec(nodes, "WhenMaintained", max_unavailable=2),
            "maintainedWhen": {"timeoutSeconds": TIMEOUT}}
    store = lab_store(lab)
    statuses: list[dict[str, Any]] = []  # every status the watch delivered

    def row(cache: dict[str, Any], node: str) -> dict[str, Any]:
        obj = cache.get(name) or {}
        statuses.append((obj.get("status") or {}) if obj else {})
        return next((r for r in statuses[-1].get("nodes") or [] if r["name"] == node), {})

    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, \
            sampling(lab, name, nodes, "WhenMaintained") as seen:
        watch = await Informer(client, api_path("drainsafe.io/v1alpha1",
                                                "nodemaintenances")).start()
        events = await Informer(client, api_path("v1", "events", namespace="default")).start()

        async def mark_the_second() -> dict[str, Any]:  # the external tool, the second only
            awaiting: dict[str, Any] = await watch.wait_for(
                lambda c: (r := row(c, marked)).get("state") == "AwaitingMaintenance" and r,
                timeout=300)
            assert store.get(NODES, "", marked)["spec"].get("unschedulable")
            await client.patch(api_path("v1", "nodes", name=marked),
                               {"metadata": {"annotations": {MAINTAINED: f"{name}/again"}}})
            return awaiting

        for n in nodes:  # marked too early: before the operation, so before any drain
            await client.patch(api_path("v1", "nodes", name=n),
                               {"metadata": {"annotations": {MAINTAINED: name}}})
        marker = asyncio.create_task(mark_the_second())
        try:
            async with leader(lab, f"{name}-1"):
                await _create(client, name, spec, held=False)
                awaiting = await watch.wait_for(
                    lambda c: (r := row(c, never)).get("state") == "AwaitingMaintenance"
                    and r, timeout=90)
            drained = awaiting["finished"]
            bound = wait_bound(drained, 0, MaintainedWhen(timeout_seconds=TIMEOUT))
            assert bound.deadline is not None
            await asyncio.sleep(GAP)  # no leader for part of the wait
            assert row(watch.cache, never)["state"] == "AwaitingMaintenance"
            async with leader(lab, f"{name}-2"):
                began = time.time()
                assert began < bound.deadline, "the gap outlasted the wait"
                # before the restarted clock's deadline, whatever the machine's load
                failed, at_failure = await watch.wait_for(
                    lambda c: (r := row(c, never)).get("state") == "Failed"
                    and (r, statuses[-1]), timeout=began + TIMEOUT - time.time())
                await watch.wait_for(lambda c: (c.get(name) or {}).get("status", {}).get(
                    "phase") in ("Succeeded", "Failed"), timeout=90)
                final = (watch.cache.get(name) or {})["status"]

                def warned(cache: dict[str, Any]) -> bool:
                    mine = [e for e in cache.values()
                            if e["involvedObject"].get("name") == name]
                    return any(e["reason"] == "NodeFailed" and e["type"] == "Warning"
                               and f"{never}: MaintenanceTimedOut" in e["message"]
                               for e in mine) and any(
                        e["reason"] == "Failed" and e["type"] == "Warning" for e in mine)

                await events.wait_for(warned, timeout=30, what="NodeFailed and Failed Events")
                # the failed node as left: cordoned, drainsafe's record naming the operation
                kept = store.get(NODES, "", never)
                ann = kept["metadata"].get("annotations") or {}
                assert kept["spec"].get("unschedulable"), kept["spec"]
                assert ann.get(CORDONED_FOR) == maintenance_ref(name) and CORDONED_BY in ann
                assert Progress.of(kept).state == "drained"
                assert pending_of(kept) is None
                doc = await audit_clean(lab)
                assert [(n["node"], n["owned_by"]) for n in doc["nodes"]] == [
                    (never, "drainsafe")], doc["nodes"]
                # deleted: the failed node is given back, as any failed node's cordon
                await client.request("DELETE", api_path(
                    "drainsafe.io/v1alpha1", "nodemaintenances", name=name))
                await watch.wait_for(lambda c: name not in c, timeout=60)
            second_awaiting = await marker
        finally:
            marker.cancel()
            await asyncio.gather(marker, return_exceptions=True)
            await watch.stop()
            await events.stop()
        for n in nodes:
            await client.patch(api_path("v1", "nodes", name=n),
                               {"metadata": {"annotations": {MAINTAINED: None}}})
    # the early mark: recorded as there when each drain ended, said so, and not counted
    for awaited in (awaiting, second_awaiting):
        assert awaited["recorded"].get("maintained") == name, awaited
        assert f"{MAINTAINED}={name} was set before the drain ended" in awaited["message"]
    # failed at the deadline its row said, not before (whole seconds: from the end of the
    # drain's second), and not TIMEOUT after the new leader began (asserted by the wait)
    assert (failed["reason"], failed["message"]) == ("MaintenanceTimedOut", bound.message())
    took = parse_time(failed["finished"])
    assert took is not None and took >= bound.deadline, (drained, failed)
    # the operation ran on while the other node was still to do, then ended Failed
    assert at_failure["phase"] == "Running", at_failure
    assert (final["phase"], final["done"], final["failed"]) == ("Failed", 1, 1), final
    assert [(r["name"], r["state"], r.get("message")) for r in final["nodes"]] == [
        (never, "Failed", bound.message()), (marked, "Uncordoned", "maintained: Annotated")]
    states_of_never = {r["state"] for st in statuses for r in st.get("nodes") or []
                       if r["name"] == never}
    assert "Uncordoned" not in states_of_never, states_of_never
    assert seen.most_in_progress <= 1 and seen.most_unavailable <= 2, seen
    assert seen.lowest_ready >= REPLICAS, seen
    assert all(n == 1 for n in evictions(lab, seen).values())
    assert all(n == 1 for n in seen.cordons.values()), seen.cordons
    left_as_before(lab, nodes)
    await audit_clean(lab)


# -- Events at a graceful stop --------------------------------------------------------------

async def test_events_of_the_last_writes_survive_a_graceful_stop(lab: Lab) -> None:
    """A leader stopped as app.run stops it at SIGTERM (the reconciler's task cancelled,
    then its client closed) right after its recorder was given Events: they are on the API
    server once the stop returns. Before, nothing waited for them: they were still on their
    way when the client closed (or cancelled by the guard's recorder.stop in app.run)."""
    name = "events-at-stop"
    (node,) = _quiet_nodes(lab, 1)
    # maintainedWhen under Immediately: Failed InvalidSpec at once, no node touched
    spec = {**_spec([node], "Immediately"), "maintainedWhen": {"bootIDChanged": True}}
    burst = [f"{node}: burst {i}" for i in range(40)]
    path = api_path("drainsafe.io/v1alpha1", "nodemaintenances", name=name)
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        async with leader(lab, f"{name}-1") as reconciler:
            await _create(client, name, spec, held=False)
            await eventually("Failed", lambda: nm_status(lab, name).get("phase") == "Failed")
            obj = lab_store(lab).peek(maintenance_rt(lab), "", name)
            for message in burst:
                reconciler.readout.events.emit(obj, "NodeMaintenance", "NodeUncordoned",
                                               message)
        written = [e["message"] for e in lab_store(lab).items(BY_KEY["events"], "default")
                   if e["involvedObject"].get("name") == name
                   and e["reason"] == "NodeUncordoned"]
        assert sorted(written) == sorted(burst)
        async with leader(lab, f"{name}-2"):  # its finalizer is given back by a leader
            await client.request("DELETE", path)
            await eventually("deleted", lambda: lab_store(lab).peek(
                maintenance_rt(lab), "", name) is None)
    left_as_before(lab, [node])


# -- waves by surge room ------------------------------------------------------------------

def _active_gpu_pods(lab: Lab) -> list[dict[str, Any]]:
    """The placed GPU pods not terminating (of the module's workloads: llm, slow)."""
    out = []
    for pod in lab_store(lab).items(PODS, "default"):
        spec = pod["spec"]
        wants = any("nvidia.com/gpu" in ((c.get("resources") or {}).get("requests") or {})
                    for c in spec.get("containers") or [])
        if wants and spec.get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
            out.append(pod)
    return out


def _gpu_pods(lab: Lab) -> collections.Counter[str]:
    """Active GPU pods per node."""
    return collections.Counter(p["spec"]["nodeName"] for p in _active_gpu_pods(lab))


async def test_a_node_whose_stand_ins_do_not_fit_beside_the_wave_waits_uncordoned(
        lab: Lab, slow: str) -> None:
    """maxParallelNodes 2 over two nodes A and B, with room outside them for A's stand-ins
    or B's but not both (pinned fillers take the rest): A starts, B waits Pending and
    schedulable with reason WaitingForRoom naming the workload, never cordoned to be
    refused (before: cordoned, refused, uncordoned, retried with a backoff), then
    drains once A is done. Meanwhile B carries the pending taint (PreferNoSchedule), and
    A's stand-ins land elsewhere though B has a free GPU.

    The room outside A and B is exactly A's stand-ins, so the replacement the ReplicaSet
    starts for an evicted pod before the scale comes down by one (drain.surgefirst) has
    only B's GPU: kube-scheduler places a pod with one feasible node there without
    scoring (pkg/scheduler/schedule_one.go schedulePod, "When only one node after
    predicate, just use it", read at kubernetes commit 003b4460edb5), so a
    PreferNoSchedule taint cannot keep it off B.
    What the taint does guarantee, and what is asserted: no stand-in on B, and anything
    that landed there is that replacement, taken by the scale-down, never evicted."""
    name = "room-waves"
    store = lab_store(lab)
    used = _gpu_pods(lab)
    nodes_all = sorted(n["metadata"]["name"] for n in store.items(NODES, ""))
    a, b = sorted((n for n in nodes_all if used[n]), key=lambda n: used[n])[:2]
    others = [n for n in nodes_all if n not in (a, b)]
    room = max(used[a], used[b])  # room for either node's stand-ins, not both
    fill = sum(2 - used[n] for n in others) - room
    fillers = []
    for n in others:
        take = min(fill, 2 - used[n])
        fill -= take
        if take:
            obj = virtual_deployment(f"filler-{n}", replicas=take, gpus=1)
            obj["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": n}
            fillers.append(obj)
    await lab.apply(*fillers)
    for obj in fillers:
        await lab.wait_available("default", obj["metadata"]["name"], timeout=60)
    reasons: set[tuple[str, str]] = set()
    tainted: set[bool] = set()
    landed: set[str] = set()
    before = {p["metadata"]["uid"] for p in store.items(PODS, "default")}
    # A's pods, every workload's: the slow fixture's pod may be on A, even alone (then
    # "llm- pods only" was the empty set, always "none evicted yet", and every new pod of
    # the test, B's replacement on B included, counted as A's stand-in)
    olds = {p["metadata"]["uid"] for p in _active_gpu_pods(lab) if p["spec"]["nodeName"] == a}
    # A's stand-ins: the new pods made before any of A's pods was evicted (the surge
    # waits for them to be Available before the first eviction)
    stand_ins: set[str] = set()
    where: dict[str, str] = {}
    try:
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, \
                sampling(lab, name, [a, b], "Immediately") as seen, leader(lab, name):
            spec = {**_spec([a, b], "Immediately", max_unavailable=2), "maxParallelNodes": 2}
            await _create(client, name, spec, held=False)

            def waited() -> bool:
                row = read_nodes(nm_status(lab, name)).get(b)
                if row is not None and row.state == "Pending" and row.reason:
                    reasons.add((row.reason, row.message))
                pods = list(store.items(PODS, "default"))
                new = [p for p in pods if p["metadata"]["uid"] not in before]
                where.update((p["metadata"]["name"], p["spec"]["nodeName"]) for p in new
                             if p["spec"].get("nodeName"))
                if olds == {p["metadata"]["uid"] for p in pods if p["metadata"]["uid"] in olds
                            and not p["metadata"].get("deletionTimestamp")}:
                    stand_ins.update(p["metadata"]["name"] for p in new)
                if row is not None and row.state == "Pending":
                    tainted.add(pending_of(store.get(NODES, "", b)) == name)
                    landed.update(p["metadata"]["name"] for p in new
                                  if p["spec"].get("nodeName") == b)
                return nm_status(lab, name).get("phase") in ("Succeeded", "Failed")

            await eventually(f"{name} finished", waited)
    finally:
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            for obj in fillers:
                await client.request("DELETE", api_path(
                    "apps/v1", "deployments", namespace="default",
                    name=obj["metadata"]["name"]))
        await eventually("fillers gone", lambda: not any(
            p["metadata"]["name"].startswith("filler-")
            for p in store.items(PODS, "default")))
    status = nm_status(lab, name)
    assert status["phase"] == "Succeeded", status
    assert [(n["name"], n["state"], n["wave"]) for n in status["nodes"]] == [
        (a, "Uncordoned", 1), (b, "Uncordoned", 2)], status
    # B waited for room, said so, and was never cordoned before A was done
    assert any(r == "WaitingForRoom" and "no room for Deployment default/" in m
               for r, m in reasons), reasons
    assert seen.most_in_progress == 1 and seen.lowest_ready >= REPLICAS, seen
    assert all(n == 1 for n in seen.cordons.values()), seen.cordons
    assert all(n == 1 for n in evictions(lab, seen).values())
    # B carried the pending taint while it waited, so A's stand-ins went elsewhere (the
    # room outside A and B was enough for them) though B had a free GPU; what landed on B
    # before its wave (B the only feasible node) is the ReplicaSet's replacement, which
    # the scale-down took, not B's drain
    assert True in tainted and stand_ins, (tainted, stand_ins)
    assert all(where.get(p) not in (None, a, b) for p in stand_ins), (stand_ins, where)
    assert not landed & stand_ins, (landed, stand_ins)
    assert lab.control_plane is not None
    evicted = {path.split("/")[-2] for method, path in lab.control_plane.api.request_log or []
               if method == "POST" and path.endswith("/eviction")}
    assert not landed & evicted, (landed, evicted)
    assert not landed & {p["metadata"]["name"] for p in store.items(PODS, "default")}
    left_as_before(lab, [a, b])
    await audit_clean(lab)


BUSY_TAINT = {"key": "example.com/busy", "value": "true", "effect": "NoSchedule"}


def _cannot_surge_roles(used: collections.Counter[str], names: list[str]
                        ) -> tuple[str, str, str, str]:
    """(a, c, b, d): c, the pinned workload's other home, is tainted (it offers no room to
    anything); b's GPU pods fit on a and d meanwhile. The most loaded node is c."""
    for c, a, b, d in itertools.permutations(sorted(names, key=lambda n: (-used[n], n))):
        if used[b] <= (2 - used[a]) + (2 - used[d]):
            return a, c, b, d
    raise AssertionError(f"no roles for the GPU pods as placed: {dict(used)}")


async def test_a_node_that_cannot_surge_joins_an_ordinary_wave_once_room_comes_back(
        lab: Lab) -> None:
    """Nodes [a, b, d], maxParallelNodes 1, uncordon WhenMaintained. A workload pinned to a
    or c (required node affinity) runs on a, and c carries a NoSchedule taint (out of
    service for another reason): a cannot surge, said CannotSurge, and b starts. While b
    awaits its maintenance the taint goes (c back, as a spare node joining): room is back.
    Once b is maintained, a is judged again on the new snapshot and starts in wave 2, in
    its given order; before, the status row's CannotSurge kept it last (d in wave 2, a
    alone in 3)."""
    name = "cannot-surge"
    store = lab_store(lab)
    a, c, b, d = _cannot_surge_roles(_gpu_pods(lab), sorted(
        n["metadata"]["name"] for n in store.items(NODES, "")))
    taints = list(store.get(NODES, "", c)["spec"].get("taints") or [])
    pinned = virtual_deployment("pinned", replicas=1, startup_seconds=0.5,
                                exit_after_sigterm_seconds=0.2)
    pinned["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                   "values": [a, c]}]}]}}}
    nodes = [a, b, d]
    said: list[tuple[str, str, str]] = []  # (state, reason, message) of a, each change

    def row_of_a() -> NodeProgress | None:
        row = read_nodes(nm_status(lab, name)).get(a)
        if row is not None and (not said or said[-1] != (row.state, row.reason,
                                                         row.message)):
            said.append((row.state, row.reason, row.message))
        return row

    marker: asyncio.Task[None] | None = None
    try:
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            await client.patch(api_path("v1", "nodes", name=c),
                               {"spec": {"taints": [*taints, BUSY_TAINT]}})
        await lab.apply(pinned)  # c is tainted: on a
        await lab.wait_available("default", "pinned", timeout=60)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client, \
                sampling(lab, name, nodes, "WhenMaintained") as seen, leader(lab, name):
            await _create(client, name, _spec(nodes, "WhenMaintained"), held=False)
            await eventually("a CannotSurge, b AwaitingMaintenance", lambda: (
                (row := row_of_a()) is not None and row.reason == "CannotSurge"
                and nm_states(lab, name).get(b) == "AwaitingMaintenance"))
            # room comes back while b is in progress
            await client.patch(api_path("v1", "nodes", name=c), {"spec": {"taints": taints}})
            await eventually("c untainted", lambda: BUSY_TAINT not in (
                store.get(NODES, "", c)["spec"].get("taints") or []))
            marker = asyncio.create_task(mark_awaiting(lab, name))
            await eventually(f"{name} finished", lambda: (
                row_of_a() is not None
                and nm_status(lab, name).get("phase") in ("Succeeded", "Failed")))
    finally:
        if marker is not None:
            marker.cancel()
            await asyncio.gather(marker, return_exceptions=True)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            await client.patch(api_path("v1", "nodes", name=c), {"spec": {"taints": taints}})
            await client.request("DELETE", api_path("apps/v1", "deployments",
                                                    namespace="default", name="pinned"))
            for n in nodes:
                await client.patch(api_path("v1", "nodes", name=n),
                                   {"metadata": {"annotations": {MAINTAINED: None}}})
        await eventually("pinned gone", lambda: not any(
            p["metadata"]["name"].startswith("pinned") for p in store.items(PODS, "default")))
    status = nm_status(lab, name)
    assert status["phase"] == "Succeeded", status
    # a started in wave 2, in its given order, not last and alone after d
    assert [(n["name"], n["wave"]) for n in status["nodes"]] == [(a, 2), (b, 1), (d, 3)], (
        status, said)
    assert any(r == "CannotSurge" and m.startswith("cannot surge: no room for Deployment "
                                                   "default/pinned") for _, r, m in said), said
    assert seen.most_in_progress == 1 and seen.lowest_ready >= REPLICAS, seen
    assert all(n == 1 for n in seen.cordons.values()), seen.cordons
    assert all(n == 1 for n in evictions(lab, seen).values())
    left_as_before(lab, nodes)
    await audit_clean(lab)
