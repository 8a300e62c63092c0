"""A lab node's reboot ends its containers, as a real one does (lab.node.reboot,
PodWorker.power_loss and boot): while the node is down its pods are marked not Ready (the
node lifecycle controller's MarkPodsNotReady), and after the boot the kubelet starts them
again per restartPolicy in the same pod objects: restartCount + 1, lastState the
runtime's record of a container lost with its machine (exit code 255, reason Unknown);
a restartPolicy Never pod fails instead. Real processes, the real control plane."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from conftest import wait_until
from drainsafe.kube.objects import condition, is_node_ready, is_ready
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event
from drainsafe.lab.cluster import Lab, pids_alive
from drainsafe.lab.node import reboot

PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
EVENTS = BY_KEY["events"]
SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"]


def pod(name: str, restart: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "node-0", "restartPolicy": restart,
                     "terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "c", "image": "busybox", "command": SLEEPER}]}}


def container(p: dict[str, Any] | None) -> dict[str, Any]:
    return ((p or {}).get("status") or {}).get("containerStatuses", [{}])[0]


async def test_a_reboot_restarts_the_pods_containers_per_restart_policy(
        tmp_path: Path) -> None:
    async with Lab(tmp_path / "lab", nodes=1, propagation_seconds=0, ingress=False) as lab:
        cp = lab.control_plane
        store = cp.store
        await lab.apply(pod("always", "Always"), pod("never", "Never"))
        await wait_until(cp, lambda: all(is_ready(store.peek(PODS, "default", n) or {})
                                         for n in ("always", "never")), what="pods Ready")
        uid = store.get(PODS, "default", "always")["metadata"]["uid"]

        def pid(name: str) -> int:
            worker = lab.nodes.worker("default", name)
            assert worker is not None and worker.containers[0].process is not None
            return int(worker.containers[0].process.pid or 0)

        old = {n: pid(n) for n in ("always", "never")}
        # What the API showed while the node was down, seen on each change as it happened.
        alive_when_down: list[list[int]] = []
        ready_while_down: list[bool] = []

        def seen(ev: Event) -> None:
            obj = ev.obj
            if ev.resource == NODES.key and not is_node_ready(obj) and not alive_when_down:
                alive_when_down.append(pids_alive(old.values()))
            if ev.resource == PODS.key and obj["metadata"]["name"] == "always" \
                    and not is_node_ready(store.get(NODES, "", "node-0")):
                ready_while_down.append(is_ready(obj))

        unlisten = store.listen(seen)
        try:
            before = await reboot.request(lab.watch_client, "node-0", reboot.RebootRequest())
            await reboot.wait_rebooted(lab.watch_client, "node-0",
                                       reboot.boot_facts(before)[0], timeout=30)
            await wait_until(cp, lambda: is_ready(store.get(PODS, "default", "always"))
                             and store.get(PODS, "default", "never")["status"].get(
                                 "phase") == "Failed", what="pods after the boot")
        finally:
            unlisten()

        # The machine went down with its processes: dead before the node was NotReady.
        assert alive_when_down == [[]]
        assert ready_while_down and ready_while_down[-1] is False  # MarkPodsNotReady
        always = store.get(PODS, "default", "always")
        assert always["metadata"]["uid"] == uid  # the same pod, bound to the same node
        status = container(always)
        assert status["restartCount"] == 1 and "running" in status["state"]
        last = status["lastState"]["terminated"]
        assert (last["exitCode"], last["reason"]) == (255, "Unknown")
        assert pid("always") != old["always"] and pids_alive([pid("always")])
        assert (condition(always, "Ready") or {}).get("status") == "True"

        never = container(store.get(PODS, "default", "never"))
        assert never["restartCount"] == 0
        assert (never["state"]["terminated"]["exitCode"],
                never["state"]["terminated"]["reason"]) == (255, "Unknown")
        reasons = {(e["involvedObject"].get("name"), e["reason"])
                   for e in store.items(EVENTS, "default")}
        assert ("always", "SandboxChanged") in reasons
        assert ("never", "SandboxChanged") not in reasons
