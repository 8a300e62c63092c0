"""Controllers and the pure placement decision.

Controller tests run the real control plane with the test-only node agent playing the
kubelets (tests/lab/cp_node_agent.py) and observe the store through its change feed.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from cp_node_agent import NodeAgent

from conftest import wait_until
from drainsafe import placement
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event
from drainsafe.lab.controlplane import ControlPlane

PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
DEPLOYMENTS = BY_KEY["apps/deployments"]
DAEMONSETS = BY_KEY["apps/daemonsets"]
PDBS = BY_KEY["policy/poddisruptionbudgets"]
SLICES = BY_KEY["discovery.k8s.io/endpointslices"]
SERVICES = BY_KEY["services"]
EVENTS = BY_KEY["events"]

# ---- placement (pure) ------------------------------------------------------------------


def node(name: str = "n1", *, gpus: int = 2, unschedulable: bool = False,
         taints: list | None = None, labels: dict | None = None) -> dict[str, Any]:
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"unschedulable": unschedulable, "taints": taints or []},
            "status": {"allocatable": alloc}}


def gpu_pod(gpus: int = 1, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {
        "limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "500m"}}}], **spec}}


def test_gpu_requests_fit_against_allocatable_minus_bound() -> None:
    bound = [gpu_pod(1)]
    assert placement.check(node(gpus=2), gpu_pod(1), bound).fits
    fit = placement.check(node(gpus=2), gpu_pod(2), bound)
    assert not fit.fits and fit.reasons == ("Insufficient nvidia.com/gpu",)
    finished = [dict(gpu_pod(2), status={"phase": "Succeeded"})]
    assert placement.check(node(gpus=2), gpu_pod(2), finished).fits
    assert placement.pod_requests(gpu_pod(2)["spec"])["cpu"] == placement.Decimal("0.5")


def test_unschedulable_taints_and_selectors() -> None:
    cordoned = node(unschedulable=True)
    assert placement.check(cordoned, gpu_pod(), []).reasons == ("node(s) were unschedulable",)
    tolerant = gpu_pod(tolerations=[{"key": "node.kubernetes.io/unschedulable",
                                     "operator": "Exists", "effect": "NoSchedule"}])
    assert placement.check(cordoned, tolerant, []).fits
    tainted = node(taints=[{"key": "gpu", "value": "h100", "effect": "NoSchedule"},
                           {"key": "soft", "effect": "PreferNoSchedule"}])
    assert placement.check(tainted, gpu_pod(), []).reasons == (
        "node(s) had untolerated taint {gpu: h100}",)
    assert placement.check(tainted, gpu_pod(tolerations=[
        {"key": "gpu", "operator": "Equal", "value": "h100"}]), []).fits
    labelled = node(labels={"pool": "a"})
    assert not placement.check(labelled, gpu_pod(nodeSelector={"pool": "b"}), []).fits
    pinned = gpu_pod(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In",
                              "values": ["n2"]}]}]}}})
    assert placement.check(node("n1"), pinned, []).reasons == (
        "node(s) didn't match Pod's node affinity/selector",)
    assert placement.check(node("n2"), pinned, []).fits


def test_failure_message_and_choice() -> None:
    nodes = [node("a", unschedulable=True), node("b", gpus=1), node("c", gpus=1)]
    best, verdicts = placement.choose(nodes, gpu_pod(2), {})
    assert best is None
    assert placement.failure_message(3, verdicts.values()) == (
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient "
        "nvidia.com/gpu. preemption: 0/3 nodes are available: 3 Preemption is not "
        "helpful for scheduling.")
    owned = {"metadata": {"name": "x", "ownerReferences": [{"uid": "rs1", "controller": True}]},
             "spec": gpu_pod(1)["spec"]}
    best, _ = placement.choose([node("a", gpus=4), node("b", gpus=4)], owned,
                               {"a": [owned]})
    assert best == "b"  # spread the ReplicaSet's pods


# ---- controllers -------------------------------------------------------------------------


def deployment(name: str = "web", replicas: int = 3, *, strategy: dict | None = None,
               gpus: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "strategy": strategy or {"type": "RollingUpdate", "rollingUpdate": {
                         "maxSurge": 1, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "containers": [{"name": "c", "image": "x:1",
                                         "ports": [{"name": "http", "containerPort": 8000}],
                                         "resources": {"limits": {
                                             "nvidia.com/gpu": str(gpus)}}}]}}}}


def is_ready(p: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in p.get("status", {}).get("conditions") or [])


def app_pods(cp: ControlPlane, app: str = "web") -> list[dict]:
    return [p for p in cp.store.items(PODS, "default")
            if (p["metadata"].get("labels") or {}).get("app") == app]


def rolled_out(cp: ControlPlane, replicas: int, revision: str) -> bool:
    d = cp.store.peek(DEPLOYMENTS, "default", "web")
    if d is None:
        return False
    s = d.get("status") or {}
    live = [p for p in app_pods(cp) if not p["metadata"].get("deletionTimestamp")]
    return ((d["metadata"].get("annotations") or {}).get(
        "deployment.kubernetes.io/revision") == revision
        and s.get("updatedReplicas") == replicas and s.get("availableReplicas") == replicas
        and s.get("replicas") == replicas and len(live) == replicas
        and all(is_ready(p) for p in live)
        and all((p["metadata"].get("annotations") or {}).get("restart", "1") == revision
                for p in live))


def restart(cp: ControlPlane, revision: str) -> None:
    def change(d: dict) -> None:
        d["spec"]["template"]["metadata"].setdefault("annotations", {})["restart"] = revision

    cp.store.mutate(DEPLOYMENTS, "default", "web", change)


class Recorder:
    """Tracks the most pods alive and the fewest Ready ones while a rollout runs."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.max_active = 0
        self.min_ready = 10**6
        self.overlap = False
        self.unlisten = cp.store.listen(self.observe)

    def observe(self, ev: Event) -> None:
        if ev.resource != "pods":
            return
        pods = [p for p in app_pods(self.cp) if not p["metadata"].get("deletionTimestamp")
                and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        self.max_active = max(self.max_active, len(pods))
        self.min_ready = min(self.min_ready, sum(1 for p in pods if is_ready(p)))
        running = [p for p in app_pods(self.cp) if is_ready(p)
                   or p.get("spec", {}).get("nodeName")]
        hashes = {p["metadata"]["labels"].get("pod-template-hash") for p in running}
        self.overlap = self.overlap or len(hashes) > 1


@pytest.mark.parametrize(("surge", "unavailable", "most", "fewest"),
                         [(1, 0, 5, 4), (0, 1, 4, 3), ("25%", "25%", 5, 3)])
async def test_rolling_update_honours_surge_and_unavailable(
        control_plane: ControlPlane, cp_nodes: list[str], surge: Any, unavailable: Any,
        most: int, fewest: int) -> None:
    cp = control_plane
    cp.store.create(DEPLOYMENTS, deployment(replicas=4, strategy={
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge,
                                                   "maxUnavailable": unavailable}}))
    await wait_until(cp, lambda: rolled_out(cp, 4, "1"), what="first rollout")
    rec = Recorder(cp)
    try:
        restart(cp, "2")
        await wait_until(cp, lambda: rolled_out(cp, 4, "2"), what="second rollout")
    finally:
        rec.unlisten()
    assert rec.max_active == most
    assert rec.min_ready == fewest


async def test_recreate_never_overlaps_old_and_new(control_plane: ControlPlane,
                                                   cp_nodes: list[str]) -> None:
    cp = control_plane
    cp.store.create(DEPLOYMENTS, deployment(replicas=3, strategy={"type": "Recreate"}))
    await wait_until(cp, lambda: rolled_out(cp, 3, "1"), what="first rollout")
    rec = Recorder(cp)
    try:
        restart(cp, "2")
        await wait_until(cp, lambda: rolled_out(cp, 3, "2"), what="recreate")
    finally:
        rec.unlisten()
    assert not rec.overlap and rec.min_ready == 0


async def test_scheduler_reports_failed_scheduling_then_places_when_room_appears(
        control_plane: ControlPlane, cp_kubeconfig: pathlib.Path) -> None:
    cp = control_plane
    async with NodeAgent(cp_kubeconfig, ["small-1", "small-2"], gpus=2) as agent:
        cp.store.create(DEPLOYMENTS, deployment("big", replicas=1, gpus=4))

        def unschedulable() -> bool:
            pods = app_pods(cp, "big")
            return bool(pods) and any(
                c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in pods[0].get("status", {}).get("conditions") or [])

        await wait_until(cp, unschedulable, what="Unschedulable condition")
        events = [e for e in cp.store.items(EVENTS, "default")
                  if e["reason"] == "FailedScheduling"]
        assert len(events) == 1 and events[0]["type"] == "Warning"
        assert events[0]["message"].startswith(
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
        agent.gpus = 4
        agent.nodes.append("big-1")
        await agent.register("big-1")
        await wait_until(cp, lambda: all(p["spec"].get("nodeName") == "big-1" and is_ready(p)
                                         for p in app_pods(cp, "big")), what="placement")


async def test_daemonset_runs_on_every_node_including_cordoned(
        control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    cp = control_plane
    cp.store.mutate(NODES, "", "node-a", lambda n: n["spec"].update(unschedulable=True))
    cp.store.create(DAEMONSETS, {"metadata": {"name": "plugin", "namespace": "default"},
                                 "spec": {"selector": {"matchLabels": {"app": "plugin"}},
                                          "template": {"metadata": {"labels": {
                                              "app": "plugin"}}, "spec": {"containers": [
                                                  {"name": "c", "image": "p:1"}]}}}})

    def placed() -> bool:
        pods = app_pods(cp, "plugin")
        ds = cp.store.peek(DAEMONSETS, "default", "plugin")
        return (sorted(p["spec"].get("nodeName") or "" for p in pods) == sorted(cp_nodes)
                and ds is not None and ds.get("status", {}).get("numberReady") == 4)

    await wait_until(cp, placed, what="a daemon pod per node")
    ds = cp.store.peek(DAEMONSETS, "default", "plugin")
    assert ds["status"]["desiredNumberScheduled"] == 4
    node_a = cp.store.peek(NODES, "", "node-a")
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}.items() <= \
        node_a["spec"]["taints"][0].items()


async def test_endpoint_slices_follow_pod_readiness_and_termination(
        control_plane: ControlPlane, cp_kubeconfig: pathlib.Path) -> None:
    cp = control_plane
    async with NodeAgent(cp_kubeconfig, ["n1", "n2"], gpus=4, stop_seconds=30):
        cp.store.create(DEPLOYMENTS, deployment(replicas=2))
        cp.store.create(SERVICES, {"metadata": {"name": "web", "namespace": "default"},
                                   "spec": {"selector": {"app": "web"}, "ports": [
                                       {"name": "http", "port": 80, "targetPort": "http"}]}})

        def slice_of() -> dict | None:
            return next(iter(cp.store.items(SLICES, "default")), None)

        def ready_endpoints() -> int:
            s = slice_of()
            return sum(1 for e in (s or {}).get("endpoints") or []
                       if e["conditions"]["ready"])

        await wait_until(cp, lambda: ready_endpoints() == 2, what="2 ready endpoints")
        s = slice_of()
        assert s["ports"] == [{"name": "http", "protocol": "TCP", "port": 8000}]
        assert s["metadata"]["labels"]["kubernetes.io/service-name"] == "web"
        victim = app_pods(cp)[0]
        cp.store.delete(PODS, "default", victim["metadata"]["name"])

        def terminating_endpoint() -> dict | None:
            for e in (slice_of() or {}).get("endpoints") or []:
                if e["targetRef"]["name"] == victim["metadata"]["name"] and \
                        e["conditions"]["terminating"]:
                    return e  # type: ignore[no-any-return]
            return None

        await wait_until(cp, lambda: terminating_endpoint() is not None, what="terminating")
        assert terminating_endpoint()["conditions"] == {
            "ready": False, "serving": True, "terminating": True}
        assert terminating_endpoint()["addresses"] == [victim["status"]["podIP"]]


@pytest.mark.parametrize(("budget", "expected", "desired", "allowed"), [
    ({"maxUnavailable": 1}, 3, 2, 1),
    ({"minAvailable": "50%"}, 3, 2, 1),
    ({"minAvailable": 3}, 3, 3, 0),
    ({"maxUnavailable": "10%"}, 3, 2, 1),
])
async def test_disruption_controller_status(control_plane: ControlPlane, cp_nodes: list[str],
                                            budget: dict, expected: int, desired: int,
                                            allowed: int) -> None:
    cp = control_plane
    cp.store.create(DEPLOYMENTS, deployment(replicas=3))
    cp.store.create(PDBS, {"metadata": {"name": "web", "namespace": "default"},
                           "spec": {**budget, "selector": {"matchLabels": {"app": "web"}}}})

    def settled() -> bool:
        s = (cp.store.peek(PDBS, "default", "web") or {}).get("status") or {}
        return s.get("currentHealthy") == 3 and s.get("observedGeneration") == 1

    await wait_until(cp, settled, what="PDB status")
    s = cp.store.peek(PDBS, "default", "web")["status"]
    assert (s["expectedPods"], s["desiredHealthy"], s["disruptionsAllowed"]) == (
        expected, desired, allowed)


# ---- time-based controller work, with a controlled clock ---------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def ready_pod(store: Any, name: str, *, since: float, owner: dict | None = None) -> None:
    from drainsafe.kube.objects import rfc3339

    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": {"app": "web"}}
    if owner:
        meta["ownerReferences"] = [owner]
    store.create(PODS, {"metadata": meta, "spec": {"nodeName": "n1", "containers": [
        {"name": "c", "image": "x:1"}]}})
    pod = store.get(PODS, "default", name)
    pod["status"] = {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(since)}]}
    store.update(PODS, pod, subresource="status")


def test_disrupted_pods_count_as_unhealthy_until_they_expire() -> None:
    from drainsafe.kube.objects import rfc3339
    from drainsafe.lab.apiserver import admission
    from drainsafe.lab.apiserver.store import Store
    from drainsafe.lab.controllers.disruption import DisruptionController

    clock = Clock()
    store = Store(clock=clock)
    admission.install(store)
    store.create(BY_KEY["namespaces"], {"metadata": {"name": "default"}})
    for i in range(3):
        ready_pod(store, f"p{i}", since=clock.now)
    store.create(PDBS, {"metadata": {"name": "web", "namespace": "default"},
                        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}})
    pdb = store.get(PDBS, "default", "web")
    pdb["status"] = {"disruptedPods": {"p0": rfc3339(clock.now)}}
    store.update(PDBS, pdb, subresource="status")
    controller = DisruptionController(store)
    wake = controller.reconcile()
    status = store.get(PDBS, "default", "web")["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (2, 0)
    assert status["disruptedPods"] == {"p0": rfc3339(clock.now)}
    assert wake is not None and 119 <= wake <= 120
    clock.now += 121
    controller.reconcile()
    status = store.get(PDBS, "default", "web")["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (3, 1)
    assert "disruptedPods" not in status


def test_replicaset_counts_available_only_after_min_ready_seconds() -> None:
    from drainsafe.lab.apiserver import admission
    from drainsafe.lab.apiserver.store import Store
    from drainsafe.lab.controllers.podstate import owner_reference
    from drainsafe.lab.controllers.replicaset import ReplicaSetController

    clock = Clock()
    store = Store(clock=clock)
    admission.install(store)
    store.create(BY_KEY["namespaces"], {"metadata": {"name": "default"}})
    rs = store.create(BY_KEY["apps/replicasets"], {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 2, "minReadySeconds": 30,
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}})
    ready_pod(store, "old", since=clock.now - 60, owner=owner_reference(rs))
    ready_pod(store, "new", since=clock.now - 10, owner=owner_reference(rs))
    wake = ReplicaSetController(store).reconcile()
    status = store.get(BY_KEY["apps/replicasets"], "default", "web")["status"]
    assert (status["readyReplicas"], status["availableReplicas"]) == (2, 1)
    assert wake is not None and 19 <= wake <= 20
    clock.now += 21
    ReplicaSetController(store).reconcile()
    status = store.get(BY_KEY["apps/replicasets"], "default", "web")["status"]
    assert status["availableReplicas"] == 2
