"""A node cut off from the API server (lab.node.partition), as a v1.33 cluster handles it:
its Lease stops being renewed, the node lifecycle controller marks it Ready=Unknown and
taints it unreachable (NoSchedule, NoExecute), the taint eviction controller deletes each
pod when its tolerationSeconds run out (the shortest first; a DaemonSet's pod never), the
Deployment's replacement runs on another node, and when the node is back its taints come
off and its kubelet finishes the deletions it missed. Real processes, the real control
plane, durations scaled down through the lab's settings."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from conftest import wait_until
from drainsafe.kube.objects import condition, is_node_ready, is_ready
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event
from drainsafe.lab.cluster import Lab, pids_alive
from drainsafe.placement import UNREACHABLE_TAINT

PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
LEASES = BY_KEY["coordination.k8s.io/leases"]
SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"]
TOLERATION_SECONDS = 3  # the lab's default not-ready/unreachable tolerationSeconds
SHORT_SECONDS = 1
GRACE = 5


def spec(**extra: Any) -> dict[str, Any]:
    return {"terminationGracePeriodSeconds": GRACE,
            "containers": [{"name": "c", "image": "busybox", "command": SLEEPER}], **extra}


def deployment() -> dict[str, Any]:
    labels = {"app": "web"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": spec()}}}


def daemonset() -> dict[str, Any]:
    labels = {"app": "agent"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "default"},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": spec()}}}


def short_pod(node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "short", "namespace": "default"},
            "spec": spec(nodeName=node, tolerations=[
                {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": SHORT_SECONDS}])}


async def lab_node(lab: Lab, *args: str) -> str:
    """`drainsafe lab node ...`, as a person runs it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", "lab", "node", *args,
        "--kubeconfig", str(lab.kubeconfig), "--timeout", "30",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    async with asyncio.timeout(60):
        out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    return out.decode()


def taint_keys(node: dict[str, Any]) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in (node.get("spec") or {}).get("taints") or []}


async def test_a_cut_off_node_goes_unknown_its_pods_are_evicted_by_toleration_and_it_comes_back(
        tmp_path: Path) -> None:
    async with Lab(tmp_path / "lab", nodes=3, propagation_seconds=0, ingress=False,
                   node_lease_seconds=0.4, node_monitor_grace_seconds=1.0,
                   toleration_seconds=TOLERATION_SECONDS) as lab:
        cp = lab.control_plane
        store = cp.store
        await lab.apply(deployment(), daemonset())
        await lab.wait_available("default", "web", timeout=30)
        await lab.wait_daemonset("default", "agent", timeout=30)
        [web] = [p for p in store.items(PODS, "default") if p["metadata"]["name"]
                 .startswith("web-")]
        lost = web["spec"]["nodeName"]
        await lab.apply(short_pod(lost))
        [agent] = [p for p in store.items(PODS, "default")
                   if p["metadata"]["name"].startswith("agent-") and p["spec"]["nodeName"] == lost]
        await wait_until(cp, lambda: is_ready(store.get(PODS, "default", "short")),
                         what="short Ready")
        # Each kubelet renews its Lease, owned by its Node (pkg/kubelet/nodelease).
        node_lease = store.get(LEASES, "kube-node-lease", lost)
        assert node_lease["spec"]["holderIdentity"] == lost
        assert node_lease["metadata"]["ownerReferences"][0]["uid"] == \
            store.get(NODES, "", lost)["metadata"]["uid"]
        assert web["spec"]["tolerations"][-1]["tolerationSeconds"] == TOLERATION_SECONDS

        def pid(name: str) -> int:
            worker = lab.nodes.worker("default", name)
            assert worker is not None and worker.containers[0].process is not None
            return int(worker.containers[0].process.pid or 0)

        web_pid = pid(web["metadata"]["name"])
        # When each thing happened, by the control plane's clock, seen as it happened.
        tainted_at: list[float] = []
        deleted_at: dict[str, float] = {}

        def seen(ev: Event) -> None:
            obj = ev.obj
            if ev.resource == NODES.key and obj["metadata"]["name"] == lost \
                    and (UNREACHABLE_TAINT, "NoExecute") in taint_keys(obj) and not tainted_at:
                tainted_at.append(store.clock())
            if ev.resource == PODS.key and obj["metadata"].get("deletionTimestamp"):
                deleted_at.setdefault(obj["metadata"]["name"], store.clock())

        unlisten = store.listen(seen)
        try:
            out = await lab_node(lab, "cut-off", lost, "--wait")
            assert out.strip() == f"node/{lost} cut off: Ready=Unknown"
            ready = condition(store.get(NODES, "", lost), "Ready") or {}
            assert (ready["status"], ready["reason"], ready["message"]) == (
                "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
            await wait_until(cp, lambda: taint_keys(store.get(NODES, "", lost)) >= {
                (UNREACHABLE_TAINT, "NoSchedule"), (UNREACHABLE_TAINT, "NoExecute")},
                what="unreachable taints")
            # The Deployment's replacement runs Ready on another node.
            def replacement() -> dict[str, Any] | None:
                return next((p for p in store.items(PODS, "default")
                             if p["metadata"]["name"].startswith("web-")
                             and not p["metadata"].get("deletionTimestamp")
                             and is_ready(p)), None)
            await wait_until(cp, lambda: replacement() is not None, what="replacement Ready")
        finally:
            unlisten()

        name = web["metadata"]["name"]
        assert set(deleted_at) == {"short", name}  # the DaemonSet's pod stays
        assert deleted_at["short"] < deleted_at[name]  # the shorter toleration goes first
        assert deleted_at[name] - tainted_at[0] >= TOLERATION_SECONDS
        assert deleted_at["short"] - tainted_at[0] >= SHORT_SECONDS
        new = replacement()
        assert new is not None and new["spec"]["nodeName"] != lost
        evicted = store.get(PODS, "default", name)
        target = condition(evicted, "DisruptionTarget") or {}
        assert (target.get("status"), target.get("reason")) == ("True", "DeletionByTaintManager")
        # DeleteOptions{}: the pod's own grace period; no kubelet confirms, so it stays
        assert evicted["metadata"]["deletionGracePeriodSeconds"] == GRACE
        assert pids_alive([web_pid]) == [web_pid]  # the machine runs on, cut off
        still = store.get(PODS, "default", agent["metadata"]["name"])
        assert not still["metadata"].get("deletionTimestamp")

        assert (await lab_node(lab, "reconnect", lost)).strip() == \
            f"node/{lost} reconnected: Ready"
        await wait_until(cp, lambda: is_node_ready(store.get(NODES, "", lost))
                         and not taint_keys(store.get(NODES, "", lost)),
                         what=f"{lost} Ready and untainted")
        # Back, the kubelet sees the deletions it missed and finishes them.
        await wait_until(cp, lambda: store.peek(PODS, "default", name) is None
                         and store.peek(PODS, "default", "short") is None,
                         what="evicted pods gone", timeout=30)
        assert pids_alive([web_pid]) == []
        back = store.get(PODS, "default", agent["metadata"]["name"])
        assert back["metadata"]["uid"] == agent["metadata"]["uid"]
        assert not back["metadata"].get("deletionTimestamp")
