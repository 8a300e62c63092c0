"""NodeMaintenance on the lab (issue 30): `kubectl apply -k deploy/controller`, then
`kubectl apply -f` of a NodeMaintenance over two nodes; the controller's leader cordons,
drains (drainsafe drain's engine, make before break) and uncordons them one at a time.
The leader SIGKILLed at each seam of its writes, the next one finishing, is
test_maintenance_kills_lab."""

from __future__ import annotations

import asyncio
import pathlib
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import SYSTEM_ROLE, Lab, virtual_deployment

from .guardlab import KUBECTL_DIR, audit_clean, install, kubectl, lab_path_env, ready_pods

pytestmark = pytest.mark.e2e
PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
DEPLOYMENTS = BY_KEY["apps/deployments"]
REPLICAS = 3
NAME = "driver-upgrade"


@pytest.fixture
async def maintenance_lab(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    async with Lab(tmp_path / "lab", nodes=4, gpus_per_node=2, system_nodes=2,
                   propagation_seconds=0.2, restart_backoff=0.5) as lab:
        await install(lab, "--lease-seconds=4", system_nodes=True)
        await lab.wait_established("nodemaintenances.drainsafe.io")
        yield lab


@dataclass
class Seen:
    lowest_ready: int = REPLICAS
    most_cordoned: int = 0
    states: list[list[str]] = field(default_factory=list)


async def _status(lab: Lab) -> dict[str, Any]:
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance", NAME, "-o", "yaml")
    return (yaml.safe_load(out).get("status") or {}) if code == 0 else {}


async def _start(lab: Lab, startup: float) -> list[str]:
    """The workload, then two worker nodes for a NodeMaintenance, those with its pods first
    (3 pods on 4 workers: the first holds some). The controller runs on the system nodes
    (the fixture pins it), so none of its replicas is on them: a leader draining its own
    node is another test's subject."""
    assert lab.control_plane is not None
    store = lab.control_plane.store
    await lab.apply(virtual_deployment("llm", replicas=REPLICAS, startup_seconds=startup,
                                       exit_after_sigterm_seconds=0.5, gpus=1))
    await lab.wait_available("default", "llm", timeout=60)
    workload = {p["spec"].get("nodeName") for p in ready_pods(lab, "llm")}
    workers = sorted(n["metadata"]["name"] for n in store.items(NODES, "")
                     if SYSTEM_ROLE not in n["metadata"].get("labels", {}))
    return sorted(workers, key=lambda n: n not in workload)[:2]


async def _apply(lab: Lab, tmp_path: pathlib.Path, chosen: list[str]) -> None:
    manifest = tmp_path / "maintenance.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "drainsafe.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": NAME},
        "spec": {"nodeNames": chosen, "maxParallelNodes": 1, "uncordon": "Immediately",
                 "reason": "driver upgrade"}}))
    code, out = await kubectl(lab, "1.33", "apply", "-f", str(manifest))
    assert code == 0, out


async def _sample(lab: Lab, chosen: list[str], seen: Seen, stop: asyncio.Event) -> None:
    assert lab.control_plane is not None
    store = lab.control_plane.store
    while not stop.is_set():
        seen.lowest_ready = min(seen.lowest_ready, len(ready_pods(lab, "llm")))
        seen.most_cordoned = max(seen.most_cordoned, sum(
            bool(store.get(NODES, "", n)["spec"].get("unschedulable")) for n in chosen))
        await asyncio.sleep(0.1)


async def _until_finished(lab: Lab, timeout: float = 240) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (status := await _status(lab)).get("phase") not in ("Succeeded", "Failed"):
        assert loop.time() < deadline, f"not finished after {timeout} s: {status}"
        await asyncio.sleep(0.5)
    return status


def _check_finished(lab: Lab, status: dict[str, Any], chosen: list[str], seen: Seen,
                    on_chosen: set[str]) -> None:
    assert lab.control_plane is not None
    store = lab.control_plane.store
    assert status["phase"] == "Succeeded", status
    assert [n["name"] for n in status["nodes"]] == chosen
    assert all(n["state"] == "Uncordoned" for n in status["nodes"]), status["nodes"]
    assert (status["done"], status["total"], status["currentWave"]) == (2, 2, 2)
    for n in chosen:
        assert not store.get(NODES, "", n)["spec"].get("unschedulable"), n
    assert seen.most_cordoned == 1  # maxParallelNodes 1: never both at once
    assert seen.lowest_ready >= REPLICAS, f"Ready fell to {seen.lowest_ready} of {REPLICAS}"
    # drained: the workload's pods that ran there were replaced (make before break), and
    # nothing is left scaled up or recorded as a surge
    assert not on_chosen & {p["metadata"]["uid"] for p in ready_pods(lab, "llm")}
    dep = store.get(DEPLOYMENTS, "default", "llm")
    assert dep["spec"]["replicas"] == REPLICAS
    assert "drainsafe.io/surge" not in (dep["metadata"].get("annotations") or {})


def _on(lab: Lab, chosen: list[str]) -> set[str]:
    return {p["metadata"]["uid"] for p in ready_pods(lab, "llm")
            if p["spec"].get("nodeName") in chosen}


async def test_two_nodes_one_at_a_time_end_uncordoned_and_capacity_never_dips(
        maintenance_lab: Lab, tmp_path: pathlib.Path) -> None:
    lab = maintenance_lab
    chosen = await _start(lab, startup=1.0)
    on_chosen = _on(lab, chosen)
    assert on_chosen, "no workload pod on the chosen nodes: nothing would be drained"
    seen, stop = Seen(), asyncio.Event()
    sampler = asyncio.create_task(_sample(lab, chosen, seen, stop))
    try:
        await _apply(lab, tmp_path, chosen)
        status = await _until_finished(lab)
    finally:
        stop.set()
        await sampler
    _check_finished(lab, status, chosen, seen, on_chosen)
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance")
    assert code == 0, out
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "PHASE", "DONE", "TOTAL", "WAVE", "LOWEST", "AGE"], out
    # make before break: the drains never read the workload below its desired count
    assert row.split()[:6] == [NAME, "Succeeded", "2", "2", "2", "100%"], out
    assert (await audit_clean(lab))["nodes"] == []
