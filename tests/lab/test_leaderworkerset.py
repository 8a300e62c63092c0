"""LeaderWorkerSets in the lab (drainsafe.lab.controllers.leaderworkerset, after lws v0.10.0):
the CRD as lws ships it, groups of a leader and size-1 workers with lws's names, labels and
LWS_* environment, RecreateGroupOnPodRestart (a pod deleted, evicted or restarted takes the
whole group down and back) and None, LeaderReady, scale by whole groups from the highest
index (the scale subresource, `kubectl scale lws`), readyReplicas counting whole groups,
and the real kubectl's `get lws` printer columns.

Real parts: the lab's control plane and API server, the official Python client and kubectl
1.27 / 1.33; the test node agent plays kubelet (pods Running and Ready, terminating pods
finalised). Waits are on store events."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Kubectl, wait_until
from drainsafe.kube import objects
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event
from drainsafe.lab.controllers.leaderworkerset import (
    EXCLUSIVE_ANNOTATION,
    GROUP_INDEX_LABEL,
    GROUP_KEY_LABEL,
    NAME_LABEL,
    REVISION_LABEL,
    SIZE_ANNOTATION,
    WORKER_INDEX_LABEL,
    GroupPod,
    exclusive_terms,
    group_key,
    group_ready,
    hpa_selector,
    leader_address,
    leader_name,
    restart_policy,
    should_recreate,
    worker_name,
)
from drainsafe.lab.controlplane import ControlPlane
from drainsafe.lab.lwscrd import KEY, NAME, leaderworkerset_crd

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402

PODS = BY_KEY["pods"]
STS = BY_KEY["apps/statefulsets"]
NODES = BY_KEY["nodes"]
REPO = Path(__file__).resolve().parents[2]


def lws(name: str = "llm", *, replicas: int = 2, size: int = 3,
        restart: str | None = None, startup: str | None = None) -> dict[str, Any]:
    tmpl = {"spec": {"terminationGracePeriodSeconds": 2, "containers": [
        {"name": "vllm", "image": "example/vllm:1.0"}]}}
    lwt: dict[str, Any] = {"size": size, "workerTemplate": tmpl}
    if restart is not None:
        lwt["restartPolicy"] = restart
    spec: dict[str, Any] = {"replicas": replicas, "leaderWorkerTemplate": lwt}
    if startup is not None:
        spec["startupPolicy"] = startup
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


async def install(cp: ControlPlane, *objs: dict[str, Any]) -> None:
    from drainsafe.lab.apiserver.crd import CRDS, ESTABLISHED, is_true

    cp.store.create(CRDS, leaderworkerset_crd())
    await wait_until(cp, lambda: (c := cp.store.peek(CRDS, "", NAME)) is not None
                     and is_true(c, ESTABLISHED), what="the LWS CRD Established")
    rt = cp.store.catalog.by_key(KEY)
    assert rt is not None
    for obj in objs:
        cp.store.create(rt, obj)


def group_pods(cp: ControlPlane, name: str = "llm") -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in cp.store.items(PODS, "default")
            if (p["metadata"].get("labels") or {}).get(NAME_LABEL) == name}


def live(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and objects.is_ready(pod) \
        and not objects.is_terminating(pod)


def status(cp: ControlPlane, name: str = "llm") -> dict[str, Any]:
    rt = cp.store.catalog.by_key(KEY)
    obj = cp.store.peek(rt, "default", name) if rt is not None else None
    return dict((obj or {}).get("status") or {})


def up(cp: ControlPlane, groups: int, size: int, name: str = "llm") -> bool:
    pods = group_pods(cp, name)
    want = {leader_name(name, g) for g in range(groups)} | {
        worker_name(name, g, w) for g in range(groups) for w in range(1, size)}
    return set(pods) == want and all(live(p) for p in pods.values()) \
        and status(cp, name).get("readyReplicas", 0) == groups


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def set_status(cp: ControlPlane, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Write a pod's status as its kubelet would (through the status subresource)."""
    pod = cp.store.get(PODS, "default", name)
    change(pod)
    cp.store.update(PODS, pod, subresource="status")


class Removals:
    """Pod names that were deleted (the DELETED event), in order."""

    def __init__(self, cp: ControlPlane) -> None:
        self.names: list[str] = []
        self.unlisten = cp.store.listen(self.observe)

    def observe(self, ev: Event) -> None:
        if ev.resource == "pods" and ev.type == "DELETED":
            self.names.append(ev.obj["metadata"]["name"])


# ---- pure ------------------------------------------------------------------------------

def test_names_keys_and_policies() -> None:
    assert leader_name("llm", 1) == "llm-1" and worker_name("llm", 1, 2) == "llm-1-2"
    assert leader_address("llm-1", "llm", "ns") == "llm-1.llm.ns"
    assert group_key("ns", "llm-0") != group_key("ns", "llm-1")
    assert len(group_key("ns", "llm-0")) == 40  # SHA-1 hex
    assert restart_policy(None) == "RecreateGroupOnPodRestart"
    assert restart_policy("Default") == "None" and restart_policy("None") == "None"
    assert hpa_selector("llm") == \
        "leaderworkerset.sigs.k8s.io/name=llm,leaderworkerset.sigs.k8s.io/worker-index=0"


def test_group_readiness_and_recreation() -> None:
    ok = GroupPod(ready=True, deleting=False, restarted=False)
    down = GroupPod(ready=False, deleting=False, restarted=False)
    going = GroupPod(ready=True, deleting=True, restarted=False)
    restarted = GroupPod(ready=True, deleting=False, restarted=True)
    assert group_ready(ok, [ok, ok], 3)
    assert not group_ready(ok, [ok, down], 3)
    assert not group_ready(ok, [ok], 3)  # a worker missing
    assert not group_ready(None, [ok, ok], 3) and not group_ready(down, [ok, ok], 3)
    assert not group_ready(going, [ok, ok], 3)
    assert group_ready(ok, [], 1)
    assert should_recreate("RecreateGroupOnPodRestart", [ok, going])
    assert should_recreate("RecreateGroupOnPodRestart", [restarted, ok])
    assert not should_recreate("RecreateGroupOnPodRestart", [ok, down])
    assert not should_recreate("None", [going, restarted])


def test_shipped_crd_yaml_is_the_labs() -> None:
    shipped = yaml.safe_load((REPO / "deploy" / "lab" / "leaderworkerset-crd.yaml").read_text())
    assert shipped == leaderworkerset_crd()


# ---- the lab ---------------------------------------------------------------------------

async def test_groups_come_up_with_lws_names_labels_and_env(
        control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    cp = control_plane
    await install(cp, lws())
    await wait_until(cp, lambda: up(cp, 2, 3), what="2 groups of 3 Ready")
    leader_sts = cp.store.peek(STS, "default", "llm")
    assert leader_sts is not None and leader_sts["spec"]["replicas"] == 2
    assert leader_sts["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet"
    pods = group_pods(cp)
    for g in range(2):
        workers = cp.store.peek(STS, "default", f"llm-{g}")
        assert workers is not None and workers["spec"]["replicas"] == 2
        assert workers["metadata"]["ownerReferences"][0]["name"] == f"llm-{g}"
        assert workers["metadata"]["ownerReferences"][0]["kind"] == "Pod"
        assert workers["spec"]["selector"]["matchLabels"] == {
            NAME_LABEL: "llm", GROUP_INDEX_LABEL: str(g),
            GROUP_KEY_LABEL: group_key("default", f"llm-{g}")}
        key = group_key("default", f"llm-{g}")
        for w in range(3):
            pod = pods[f"llm-{g}" if w == 0 else f"llm-{g}-{w}"]
            labels = pod["metadata"]["labels"]
            assert labels[GROUP_INDEX_LABEL] == str(g)
            assert labels[WORKER_INDEX_LABEL] == str(w)
            assert labels[GROUP_KEY_LABEL] == key
            assert labels[REVISION_LABEL]
            assert pod["metadata"]["annotations"][SIZE_ANNOTATION] == "3"
            assert env(pod) == {"LWS_LEADER_ADDRESS": f"llm-{g}.llm.default",
                                "LWS_GROUP_SIZE": "3", "LWS_WORKER_INDEX": str(w)}
    s = status(cp)
    assert (s["replicas"], s["readyReplicas"], s["updatedReplicas"]) == (2, 2, 2)
    assert s["hpaPodSelector"] == hpa_selector("llm")
    assert {c["type"]: c["status"] for c in s["conditions"]}["Available"] == "True"


async def test_a_deleted_or_restarted_pod_recreates_its_whole_group(
        control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    cp = control_plane
    await install(cp, lws())
    await wait_until(cp, lambda: up(cp, 2, 3), what="2 groups of 3 Ready")
    before = {n: p["metadata"]["uid"] for n, p in group_pods(cp).items()}
    removals = Removals(cp)
    cp.store.delete(PODS, "default", "llm-1-2")  # one worker of group 1
    await wait_until(cp, lambda: status(cp).get("readyReplicas", 0) == 1,
                     what="group 1 not Ready")
    await wait_until(cp, lambda: up(cp, 2, 3) and all(
        group_pods(cp)[n]["metadata"]["uid"] != before[n] for n in ("llm-1", "llm-1-1")),
        what="group 1 recreated")
    removals.unlisten()
    # The whole group went (leader and both workers), group 0 stayed untouched.
    assert {"llm-1", "llm-1-1", "llm-1-2"} <= set(removals.names)
    assert not {"llm-0", "llm-0-1", "llm-0-2"} & set(removals.names)
    assert all(group_pods(cp)[n]["metadata"]["uid"] == before[n]
               for n in ("llm-0", "llm-0-1", "llm-0-2"))

    # A container restart in a worker does the same.
    uid = group_pods(cp)["llm-0"]["metadata"]["uid"]

    def restart(p: dict[str, Any]) -> None:
        p["status"]["containerStatuses"][0]["restartCount"] = 1
    set_status(cp, "llm-0-1", restart)
    await wait_until(cp, lambda: up(cp, 2, 3)
                     and group_pods(cp)["llm-0"]["metadata"]["uid"] != uid,
                     what="group 0 recreated after a restart")


async def test_an_evicted_worker_takes_its_group_down_and_back(
        control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    cp = control_plane
    await install(cp, lws(size=2))
    await wait_until(cp, lambda: up(cp, 2, 2), what="2 groups of 2 Ready")
    api = _official(cp)
    try:
        leader_uid = group_pods(cp)["llm-0"]["metadata"]["uid"]
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name="llm-0-1",
                                                              namespace="default"))
        await asyncio.to_thread(client.CoreV1Api(api).create_namespaced_pod_eviction,
                                "llm-0-1", "default", body)
        await wait_until(cp, lambda: (p := group_pods(cp).get("llm-0")) is None
                         or objects.is_terminating(p), what="the leader going")
        await wait_until(cp, lambda: up(cp, 2, 2)
                         and group_pods(cp)["llm-0"]["metadata"]["uid"] != leader_uid,
                         what="group 0 back")
    finally:
        api.close()


async def test_restart_policy_none_keeps_the_group(
        control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    cp = control_plane
    await install(cp, lws(restart="None"))
    await wait_until(cp, lambda: up(cp, 2, 3), what="2 groups of 3 Ready")
    before = {n: p["metadata"]["uid"] for n, p in group_pods(cp).items()}
    cp.store.delete(PODS, "default", "llm-1-2")
    await wait_until(cp, lambda: up(cp, 2, 3)
                     and group_pods(cp)["llm-1-2"]["metadata"]["uid"] != before["llm-1-2"],
                     what="the worker back")
    after = {n: p["metadata"]["uid"] for n, p in group_pods(cp).items()}
    assert {n for n in before if after[n] != before[n]} == {"llm-1-2"}


async def test_ready_replicas_count_whole_groups_and_leader_ready_holds_the_workers(
        control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    cp = control_plane
    await install(cp, lws(restart="None"))
    await wait_until(cp, lambda: up(cp, 2, 3), what="2 groups of 3 Ready")

    def unready(p: dict[str, Any]) -> None:
        for c in p["status"]["conditions"]:
            if c["type"] == "Ready":
                c["status"] = "False"
    set_status(cp, "llm-0-2", unready)
    await wait_until(cp, lambda: status(cp).get("readyReplicas") == 1,
                     what="one group not Ready")
    assert status(cp)["replicas"] == 2
    assert {c["type"]: c["status"] for c in status(cp)["conditions"]}["Available"] == "False"

    # LeaderReady: no worker StatefulSet until the leader is Ready.
    rt = cp.store.catalog.by_key(KEY)
    assert rt is not None
    cp.store.create(rt, lws("gated", replicas=1, size=2, startup="LeaderReady"))
    await wait_until(cp, lambda: "gated-0" in group_pods(cp, "gated"), what="the leader")
    await wait_until(cp, lambda: up(cp, 1, 2, "gated"), what="the gated group Ready")
    workers = cp.store.peek(STS, "default", "gated-0")
    leader = group_pods(cp, "gated")["gated-0"]
    assert workers is not None
    ready_at = objects.parse_time(next(c["lastTransitionTime"] for c in
                                       leader["status"]["conditions"] if c["type"] == "Ready"))
    created = objects.parse_time(workers["metadata"]["creationTimestamp"])
    assert ready_at is not None and created is not None and created >= ready_at


async def test_exclusive_topology_puts_one_group_in_each_domain(
        control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    """lws's exclusive placement: the leader gets the webhook's affinity terms, the worker
    StatefulSet waits for the scheduled leader and pins its workers to the leader's rack;
    a third group finds no rack free and stays Pending with the scheduler's message."""
    cp = control_plane
    racks = {"node-a": "r1", "node-b": "r1", "node-c": "r2", "node-d": "r2"}
    for name, rack in racks.items():
        cp.store.mutate(NODES, "", name,
                        lambda n, rack=rack: n["metadata"]["labels"].update(rack=rack))
    obj = lws(size=2)
    obj["metadata"]["annotations"] = {EXCLUSIVE_ANNOTATION: "rack"}
    await install(cp, obj)
    await wait_until(cp, lambda: up(cp, 2, 2), what="2 groups of 2 Ready")
    pods = group_pods(cp)
    rack_of = {n: racks[p["spec"]["nodeName"]] for n, p in pods.items()}
    assert rack_of["llm-0"] == rack_of["llm-0-1"] and rack_of["llm-1"] == rack_of["llm-1-1"]
    assert rack_of["llm-0"] != rack_of["llm-1"]
    leader = pods["llm-0"]
    affinity, anti = exclusive_terms(group_key("default", "llm-0"), "rack")
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    assert leader["spec"]["affinity"]["podAffinity"][req] == [affinity]
    assert leader["spec"]["affinity"]["podAntiAffinity"][req] == [anti]
    workers = cp.store.peek(STS, "default", "llm-0")
    assert workers is not None
    assert workers["spec"]["template"]["spec"]["nodeSelector"] == {"rack": rack_of["llm-0"]}
    assert workers["spec"]["template"]["metadata"]["annotations"][EXCLUSIVE_ANNOTATION] == "rack"
    assert "affinity" not in pods["llm-0-1"]["spec"]  # workers are pinned, not given terms

    # A third group: both racks hold another group's pods. Its leader stays Pending with
    # the scheduler's reason, and no worker StatefulSet is made for it.
    rt = cp.store.catalog.by_key(KEY)
    assert rt is not None
    cp.store.mutate(rt, "default", "llm", lambda o: o["spec"].update(replicas=3))

    def refused() -> bool:
        p = group_pods(cp).get("llm-2")
        return p is not None and any(
            c.get("reason") == "Unschedulable" for c in p["status"].get("conditions") or [])
    await wait_until(cp, refused, what="the third leader Unschedulable")
    [cond] = [c for c in group_pods(cp)["llm-2"]["status"]["conditions"]
              if c["type"] == "PodScheduled"]
    assert cond["message"].startswith(
        "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules"), cond
    assert cp.store.peek(STS, "default", "llm-2") is None


async def test_kubectl_get_and_scale_lws_by_whole_groups_from_the_top(
        control_plane: ControlPlane, cp_nodes: list[str], kubectl: Kubectl) -> None:
    cp = control_plane
    out = await kubectl.ok("apply", "-f", str(REPO / "deploy" / "lab"
                                              / "leaderworkerset-crd.yaml"))
    assert "leaderworkersets.leaderworkerset.x-k8s.io created" in out
    await kubectl.ok("wait", "--for=condition=Established", f"crd/{NAME}", "--timeout=30s")
    out = await kubectl.ok("apply", "-f", "-", stdin=yaml.safe_dump(lws(replicas=3, size=2)))
    assert "leaderworkerset.leaderworkerset.x-k8s.io/llm created" in out
    await wait_until(cp, lambda: up(cp, 3, 2), what="3 groups of 2 Ready")
    table = (await kubectl.ok("get", "lws")).splitlines()
    assert table[0].split() == ["NAME", "READY", "DESIRED", "UP-TO-DATE", "AGE"]
    assert table[1].split()[:4] == ["llm", "3", "3", "3"]

    removals = Removals(cp)
    out = await kubectl.ok("scale", "lws", "llm", "--replicas=2")
    assert "leaderworkerset.leaderworkerset.x-k8s.io/llm scaled" in out
    await wait_until(cp, lambda: up(cp, 2, 2) and cp.store.peek(STS, "default", "llm-2")
                     is None, what="scaled to 2 groups")
    removals.unlisten()
    assert sorted(removals.names) == ["llm-2", "llm-2-1"]

    api = _official(cp)
    try:
        custom = client.CustomObjectsApi(api)
        scale = await asyncio.to_thread(custom.get_namespaced_custom_object_scale,
                                        "leaderworkerset.x-k8s.io", "v1", "default",
                                        "leaderworkersets", "llm")
        assert scale["spec"]["replicas"] == 2 and scale["status"]["replicas"] == 2
        assert scale["status"]["selector"] == hpa_selector("llm")
        await asyncio.to_thread(custom.patch_namespaced_custom_object_scale,
                                "leaderworkerset.x-k8s.io", "v1", "default",
                                "leaderworkersets", "llm", {"spec": {"replicas": 3}})
        await wait_until(cp, lambda: up(cp, 3, 2), what="back to 3 groups")
    finally:
        api.close()


def _official(cp: ControlPlane) -> client.ApiClient:
    cfg = client.Configuration(host=cp.url)
    cfg.ssl_ca_cert = str(cp.ca_path)
    cfg.api_key = {"BearerToken": f"Bearer {cp.token}"}
    return client.ApiClient(cfg)


async def test_a_real_lab_runs_a_group_with_the_lws_environment(tmp_path: Path) -> None:
    """Lab.install_leaderworkerset, then real processes on real lab kubelets: every
    container of the group sees its LWS_* variables."""
    import json
    import sys

    from drainsafe.lab.cluster import Lab
    from drainsafe.lab.node.volumes import pod_dir

    program = ("import json, os, time; open('env.json.tmp', 'w').write(json.dumps("
               "{k: v for k, v in os.environ.items() if k.startswith('LWS_')})); "
               "os.rename('env.json.tmp', 'env.json'); time.sleep(600)")
    manifest = lws(replicas=1, size=2)
    manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"] = [
        {"name": "vllm", "image": "example/vllm:1.0", "command": [sys.executable, "-c", program]}]
    async with Lab(tmp_path / "lab", nodes=2, propagation_seconds=0, ingress=False) as lab:
        await lab.install_leaderworkerset()
        await lab.apply(manifest)
        cp = lab.control_plane

        def seen(name: str) -> dict[str, str] | None:
            p = cp.store.peek(PODS, "default", name)
            if p is None:
                return None
            path = pod_dir(lab.state_dir, "default", name, p["metadata"]["uid"]) / "vllm" \
                / "env.json"
            return json.loads(path.read_text()) if path.exists() else None

        await wait_until(cp, lambda: up(cp, 1, 2) and seen("llm-0") is not None
                         and seen("llm-0-1") is not None, what="the group running")
        assert seen("llm-0") == {"LWS_LEADER_ADDRESS": "llm-0.llm.default",
                                 "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0"}
        assert seen("llm-0-1") == {"LWS_LEADER_ADDRESS": "llm-0.llm.default",
                                   "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}
