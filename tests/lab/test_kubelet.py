"""The kubelet against the real control plane: liveness restarts, startup probes, crash
restarts, deadline kills with the preStop extension, virtual pods, node registration."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from lightkube.resources.core_v1 import Node, Pod

from drainsafe.lab.cluster import Lab, pids_alive, virtual_deployment

SLEEPER = [sys.executable, "-c", "import signal, time\n"
           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "while True: time.sleep(0.1)"]


def pod(name: str, container: dict[str, Any], *, grace: int = 5,
        restart: str = "Always", node: str = "node-0") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "restartPolicy": restart,
                     "terminationGracePeriodSeconds": grace,
                     "containers": [{"name": "c", "image": "busybox", **container}]}}


async def pod_status(lab: Lab, name: str) -> dict[str, Any]:
    assert lab.client is not None
    return (await lab.client.get(Pod, name, namespace="default")).to_dict().get("status") or {}


async def until(lab: Lab, name: str, test: Any, timeout: float = 30) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    status: dict[str, Any] = {}
    while loop.time() < deadline:
        status = await pod_status(lab, name)
        if test(status):
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name}: condition not met in {timeout}s; status {status}")


def container(status: dict[str, Any]) -> dict[str, Any]:
    return (status.get("containerStatuses") or [{}])[0]


async def test_node_registration(lab: Lab) -> None:
    assert lab.client is not None
    node = (await lab.client.get(Node, "node-0")).to_dict()
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "node-0"
    assert node["status"]["allocatable"]["pods"] == "110"
    assert node["status"]["addresses"][0]["address"].startswith("127.10.")


async def test_liveness_failure_restarts_the_container(lab: Lab, tmp_path: Any) -> None:
    flag = tmp_path / "sick"
    await lab.apply(pod("live", {
        "command": SLEEPER,
        "livenessProbe": {"exec": {"command": ["test", "!", "-e", str(flag)]},
                          "periodSeconds": 1, "failureThreshold": 2},
    }, grace=1))
    await until(lab, "live", lambda s: container(s).get("ready"))
    flag.write_text("x")
    status = await until(lab, "live", lambda s: container(s).get("restartCount", 0) >= 1)
    flag.unlink()
    last = container(status)["lastState"]["terminated"]
    assert last["exitCode"] == 137  # SIGTERM ignored: killed after the 2 s floor
    await until(lab, "live", lambda s: container(s).get("ready") and "running" in
                container(s)["state"])


async def test_liveness_kill_with_grace_zero_skips_prestop(lab: Lab, tmp_path: Any) -> None:
    """terminationGracePeriodSeconds: 0 is an explicit 0 (setTerminationGracePeriod): the
    preStop hook does not run and SIGKILL follows SIGTERM after the 2 s floor. A kubelet
    that read 0 as "unset, 30" would run the 30 s hook first."""
    flag = tmp_path / "sick"
    await lab.apply(pod("zero", {
        "command": SLEEPER,
        "lifecycle": {"preStop": {"sleep": {"seconds": 30}}},
        "livenessProbe": {"exec": {"command": ["test", "!", "-e", str(flag)]},
                          "periodSeconds": 1, "failureThreshold": 2},
    }, grace=0))
    await until(lab, "zero", lambda s: container(s).get("ready"))
    await asyncio.sleep(1)  # no readiness probe: let the child install its SIGTERM handler
    loop = asyncio.get_running_loop()
    flag.write_text("x")
    sick_at = loop.time()
    status = await until(lab, "zero", lambda s: container(s).get("restartCount", 0) >= 1)
    flag.unlink()
    assert container(status)["lastState"]["terminated"]["exitCode"] == 137
    assert loop.time() - sick_at < 15  # probe period + 2 s floor, far below the 30 s hook


async def test_startup_probe_gates_readiness(lab: Lab, tmp_path: Any) -> None:
    flag = tmp_path / "started"
    await lab.apply(pod("slowstart", {
        "command": SLEEPER,
        "startupProbe": {"exec": {"command": ["test", "-e", str(flag)]},
                         "periodSeconds": 1, "failureThreshold": 30},
    }))
    status = await until(lab, "slowstart", lambda s: "running" in container(s).get("state", {}))
    await asyncio.sleep(1.5)
    status = await pod_status(lab, "slowstart")
    assert container(status)["started"] is False and container(status)["ready"] is False
    flag.write_text("x")
    status = await until(lab, "slowstart", lambda s: container(s).get("ready"))
    assert container(status)["started"] is True
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"


async def test_crashing_container_is_restarted_per_policy(lab: Lab) -> None:
    await lab.apply(pod("crash", {"command": [sys.executable, "-c", "import sys; sys.exit(3)"]}),
                    pod("once", {"command": [sys.executable, "-c", "pass"]}, restart="Never"))
    status = await until(lab, "crash", lambda s: container(s).get("restartCount", 0) >= 2)
    assert container(status)["lastState"]["terminated"]["exitCode"] == 3
    status = await until(lab, "once", lambda s: s.get("phase") == "Succeeded")
    assert container(status)["state"]["terminated"]["reason"] == "Completed"


async def test_delete_kills_at_the_deadline_after_prestop_overrun(lab: Lab) -> None:
    await lab.apply(pod("stubborn", {"command": SLEEPER,
                                     "lifecycle": {"preStop": {"sleep": {"seconds": 30}}}},
                        grace=1))
    await until(lab, "stubborn", lambda s: container(s).get("ready"))
    assert lab.client is not None and lab.nodes is not None
    worker = lab.nodes.worker("default", "stubborn")
    assert worker is not None
    await lab.client.delete(Pod, "stubborn", namespace="default")
    async with asyncio.timeout(30):
        await worker.finished.wait()
    record = worker.records["c"]
    assert record.prestop_completed is False and record.killed
    assert record.sigterm_at is not None and record.sigkill_at is not None
    # grace 1 s for the hook, then the one-off 2 s before SIGKILL.
    assert 0.9 <= record.sigterm_at - record.started <= 2.5
    assert 1.9 <= record.sigkill_at - record.sigterm_at <= 3.5
    assert worker.phase == "Failed"
    names = [p.metadata.name async for p in lab.client.list(Pod, namespace="default")
             if p.metadata is not None]
    assert "stubborn" not in names


async def test_virtual_pods_terminate_after_their_configured_time(lab: Lab) -> None:
    await lab.apply(virtual_deployment("v", replicas=2, startup_seconds=0.3,
                                       exit_after_sigterm_seconds=0.5, grace=10))
    await lab.wait_available("default", "v", timeout=30)
    assert lab.client is not None and lab.nodes is not None
    pods = [p.to_dict() async for p in lab.client.list(Pod, namespace="default",
                                                        labels={"app": "v"})]
    name = pods[0]["metadata"]["name"]
    worker = lab.nodes.worker("default", name)
    assert worker is not None
    await lab.client.delete(Pod, name, namespace="default")
    async with asyncio.timeout(30):
        await worker.finished.wait()
    record = worker.records["main"]
    assert not record.killed and record.exit_code == 0
    assert record.exited_at is not None and record.sigterm_at is not None
    assert record.exited_at - record.sigterm_at >= 0.49
    await lab.wait_available("default", "v", timeout=30)  # the replacement came up


async def test_a_pod_recreated_while_the_watch_was_down_replaces_the_old_process(
        lab: Lab) -> None:
    """Force-deleted and created again under its name while the kubelets' watch was down:
    the relist delivers the old pod's deletion (marked DeletedFinalStateUnknown) and the new
    pod's addition, so the old process is stopped, not left running beside the new one."""
    assert lab.client is not None and lab.nodes is not None
    manifest = pod("same", {"command": [sys.executable, "-c",
                                        "import time\nwhile True: time.sleep(0.1)"]})
    await lab.apply(manifest)
    await until(lab, "same", lambda s: "running" in container(s).get("state", {}))
    old = lab.nodes.worker("default", "same")
    assert old is not None
    old_pid = old.containers[0].process.pid if old.containers[0].process else None
    assert old_pid is not None
    informer = lab.nodes.informer
    await informer.stop()
    await lab.client.delete(Pod, "same", namespace="default", grace_period=0)
    await lab.apply(manifest)
    new_uid = (await lab.client.get(Pod, "same", namespace="default")).to_dict()[
        "metadata"]["uid"]
    assert new_uid != old.uid
    await informer.start()
    async with asyncio.timeout(30):
        await old.finished.wait()
    assert pids_alive([old_pid]) == []
    await until(lab, "same", lambda s: "running" in container(s).get("state", {}))
    new = lab.nodes.worker("default", "same")
    assert new is not None and new.uid == new_uid
    assert informer.stats.missed_deletions == 1
