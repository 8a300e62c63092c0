"""A NodeMaintenance shares a Deployment's surge (issue 30): the controller's leader drains
two nodes at once (maxParallelNodes 2) that each run a pod of one Deployment; both nodes'
parts of its surge are recorded at once and the scale reaches base + 2 (sampled from the
lab's store every 0.1 s, so the test proves the overlap), Ready never below desired, the
operation Succeeded, the scale back at base with no record. Before the shared surge, the
second node waited for the first's surge (WaitingForSurge)."""

from __future__ import annotations

import asyncio
import pathlib

import yaml

from drainsafe.drain import ownership
from drainsafe.lab.cluster import Lab, virtual_deployment

from .guardlab import audit_clean, kubectl, ready_pods
from .test_maintenance_lab import (
    DEPLOYMENTS,
    NAME,
    NODES,
    PODS,
    _until_finished,
    maintenance_lab,
)

__all__ = ["maintenance_lab"]  # the fixture, used by name


async def test_two_nodes_at_once_share_one_deployments_surge(
        maintenance_lab: Lab, tmp_path: pathlib.Path) -> None:
    lab = maintenance_lab
    assert lab.control_plane is not None
    store = lab.control_plane.store
    controllers = {p["spec"].get("nodeName") for p in store.items(PODS, "drainsafe-system")}
    names = sorted(n["metadata"]["name"] for n in store.items(NODES, ""))
    chosen = [n for n in names if n not in controllers][:2]
    assert len(chosen) == 2, controllers
    # One pod of 2 GPUs on each chosen node (the others cordoned meanwhile): the others
    # keep room for both stand-ins.
    others = [n for n in names if n not in chosen]
    code, out = await kubectl(lab, "1.33", "cordon", *others)
    assert code == 0, out
    await lab.apply(virtual_deployment("llm", replicas=2, startup_seconds=1.0,
                                       exit_after_sigterm_seconds=0.5, gpus=2))
    await lab.wait_available("default", "llm", timeout=60)
    code, out = await kubectl(lab, "1.33", "uncordon", *others)
    assert code == 0, out
    assert sorted(p["spec"]["nodeName"] for p in ready_pods(lab, "llm")) == chosen

    manifest = tmp_path / "maintenance.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "drainsafe.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": NAME},
        "spec": {"nodeNames": chosen, "maxParallelNodes": 2, "uncordon": "Immediately"}}))
    lowest, rows = 2, []
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal lowest
        while not stop.is_set():
            lowest = min(lowest, len(ready_pods(lab, "llm")))
            dep = store.get(DEPLOYMENTS, "default", "llm")
            record = ownership.SurgeRecord.of(dep)
            rows.append((dep["spec"]["replicas"], () if record is None else record.nodes))
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    try:
        code, out = await kubectl(lab, "1.33", "apply", "-f", str(manifest))
        assert code == 0, out
        status = await _until_finished(lab, timeout=60)
    finally:
        stop.set()
        await sampler
    assert status["phase"] == "Succeeded", status
    assert lowest >= 2, f"Ready fell to {lowest} of 2"
    assert max(len(nodes) for _, nodes in rows) == 2, rows
    assert max(r for r, nodes in rows if len(nodes) == 2) == 4, rows
    dep = store.get(DEPLOYMENTS, "default", "llm")
    assert dep["spec"]["replicas"] == 2
    assert ownership.SURGE not in (dep["metadata"].get("annotations") or {})
    assert (await audit_clean(lab))["nodes"] == []
