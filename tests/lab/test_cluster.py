"""The whole lab: nodes registered, pods as processes reachable through both paths, logs,
clean-up of every process (also when the code inside the lab fails)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from lightkube.resources.core_v1 import Node, Pod

from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import (
    SYSTEM_NODE_SELECTOR,
    SYSTEM_TAINT,
    SYSTEM_TOLERATION,
    Lab,
    gpu_device_plugin_daemonset,
    pids_alive,
    virtual_deployment,
)
from drainsafe.lab.node.probes import LoopStalls
from drainsafe.lab.node.volumes import pod_dir

SERVICES = BY_KEY["services"]


def http_deployment(name: str, *, replicas: int = 2, grace: int = 10,
                    prestop: dict[str, Any] | None = None) -> dict[str, Any]:
    """python -m http.server bound to the pod IP via the downward API and $(VAR)."""
    container: dict[str, Any] = {
        "name": "web", "image": "python:3.11",
        "command": [sys.executable, "-m", "http.server"],
        "args": ["--bind", "$(POD_IP)", "8000"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
    }
    if prestop:
        container["lifecycle"] = {"preStop": prestop}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"terminationGracePeriodSeconds": grace,
                                           "containers": [container]}}}}


def service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"app": name},
                     "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}


async def _kubectl(lab: Lab, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", f"--kubeconfig={lab.kubeconfig}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, (args, err.decode())
    return out.decode()


async def test_nodes_pods_and_both_traffic_paths(lab: Lab) -> None:
    assert lab.client is not None
    nodes = [n.to_dict() async for n in lab.client.list(Node)]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["node-0", "node-1"]
    ready = [c for n in nodes for c in n["status"]["conditions"] if c["type"] == "Ready"]
    assert [c["status"] for c in ready] == ["True", "True"]

    await lab.apply(http_deployment("web"), service("web"))
    await lab.wait_available("default", "web", timeout=60)
    backends = await lab.wait_backends("default", "web", 2, timeout=30)
    pods = [p.to_dict() async for p in lab.client.list(Pod, namespace="default",
                                                        labels={"app": "web"})]
    ips = sorted(p["status"]["podIP"] for p in pods)
    assert sorted(b.split(":")[0] for b in backends) == ips
    assert all(ip.startswith("127.10.") for ip in ips)
    for pod in pods:
        status = pod["status"]
        assert status["phase"] == "Running"
        assert {c["type"]: c["status"] for c in status["conditions"]} == {
            "PodScheduled": "True", "Initialized": "True", "ContainersReady": "True",
            "Ready": "True"}
        cs = status["containerStatuses"][0]
        assert cs["ready"] and cs["started"] and cs["restartCount"] == 0
        assert "running" in cs["state"]
        log = pod_dir(lab.state_dir, "default", pod["metadata"]["name"],
                      pod["metadata"]["uid"]) / "web.log"
        assert log.exists()

    wide = await _kubectl(lab, "get", "pods", "-o", "wide")
    for pod in pods:
        line = next(x for x in wide.splitlines() if x.startswith(pod["metadata"]["name"]))
        assert pod["status"]["podIP"] in line and pod["spec"]["nodeName"] in line
        assert "Running" in line and "1/1" in line
    logs = await _kubectl(lab, "logs", pods[0]["metadata"]["name"])
    assert "GET / HTTP/1.1" in logs  # http.server's log of the readiness probes

    async with httpx.AsyncClient() as client:
        via_cluster_ip = await client.get(lab.service_url("default", "web") + "/")
        assert via_cluster_ip.status_code == 200
        await lab.wait_backends("default", "web", 2, path="ingress", timeout=30)
        via_ingress = await client.get(lab.service_url("default", "web", path="ingress") + "/")
        assert via_ingress.status_code == 200


async def test_every_process_is_stopped_when_the_code_in_the_lab_fails(tmp_path: Path) -> None:
    started: list[int] = []
    with pytest.raises(RuntimeError, match="test failure"):
        async with Lab(tmp_path / "lab", nodes=1, propagation_seconds=0) as lab:
            await lab.apply(http_deployment("web", replicas=2))
            await lab.wait_available("default", "web", timeout=60)
            await lab.apply(service("web"))
            await lab.wait_backends("default", "web", 2, path="ingress", timeout=30)
            started = lab.pids()
            raise RuntimeError("test failure")
    assert len(started) == 3  # two containers and nginx
    assert pids_alive(started) == []


async def test_pod_deletion_runs_prestop_then_sigterm_and_deletes(lab: Lab) -> None:
    await lab.apply(http_deployment("slow", replicas=1, grace=5,
                                    prestop={"sleep": {"seconds": 1}}))
    await lab.wait_available("default", "slow", timeout=60)
    assert lab.client is not None and lab.nodes is not None
    pods = [p.to_dict() async for p in lab.client.list(Pod, namespace="default",
                                                        labels={"app": "slow"})]
    assert len(pods) == 1
    name = pods[0]["metadata"]["name"]
    worker = lab.nodes.worker("default", name)
    assert worker is not None
    await lab.client.delete(Pod, name, namespace="default")
    async with asyncio.timeout(30):
        await worker.finished.wait()
    record = worker.records["web"]
    assert record.prestop_completed and record.sigterm_at is not None
    assert record.prestop_started is not None
    assert record.sigterm_at - record.prestop_started >= 1.0
    assert not record.killed  # http.server exits on SIGTERM
    remaining = [p.metadata.name async for p in lab.client.list(Pod, namespace="default")
                 if p.metadata is not None and p.metadata.name == name]
    assert remaining == []


async def test_virtual_pods_need_no_process(lab: Lab) -> None:
    await lab.apply(virtual_deployment("v", replicas=4, startup_seconds=0.2))
    await lab.wait_available("default", "v", timeout=30)
    assert lab.nodes.pids() == [] if lab.nodes else True  # virtual: no container process
    assert lab.nodes is not None
    workers = [w for k in lab.nodes.kubelets.values() for w in k.pods.values()]
    assert len(workers) == 4
    assert all(c.process is not None and c.process.pid is None
               for w in workers for c in w.containers)


async def test_system_nodes_take_only_the_pods_pinned_there(tmp_path: Path) -> None:
    async with Lab(tmp_path / "lab", nodes=2, system_nodes=2, propagation_seconds=0,
                   ingress=False) as lab:
        pinned = virtual_deployment("addon", replicas=2)
        pinned["spec"]["template"]["spec"].update(nodeSelector=SYSTEM_NODE_SELECTOR,
                                                  tolerations=[SYSTEM_TOLERATION])
        await lab.apply(virtual_deployment("work", replicas=6), pinned)
        await lab.wait_available("default", "work", timeout=30)
        await lab.wait_available("default", "addon", timeout=30)
        assert lab.client is not None
        nodes = {n.metadata.name: n async for n in lab.client.list(Node)
                 if n.metadata is not None and n.metadata.name is not None}
        assert sorted(nodes) == ["node-0", "node-1", "system-0", "system-1"]
        for name in ("system-0", "system-1"):
            node = nodes[name].to_dict()
            assert [{k: t[k] for k in ("key", "effect")} for t in node["spec"]["taints"]] \
                == [SYSTEM_TAINT]
            assert "nvidia.com/gpu" not in node["status"]["allocatable"]
        placed = {p.metadata.name: p.spec.nodeName async for p in lab.client.list(
            Pod, namespace="default") if p.metadata is not None and p.spec is not None}
        work = {n for p, n in placed.items() if p.startswith("work-")}
        addon = {n for p, n in placed.items() if p.startswith("addon-")}
        assert len(placed) == 8 and work <= {"node-0", "node-1"}, placed
        assert addon <= {"system-0", "system-1"}, placed


async def test_endpoint_removal_reaches_the_proxy_after_the_propagation_delay(
        tmp_path: Path, loop_stalls: LoopStalls) -> None:
    async with Lab(tmp_path / "lab", nodes=1, propagation_seconds=1.0, ingress=False) as lab:
        await lab.apply(http_deployment("web", replicas=1, grace=5,
                                        prestop={"sleep": {"seconds": 2}}), service("web"))
        await lab.wait_available("default", "web", timeout=60)
        (backend,) = await lab.wait_backends("default", "web", 1, timeout=30)
        assert lab.client is not None and lab.net is not None
        (name,) = [p.metadata.name async for p in lab.client.list(
            Pod, namespace="default", labels={"app": "web"}) if p.metadata is not None]
        loop = asyncio.get_running_loop()
        deleted_at = loop.time()
        await lab.client.delete(Pod, name, namespace="default")
        deadline = loop.time() + 30
        removed_at = None
        while removed_at is None and loop.time() < deadline:
            removed_at = next((t for t, _, backends in lab.net.l4.history
                               if t > deleted_at and backend not in backends), None)
            await asyncio.sleep(0.05)
        assert removed_at is not None
        # The API knew at once (the endpoint turned not-ready); the proxy a second later,
        # give or take the control-plane hops and whatever the lab's loop measured stalled.
        stalled = loop_stalls.stalled(deleted_at, removed_at)
        assert 1.0 <= removed_at - deleted_at <= 3.0 + stalled, (removed_at - deleted_at,
                                                                  stalled)


@pytest.mark.parametrize("version", ["1.27", "1.33"])
async def test_kubectl_drain_with_real_kubelets(tmp_path: Path, version: str) -> None:
    binary = Path(f"/usr/lib/google-cloud-sdk/bin/kubectl.{version}")
    if not binary.exists():
        pytest.skip(f"{binary} is not installed")
    async with Lab(tmp_path / "lab", nodes=2, gpus_per_node=1, propagation_seconds=0,
                   ingress=False) as lab:
        deployment = virtual_deployment("infer", replicas=3, startup_seconds=0.2,
                                        exit_after_sigterm_seconds=0.3)
        deployment["spec"]["template"]["spec"]["containers"][0]["lifecycle"] = {
            "preStop": {"sleep": {"seconds": 1}}}
        assert lab.client is not None and lab.nodes is not None
        # All replicas start on node-0 (node-1 cordoned meanwhile), so the drain moves all.
        await lab.client.patch(Node, "node-1", {"spec": {"unschedulable": True}})
        await lab.apply(gpu_device_plugin_daemonset(), deployment)
        await lab.wait_available("default", "infer", timeout=60)
        await lab.wait_daemonset("kube-system", "nvidia-device-plugin-daemonset", timeout=60)
        await lab.client.patch(Node, "node-1", {"spec": {"unschedulable": False}})
        proc = await asyncio.create_subprocess_exec(
            str(binary), f"--kubeconfig={lab.kubeconfig}", "drain", "node-0",
            "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        async with asyncio.timeout(90):
            out, err = await proc.communicate()
        assert proc.returncode == 0, (out.decode(), err.decode())
        assert "node/node-0 drained" in out.decode()
        await lab.wait_available("default", "infer", timeout=60)
        pods = [p.to_dict() async for p in lab.client.list(Pod, namespace="*")]
        infer = [p for p in pods if p["metadata"]["labels"].get("app") == "infer"]
        assert len(infer) == 3
        assert {p["spec"]["nodeName"] for p in infer} == {"node-1"}
        plugin = [p for p in pods if p["metadata"]["namespace"] == "kube-system"]
        assert sorted(p["spec"]["nodeName"] for p in plugin) == ["node-0", "node-1"]
        # The evicted pods went through the kubelet's termination: preStop, then SIGTERM.
        done = lab.nodes.kubelets["node-0"].terminated
        assert len(done) == 3 and all(w.records["main"].prestop_completed for w in done)


async def test_parallel_labs_allocate_different_cluster_ips(tmp_path: Path) -> None:
    """Labs sharing a machine start ClusterIP allocation at random offsets (the control
    plane's cluster_ip_start), so their L4 listeners on 127.96.x.y:80 do not collide."""
    async with Lab(tmp_path / "one", nodes=1, ingress=False, seed=1) as one, \
            Lab(tmp_path / "two", nodes=1, ingress=False, seed=2) as two:
        ips = []
        for lab in (one, two):
            await lab.apply(service("web"))
            svc = lab.control_plane.store.get(SERVICES, "default", "web")
            ips.append(svc["spec"]["clusterIP"])
        assert ips[0] != ips[1]
        assert all(ip.startswith("127.96.") and ip != "127.96.0.1" for ip in ips), ips
