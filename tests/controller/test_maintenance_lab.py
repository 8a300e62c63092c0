"""NodeMaintenance on the lab (issue 30): `kubectl apply -k deploy/controller`, then
`kubectl apply -f` of a NodeMaintenance over two nodes; the controller's leader cordons,
drains (drainsafe drain's engine, make before break) and uncordons them one at a time."""

from __future__ import annotations

import asyncio
import pathlib

import pytest
import yaml

from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab, virtual_deployment

from .guardlab import DEPLOY, KUBECTL_DIR, kubectl, lab_path_env, ready_pods

pytestmark = pytest.mark.e2e
PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
REPLICAS = 3


@pytest.fixture
async def maintenance_lab(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    async with Lab(tmp_path / "lab", nodes=4, gpus_per_node=2, propagation_seconds=0.2,
                   restart_backoff=0.5) as lab:
        code, out = await kubectl(lab, "1.33", "apply", "-k", str(DEPLOY))
        assert code == 0, out
        await lab.wait_established("nodemaintenances.drainsafe.io")
        await lab.wait_available("drainsafe-system", "drainsafe-controller", timeout=90)
        yield lab


async def test_two_nodes_one_at_a_time_end_uncordoned_and_capacity_never_dips(
        maintenance_lab: Lab, tmp_path: pathlib.Path) -> None:
    lab = maintenance_lab
    assert lab.control_plane is not None
    store = lab.control_plane.store
    await lab.apply(virtual_deployment("llm", replicas=REPLICAS, startup_seconds=1.0,
                                       exit_after_sigterm_seconds=0.5, gpus=1))
    await lab.wait_available("default", "llm", timeout=60)
    # Two nodes that run no controller replica (a leader draining its own node is the
    # restart test's subject, not this one's), preferring nodes that run the workload.
    controllers = {p["spec"].get("nodeName") for p in store.items(PODS, "drainsafe-system")}
    workload = {p["spec"].get("nodeName") for p in ready_pods(lab, "llm")}
    free = sorted((n["metadata"]["name"] for n in store.items(NODES, "")
                   if n["metadata"]["name"] not in controllers),
                  key=lambda n: n not in workload)
    assert len(free) >= 2, (controllers, free)
    chosen = free[:2]
    on_chosen = {p["metadata"]["uid"] for p in ready_pods(lab, "llm")
                 if p["spec"].get("nodeName") in chosen}
    assert on_chosen, "no workload pod on the chosen nodes: nothing would be drained"
    manifest = tmp_path / "maintenance.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "drainsafe.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "driver-upgrade"},
        "spec": {"nodeNames": chosen, "maxParallelNodes": 1, "uncordon": "Immediately",
                 "reason": "driver upgrade"}}))

    lowest = REPLICAS
    most_cordoned = 0
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal lowest, most_cordoned
        while not stop.is_set():
            lowest = min(lowest, len(ready_pods(lab, "llm")))
            most_cordoned = max(most_cordoned, sum(
                bool(store.get(NODES, "", n)["spec"].get("unschedulable")) for n in chosen))
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    try:
        code, out = await kubectl(lab, "1.33", "apply", "-f", str(manifest))
        assert code == 0, out
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 240
        while (current := await _phase(lab)) not in ("Succeeded", "Failed"):
            assert loop.time() < deadline, f"phase {current!r} after 240 s"
            await asyncio.sleep(0.5)
    finally:
        stop.set()
        await sampler
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance", "driver-upgrade",
                              "-o", "yaml")
    assert code == 0, out
    obj = yaml.safe_load(out)
    status = obj["status"]
    assert status["phase"] == "Succeeded", status
    assert [n["name"] for n in status["nodes"]] == chosen
    assert all(n["state"] == "Uncordoned" for n in status["nodes"]), status["nodes"]
    assert (status["done"], status["total"], status["currentWave"]) == (2, 2, 2)
    for n in chosen:
        node = store.get(NODES, "", n)
        assert not node["spec"].get("unschedulable"), n
    assert most_cordoned == 1  # maxParallelNodes 1: never both at once
    # drained: the workload's pods that ran there were replaced (make before break)
    assert not on_chosen & {p["metadata"]["uid"] for p in ready_pods(lab, "llm")}
    assert lowest >= REPLICAS, f"Ready fell to {lowest} of {REPLICAS}"
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance")
    assert code == 0, out
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "PHASE", "DONE", "TOTAL", "WAVE", "AGE"], out
    assert row.split()[:5] == ["driver-upgrade", "Succeeded", "2", "2", "2"], out


async def _phase(lab: Lab) -> str:
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance", "driver-upgrade",
                              "-o", "jsonpath={.status.phase}")
    return out.strip() if code == 0 else ""
