"""StatefulSets in the lab, as kube-controller-manager runs them
(drainsafe.lab.controllers.statefulset): stable names, OrderedReady and Parallel, scale
down from the highest ordinal, an evicted pod recreated under its name, rolling update
with a partition and (behind its feature gate) maxUnavailable, the status fields, the
scale subresource, PDB counting, and what the real kubectl (1.27, 1.33) and the official
Python client see.

Real parts: the lab's kubelets run a real HTTP server (`python -m http.server`) per pod,
Ready through an httpGet readiness probe on /ready, a file the test creates in the
directory the server serves, one per pod name (the pod's readiness gate). Waits are on
store events; the "nothing more happens" checks wait for controller passes, not for time.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import KUBECTL_DIR, Kubectl, wait_until
from drainsafe.kube import objects
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event
from drainsafe.lab.cluster import Lab
from drainsafe.lab.controllers.statefulset import (
    POD_INDEX_LABEL,
    POD_NAME_LABEL,
    REVISION_LABEL,
    Create,
    Delete,
    Member,
    SetShape,
    StatefulSetController,
    plan,
)
from drainsafe.lab.controlplane import ControlPlane
from drainsafe.lab.features import FeatureGates

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402

PODS = BY_KEY["pods"]
STS = BY_KEY["apps/statefulsets"]
PDBS = BY_KEY["policy/poddisruptionbudgets"]
REVISIONS = BY_KEY["apps/controllerrevisions"]
# Serves <state>/gates/<pod name> (the working directory is <state>/pods/<pod>/server): the
# gate of a pod name holds for every pod of that name, a recreated one too.
SERVER = [sys.executable, "-m", "http.server", "8000", "--bind", "$(POD_IP)",
          "--directory", "../../../gates/$(POD_NAME)"]


def web(replicas: int, *, policy: str = "OrderedReady", version: str = "1",
        strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    """A StatefulSet of real HTTP servers, each Ready once its pod's `ready` file exists."""
    spec: dict[str, Any] = {
        "replicas": replicas, "serviceName": "web", "podManagementPolicy": policy,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "server", "image": "python:3", "command": SERVER,
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {
                    "fieldPath": "status.podIP"}}}, {"name": "VERSION", "value": version},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {
                            "fieldPath": "metadata.name"}}}],
                "ports": [{"name": "http", "containerPort": 8000}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8000},
                                   "periodSeconds": 1}}]}}}
    if strategy is not None:
        spec["updateStrategy"] = strategy
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "default"}, "spec": spec}


def gate(lab: Lab, *names: str) -> None:
    """Let these pods (present or future, under these names) turn Ready."""
    for name in names:
        path = lab.state_dir / "gates" / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "ready").touch()


def pods(cp: ControlPlane) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in cp.store.items(PODS, "default")
            if (p["metadata"].get("labels") or {}).get("app") == "web"}


def running_ready(pod: dict[str, Any] | None) -> bool:
    return pod is not None and (pod.get("status") or {}).get("phase") == "Running" \
        and objects.is_ready(pod) and not objects.is_terminating(pod)


def sts_status(cp: ControlPlane) -> dict[str, Any]:
    return dict((cp.store.peek(STS, "default", "web") or {}).get("status") or {})


def settled(cp: ControlPlane, replicas: int) -> bool:
    """Every replica Ready at the update revision, the rollout complete."""
    s = sts_status(cp)
    sts = cp.store.peek(STS, "default", "web")
    return sts is not None and s.get("observedGeneration") == sts["metadata"]["generation"] \
        and s.get("readyReplicas", 0) == replicas and s.get("replicas") == replicas \
        and s.get("updatedReplicas", 0) == replicas \
        and s.get("currentRevision") == s.get("updateRevision") \
        and len(pods(cp)) == replicas


class History:
    """Every pod event of the set: creations (with whether each lower ordinal was then
    Running and Ready), deletion starts and removals, in order."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.log: list[tuple[str, str]] = []  # (what, pod name)
        self.lower_ready_at_creation: dict[str, bool] = {}
        self.others_ready_at_deletion: dict[str, bool] = {}
        self.unlisten = cp.store.listen(self.observe)

    def observe(self, ev: Event) -> None:
        if ev.resource != "pods" or (ev.obj["metadata"].get("labels") or {}).get("app") != "web":
            return
        name = ev.obj["metadata"]["name"]
        ordinal = int(name.rsplit("-", 1)[1])
        now = pods(self.cp)
        if ev.type == "ADDED":
            self.log.append(("created", name))
            self.lower_ready_at_creation[f"{name}#{len(self.log)}"] = all(
                running_ready(now.get(f"web-{i}")) for i in range(ordinal))
        elif ev.type == "DELETED":
            self.log.append(("deleted", name))
        elif ev.obj["metadata"].get("deletionTimestamp") and ev.old is not None \
                and not ev.old["metadata"].get("deletionTimestamp"):
            self.log.append(("terminating", name))
            self.others_ready_at_deletion[f"{name}#{len(self.log)}"] = all(
                running_ready(p) for n, p in now.items() if n != name)

    def names(self, what: str) -> list[str]:
        return [n for w, n in self.log if w == what]


def controller(cp: ControlPlane) -> StatefulSetController:
    return next(c for c in cp.controllers if isinstance(c, StatefulSetController))


async def passes_go_by(cp: ControlPlane, count: int = 2) -> None:
    """Let the StatefulSet controller run `count` more passes over an unchanged set (a
    metadata-only annotation wakes it), so a test can assert what it did *not* do."""
    ctl = controller(cp)
    for i in range(count):
        before = ctl.passes
        cp.store.mutate(STS, "default", "web", lambda o, i=i: o["metadata"].setdefault(
            "annotations", {}).update({"test/nudge": str(i)}))
        await wait_until(cp, lambda before=before: ctl.passes > before, what="a pass")


def lab_kubectl(lab: Lab, tmp_path: Path, version: str = "1.33") -> Kubectl:
    binary = KUBECTL_DIR / f"kubectl.{version}"
    if not binary.exists():
        pytest.skip(f"{binary} is not installed")
    return Kubectl(binary, lab.kubeconfig, tmp_path / f"kubectl-cache-{version}")


def official(cp: ControlPlane) -> client.ApiClient:
    cfg = client.Configuration(host=cp.url)
    cfg.ssl_ca_cert = str(cp.ca_path)
    cfg.api_key = {"BearerToken": f"Bearer {cp.token}"}
    return client.ApiClient(cfg)


# ---- OrderedReady and Parallel, with real servers ---------------------------------------

async def test_ordered_ready_creates_each_ordinal_once_the_lower_ones_are_running_and_ready(
        lab: Lab) -> None:
    cp = lab.control_plane
    history = History(cp)
    await lab.apply(web(3))
    await wait_until(cp, lambda: (pods(cp).get("web-0") or {}).get("status", {}).get(
        "phase") == "Running", what="web-0 running")
    # web-0 runs but is not Ready: however often the controller looks, no web-1.
    await passes_go_by(cp)
    assert set(pods(cp)) == {"web-0"}
    gate(lab, "web-0")
    await wait_until(cp, lambda: "web-1" in pods(cp), what="web-1 created")
    await passes_go_by(cp)
    assert set(pods(cp)) == {"web-0", "web-1"}
    gate(lab, "web-1", "web-2")
    await wait_until(cp, lambda: settled(cp, 3), what="3 Ready")
    history.unlisten()
    assert history.names("created") == ["web-0", "web-1", "web-2"]
    assert all(history.lower_ready_at_creation.values()), history.lower_ready_at_creation

    sts = cp.store.peek(STS, "default", "web")
    assert sts is not None
    status = sts["status"]
    revision = status["updateRevision"]
    assert re.fullmatch(r"web-[a-z0-9]+", revision)
    assert status == {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
                      "currentReplicas": 3, "updatedReplicas": 3,
                      "currentRevision": revision, "updateRevision": revision,
                      "observedGeneration": sts["metadata"]["generation"],
                      "collisionCount": 0}
    for ordinal in range(3):
        pod = pods(cp)[f"web-{ordinal}"]
        assert pod["metadata"]["labels"] == {
            "app": "web", POD_NAME_LABEL: f"web-{ordinal}", POD_INDEX_LABEL: str(ordinal),
            REVISION_LABEL: revision}
        assert pod["spec"]["hostname"] == f"web-{ordinal}"
        assert pod["spec"]["subdomain"] == "web"
        assert objects.controller_ref(pod)["kind"] == "StatefulSet"  # type: ignore[index]
    revisions = [r for r in cp.store.items(REVISIONS, "default")
                 if r["metadata"]["name"] == revision]
    assert len(revisions) == 1 and revisions[0]["revision"] == 1


async def test_parallel_creates_every_ordinal_at_once_and_scales_down_at_once(
        lab: Lab) -> None:
    cp = lab.control_plane
    history = History(cp)
    await lab.apply(web(3, policy="Parallel"))
    await wait_until(cp, lambda: len(pods(cp)) == 3, what="3 pods")
    # All three exist although none is Ready (the OrderedReady test's harness would fail).
    assert not any(running_ready(p) for p in pods(cp).values())
    assert history.lower_ready_at_creation["web-2#3"] is False
    gate(lab, "web-0", "web-1", "web-2")
    await wait_until(cp, lambda: settled(cp, 3), what="3 Ready")
    cp.store.mutate(STS, "default", "web", lambda o: o["spec"].update(replicas=1))
    await wait_until(cp, lambda: settled(cp, 1), what="1 left")
    history.unlisten()
    # Both went before either was gone.
    assert sorted(history.names("terminating")) == ["web-1", "web-2"]
    first_gone = history.log.index(next(e for e in history.log if e[0] == "deleted"))
    assert all(history.log.index(("terminating", n)) < first_gone for n in ("web-1", "web-2"))


async def test_scale_down_from_the_highest_one_at_a_time_and_an_evicted_pod_comes_back(
        lab: Lab, tmp_path: Path) -> None:
    cp = lab.control_plane
    kubectl = lab_kubectl(lab, tmp_path)
    gate(lab, "web-0", "web-1", "web-2", "web-3")
    await lab.apply(web(4))
    await wait_until(cp, lambda: settled(cp, 4), what="4 Ready")

    history = History(cp)
    out = await kubectl.ok("scale", "statefulset", "web", "--replicas=2")
    assert "statefulset.apps/web scaled" in out
    await wait_until(cp, lambda: settled(cp, 2), what="scaled to 2")
    assert history.names("terminating") == ["web-3", "web-2"]
    # web-2 started terminating only after web-3 was gone, and only while the others
    # were all healthy.
    assert history.log.index(("deleted", "web-3")) < history.log.index(("terminating", "web-2"))
    assert all(history.others_ready_at_deletion.values()), history.others_ready_at_deletion
    history.unlisten()

    # Evicted through the Eviction API: recreated under the same name, Ready again.
    old_uid = pods(cp)["web-1"]["metadata"]["uid"]
    api = official(cp)
    try:
        await asyncio.to_thread(
            client.CoreV1Api(api).create_namespaced_pod_eviction, "web-1", "default",
            client.V1Eviction(metadata=client.V1ObjectMeta(name="web-1",
                                                           namespace="default")))
    finally:
        api.close()
    await wait_until(cp, lambda: running_ready(pods(cp).get("web-1"))
                     and pods(cp)["web-1"]["metadata"]["uid"] != old_uid and settled(cp, 2),
                     what="web-1 recreated and Ready")
    assert set(pods(cp)) == {"web-0", "web-1"}


async def test_rolling_update_with_a_partition_goes_from_the_highest_ordinal_down(
        lab: Lab, tmp_path: Path) -> None:
    cp = lab.control_plane
    kubectl = lab_kubectl(lab, tmp_path)
    gate(lab, "web-0", "web-1", "web-2")
    await lab.apply(web(3))
    await wait_until(cp, lambda: settled(cp, 3), what="3 Ready")
    before = {n: p["metadata"]["uid"] for n, p in pods(cp).items()}
    old_revision = sts_status(cp)["currentRevision"]

    history = History(cp)
    await lab.apply(web(3, version="2", strategy={"type": "RollingUpdate",
                                                  "rollingUpdate": {"partition": 2}}))
    await wait_until(cp, lambda: sts_status(cp).get("updatedReplicas") == 1
                     and running_ready(pods(cp).get("web-2"))
                     and sts_status(cp).get("readyReplicas") == 3, what="web-2 updated")
    status = sts_status(cp)
    assert status["currentRevision"] == old_revision != status["updateRevision"]
    assert status["currentReplicas"] == 2
    now = pods(cp)
    assert now["web-2"]["metadata"]["labels"][REVISION_LABEL] == status["updateRevision"]
    assert {n: now[n]["metadata"]["uid"] for n in ("web-0", "web-1")} == {
        n: before[n] for n in ("web-0", "web-1")}
    out = await kubectl.ok("rollout", "status", "statefulset/web", "--timeout=30s")
    assert "partitioned roll out complete: 1 new pods have been updated..." in out

    # The partition lifted: web-1, then web-0, each only once the one above serves again.
    waiter = asyncio.ensure_future(kubectl("rollout", "status", "statefulset/web",
                                           "--timeout=60s"))
    cp.store.mutate(STS, "default", "web", lambda o: o["spec"]["updateStrategy"][
        "rollingUpdate"].update(partition=0))
    await wait_until(cp, lambda: settled(cp, 3), what="the rollout")
    result = await waiter
    assert result.returncode == 0, result.stderr
    assert "partitioned roll out complete: 3 new pods have been updated..." in result.stdout
    history.unlisten()
    assert history.names("terminating") == ["web-2", "web-1", "web-0"]
    assert all(history.others_ready_at_deletion.values()), history.others_ready_at_deletion
    final = sts_status(cp)
    assert final["currentRevision"] == final["updateRevision"] == status["updateRevision"]
    assert final["currentReplicas"] == final["updatedReplicas"] == 3
    versions = {p["spec"]["containers"][0]["env"][1]["value"] for p in pods(cp).values()}
    assert versions == {"2"}


# ---- control-plane tests (pods played by the node agent) -------------------------------

APP = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  replicas: 3
  serviceName: web
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: server
        image: example/llm:1.0
        volumeMounts: [{name: cache, mountPath: /cache}]
  volumeClaimTemplates:
  - metadata: {name: cache}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 10Gi}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: web}}
"""


async def test_kubectl_get_describe_rollout_status_scale_and_the_pdb(
        kubectl: Kubectl, control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    cp = control_plane
    out = await kubectl.ok("apply", "-f", "-", stdin=APP)
    assert "statefulset.apps/web created" in out
    await wait_until(cp, lambda: settled(cp, 3), what="3 Ready")
    status = await kubectl.ok("rollout", "status", "sts/web", "--timeout=20s")
    assert "partitioned roll out complete: 3 new pods have been updated..." in status

    table = await kubectl.ok("get", "sts")
    lines = table.strip().splitlines()
    assert lines[0].split() == ["NAME", "READY", "AGE"]
    assert lines[1].split()[:2] == ["web", "3/3"]
    wide = await kubectl.ok("get", "statefulsets", "-o", "wide")
    assert wide.splitlines()[0].split() == ["NAME", "READY", "AGE", "CONTAINERS", "IMAGES"]
    assert "server" in wide and "example/llm:1.0" in wide

    described = await kubectl.ok("describe", "sts", "web")
    assert re.search(r"Replicas:\s+3 desired \| 3 total", described), described
    assert re.search(r"Update Strategy:\s+RollingUpdate", described)
    assert re.search(r"Partition:\s+0", described)
    assert re.search(r"Pods Status:\s+3 Running / 0 Waiting / 0 Succeeded / 0 Failed",
                     described)
    assert "SuccessfulCreate" in described and "create Pod web-2 in StatefulSet web successful" \
        in described
    assert re.search(r"Volume Claims:\s+Name:\s+cache", described), described

    # The claim volumes are on the pods (no claim objects: the lab serves no PVCs).
    pod = cp.store.peek(PODS, "default", "web-1")
    assert pod is not None
    assert {"name": "cache", "persistentVolumeClaim": {"claimName": "cache-web-1"}} \
        in pod["spec"]["volumes"]

    def budget() -> dict[str, Any]:
        return dict((cp.store.peek(PDBS, "default", "web") or {}).get("status") or {})

    await wait_until(cp, lambda: budget().get("disruptionsAllowed") == 1, what="PDB status")
    assert budget()["expectedPods"] == 3 and budget()["currentHealthy"] == 3

    out = await kubectl.ok("rollout", "restart", "sts/web")
    assert "statefulset.apps/web restarted" in out
    status = await kubectl.ok("rollout", "status", "sts/web", "--timeout=30s")
    assert "partitioned roll out complete: 3 new pods have been updated..." in status
    assert settled(cp, 3)
    history = await kubectl.ok("rollout", "history", "sts/web")
    assert re.search(r"REVISION\s+CHANGE-CAUSE\n1\s+<none>\n2\s+<none>", history), history
    first = sts_status(cp)["currentRevision"]
    out = await kubectl.ok("rollout", "undo", "sts/web")
    assert "statefulset.apps/web rolled back" in out
    await wait_until(cp, lambda: settled(cp, 3) and sts_status(cp)["currentRevision"] != first,
                     what="the rollback")
    history = await kubectl.ok("rollout", "history", "sts/web")
    # The first template is back, renumbered as the newest revision (a rollback).
    assert re.search(r"REVISION\s+CHANGE-CAUSE\n2\s+<none>\n3\s+<none>", history), history
    back = cp.store.peek(STS, "default", "web")
    assert back is not None and "annotations" not in back["spec"]["template"]["metadata"]

    # A new image through kubectl apply's client-side patch: a rolling update.
    out = await kubectl.ok("apply", "-f", "-",
                           stdin=APP.replace("example/llm:1.0", "example/llm:1.1"))
    assert "statefulset.apps/web configured" in out
    await kubectl.ok("rollout", "status", "sts/web", "--timeout=30s")
    await wait_until(cp, lambda: settled(cp, 3), what="the new image everywhere")
    assert {p["spec"]["containers"][0]["image"] for p in pods(cp).values()} == {
        "example/llm:1.1"}

    out = await kubectl.ok("scale", "sts", "web", "--replicas=2")
    assert "statefulset.apps/web scaled" in out
    await wait_until(cp, lambda: settled(cp, 2) and budget().get("expectedPods") == 2,
                     what="scaled to 2")
    assert sorted(pods(cp)) == ["web-0", "web-1"]


async def test_scale_subresource_and_drainsafes_scale_patch(
        control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    cp = control_plane
    api = official(cp)
    apps = client.AppsV1Api(api)
    try:
        body = web(2)
        del body["metadata"]["namespace"]
        await asyncio.to_thread(apps.create_namespaced_stateful_set, "default", body)
        await wait_until(cp, lambda: settled(cp, 2), what="2 Ready")
        scale = await asyncio.to_thread(apps.read_namespaced_stateful_set_scale, "web",
                                        "default")
        assert (scale.spec.replicas, scale.status.replicas, scale.status.selector) == (
            2, 2, "app=web")
        await asyncio.to_thread(apps.patch_namespaced_stateful_set_scale, "web", "default",
                                {"spec": {"replicas": 3}})
        await wait_until(cp, lambda: settled(cp, 3), what="3 Ready")
        # drainsafe's own scale path: a merge patch of spec.replicas on the object.
        await asyncio.to_thread(apps.patch_namespaced_stateful_set, "web", "default",
                                {"spec": {"replicas": 2}})
        await wait_until(cp, lambda: settled(cp, 2), what="back to 2")
        typed = await asyncio.to_thread(apps.read_namespaced_stateful_set, "web", "default")
        assert typed.spec.pod_management_policy == "OrderedReady"
        assert typed.spec.update_strategy.rolling_update.partition == 0
        assert typed.spec.update_strategy.rolling_update.max_unavailable is None
        assert typed.spec.revision_history_limit == 10
        assert (typed.spec.persistent_volume_claim_retention_policy.when_deleted,
                typed.spec.persistent_volume_claim_retention_policy.when_scaled) == (
            "Retain", "Retain")
        assert typed.status.available_replicas == 2
    finally:
        api.close()


@pytest.fixture
async def gated_plane(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    """A control plane with MaxUnavailableStatefulSet on (as from v1.35), 4 agent nodes."""
    from cp_node_agent import NodeAgent

    cp = ControlPlane(tmp_path / "gated", bookmark_seconds=0.5,
                      feature_gates=FeatureGates(max_unavailable_stateful_set=True))
    await cp.start()
    try:
        cp.write_kubeconfig(tmp_path / "gated-kubeconfig")
        async with NodeAgent(tmp_path / "gated-kubeconfig", ["node-a", "node-b"],
                             stop_seconds=0.3):
            yield cp
    finally:
        await cp.stop()


def _rolling(max_unavailable: int) -> dict[str, Any]:
    return {"type": "RollingUpdate", "rollingUpdate": {"partition": 0,
                                                       "maxUnavailable": max_unavailable}}


async def _replaced_together(cp: ControlPlane) -> list[set[str]]:
    """Apply a template change and return the pods terminating at once, wave by wave."""
    waves: list[set[str]] = []
    terminating: set[str] = set()

    def observe(ev: Event) -> None:
        if ev.resource != "pods":
            return
        name = ev.obj["metadata"]["name"]
        if ev.type == "DELETED":
            terminating.discard(name)
        elif ev.obj["metadata"].get("deletionTimestamp") and name not in terminating:
            if not terminating:
                waves.append(set())
            terminating.add(name)
            waves[-1].add(name)

    unlisten = cp.store.listen(observe)
    try:
        cp.store.mutate(STS, "default", "web", lambda o: o["spec"]["template"]["spec"][
            "containers"][0]["env"][1].update(value="2"))
        await wait_until(cp, lambda: settled(cp, 3), what="the rollout")
    finally:
        unlisten()
    return waves


async def test_max_unavailable_replaces_several_at_once_behind_its_feature_gate(
        gated_plane: ControlPlane, control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    # Gate on (v1.35+): two pods at a time, from the highest ordinal.
    cp = gated_plane
    cp.store.create(STS, web(3, strategy=_rolling(2)))
    await wait_until(cp, lambda: settled(cp, 3), what="3 Ready")
    waves = await _replaced_together(cp)
    assert waves[0] == {"web-2", "web-1"}, waves
    assert set().union(*waves) == {"web-0", "web-1", "web-2"}
    # Defaulted to 1 when not given, with the gate on.
    cp.store.create(STS, {**web(1), "metadata": {"name": "one", "namespace": "default"}})
    one = cp.store.peek(STS, "default", "one")
    assert one is not None
    assert one["spec"]["updateStrategy"]["rollingUpdate"] == {"partition": 0,
                                                             "maxUnavailable": 1}

    # Gate off (the lab's v1.31 default): the field is dropped, one pod at a time.
    cp = control_plane
    cp.store.create(STS, web(3, strategy=_rolling(2)))
    sts = cp.store.peek(STS, "default", "web")
    assert sts is not None
    assert sts["spec"]["updateStrategy"]["rollingUpdate"] == {"partition": 0}
    await wait_until(cp, lambda: settled(cp, 3), what="3 Ready")
    waves = await _replaced_together(cp)
    assert waves == [{"web-2"}, {"web-1"}, {"web-0"}]


async def test_min_ready_seconds_holds_the_next_ordinal_until_the_lower_one_is_available(
        control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    cp = control_plane
    body = web(2)
    body["spec"]["minReadySeconds"] = 2  # > the 1 s rounding of lastTransitionTime
    cp.store.create(STS, body)
    await wait_until(cp, lambda: sts_status(cp).get("readyReplicas") == 1, what="web-0 Ready")
    # Ready but not yet Available: counted as ready, not as available.
    assert sts_status(cp).get("availableReplicas") == 0
    await wait_until(cp, lambda: settled(cp, 2) and sts_status(cp)["availableReplicas"] == 2,
                     what="both available")
    ready = objects.condition(pods(cp)["web-0"], "Ready")
    assert ready is not None
    became_ready = objects.parse_time(ready["lastTransitionTime"])
    created = objects.parse_time(pods(cp)["web-1"]["metadata"]["creationTimestamp"])
    assert became_ready is not None and created is not None
    assert created >= became_ready + 2, (became_ready, created)


async def test_validation_and_immutable_fields(control_plane: ControlPlane) -> None:
    from drainsafe.lab.apiserver import status as st

    cp = control_plane
    bad = web(1, policy="Sometimes")
    with pytest.raises(st.StatusError) as err:
        cp.store.create(STS, bad)
    assert err.value.code == 422
    assert "spec.podManagementPolicy: Invalid value: \"Sometimes\": must be 'OrderedReady' " \
        "or 'Parallel'" in err.value.body()["message"]
    cp.store.create(STS, web(1))
    with pytest.raises(st.StatusError) as err:
        cp.store.mutate(STS, "default", "web", lambda o: o["spec"].update(serviceName="x"))
    assert "spec: Forbidden: updates to statefulset spec for fields other than 'replicas'" \
        in err.value.body()["message"]


# ---- the decisions, pure -----------------------------------------------------------------

def member(ordinal: int, *, revision: str = "new", healthy: bool = True,
           terminating: bool = False, phase: str = "Running") -> Member:
    return Member(name=f"web-{ordinal}", ordinal=ordinal, revision=revision, phase=phase,
                  running_ready=healthy, available=healthy, terminating=terminating)


def test_plan_ordered_ready_waits_for_lower_ordinals_and_scales_down_from_the_top() -> None:
    shape = SetShape(name="web", replicas=2)
    # web-1 missing, web-0 not Ready: nothing happens.
    assert plan(shape, [member(0, healthy=False)], "new", max_unavailable_gate=False) == []
    assert plan(shape, [member(0)], "new", max_unavailable_gate=False) == [Create(1, True)]
    # Scale-down: the highest condemned first, one at a time, only when all are healthy.
    four = [member(i) for i in range(4)]
    assert plan(shape, four, "new", max_unavailable_gate=False) == [Delete("web-3",
                                                                          "condemned")]
    sick = [member(0), member(1, healthy=False), member(2), member(3)]
    assert plan(shape, sick, "new", max_unavailable_gate=False) == []
    # Parallel: everything at once, whatever is unhealthy.
    parallel = SetShape(name="web", replicas=2, parallel=True)
    assert plan(parallel, sick, "new", max_unavailable_gate=False) == [
        Delete("web-3", "condemned"), Delete("web-2", "condemned")]
    # Only the first unhealthy pod may go while others are unhealthy (OrderedReady).
    top_sick = [member(0), member(1), member(2), member(3, healthy=False)]
    assert plan(shape, top_sick, "new", max_unavailable_gate=False) == [
        Delete("web-3", "condemned")]
    # A finished pod is deleted (and recreated later under its name).
    assert plan(shape, [member(0, phase="Failed"), member(1)], "new",
                max_unavailable_gate=False) == [Delete("web-0", "finished")]


def test_plan_rolling_update_partition_and_max_unavailable() -> None:
    old = [member(i, revision="old") for i in range(4)]
    shape = SetShape(name="web", replicas=4, partition=2, max_unavailable="50%")
    assert plan(shape, old, "new", max_unavailable_gate=False) == [Delete("web-3", "update")]
    # Gate on: 50 % of 4 = 2 at once, but never below the partition.
    assert plan(shape, old, "new", max_unavailable_gate=True) == [
        Delete("web-3", "update"), Delete("web-2", "update")]
    full = SetShape(name="web", replicas=4, partition=0, max_unavailable=3)
    assert plan(full, old, "new", max_unavailable_gate=True) == [
        Delete("web-3", "update"), Delete("web-2", "update"), Delete("web-1", "update")]
    # One replica already unavailable counts against the budget.
    one_down = [member(0, revision="old", healthy=False), *old[1:]]
    assert plan(SetShape(name="web", replicas=4, partition=0, max_unavailable=2, parallel=True),
                one_down, "new", max_unavailable_gate=True) == [Delete("web-3", "update")]
    # Without the gate, the replaced pod must serve again before the next one goes.
    waiting = [*old[:3], member(3, healthy=False)]
    assert plan(SetShape(name="web", replicas=4, partition=0, parallel=True), waiting, "new",
                max_unavailable_gate=False) == []
    # New pods below the partition come at the current revision; OnDelete replaces nothing.
    assert plan(shape, [], "new", max_unavailable_gate=False) == [Create(0, False)]
    on_delete = SetShape(name="web", replicas=4, strategy="OnDelete", partition=None)
    assert plan(on_delete, old, "new", max_unavailable_gate=False) == []
    assert plan(on_delete, old[:3], "new", max_unavailable_gate=False) == [Create(3, True)]
