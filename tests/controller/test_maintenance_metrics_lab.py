"""The alert rules on series the controller really exported in a lab run (issue 30).

`kubectl apply -k deploy/controller`; a NodeMaintenance with `uncordon: Never` leaves its
node cordoned, one that selects nothing fails, a `drainsafe drain` interrupted (SIGINT)
right after its scale-up leaves its node cordoned and its workload scaled up, and
`kubectl cordon` leaves a cordon with no record. Both replicas' /metrics are scraped over
HTTP; `drainsafe audit` reports the same nodes and workloads; promtool fires each alert
after its threshold on those series. Then everything is given back and the healthy
scrape fires none."""

from __future__ import annotations

import asyncio
import json
import math
import pathlib
import signal
import sys
import time
from typing import Any

import httpx
import pytest
import yaml

from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import SYSTEM_ROLE, Lab, virtual_deployment

from .guardlab import KUBECTL_DIR, install, kubectl, lab_path_env, ready_pods, until
from .promrules import Expect, Sample, drainsafe_samples, run_promtool

pytestmark = pytest.mark.e2e
PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
DEPLOYMENTS = BY_KEY["apps/deployments"]


def fires_at(age: float, threshold: float, for_minutes: int) -> int:
    """The first test minute the alert fires: the condition first holds at the first
    minute m with m*60 + age > threshold (1 min evaluations), then `for` more."""
    return max(0, math.floor((threshold - age) / 60) + 1) + for_minutes


async def _scrape(lab: Lab) -> tuple[list[Sample], float]:
    assert lab.control_plane is not None
    samples: list[Sample] = []
    async with httpx.AsyncClient(timeout=10) as client:
        wall = float(math.floor(time.time()))
        for pod in lab.control_plane.store.items(PODS, "drainsafe-system"):
            ip = pod["status"]["podIP"]
            text = (await client.get(f"http://{ip}:9090/metrics")).text
            samples += drainsafe_samples(text, instance=f"{ip}:9090")
    return samples, wall


async def _drainsafe(lab: Lab, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", *args, "--kubeconfig", str(lab.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return int(proc.returncode or 0), out.decode()


async def _apply(lab: Lab, tmp: pathlib.Path, name: str, spec: dict[str, Any]) -> None:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "drainsafe.io/v1alpha1",
                                    "kind": "NodeMaintenance", "metadata": {"name": name},
                                    "spec": spec}))
    code, out = await kubectl(lab, "1.33", "apply", "-f", str(path))
    assert code == 0, out


async def _phase(lab: Lab, name: str) -> str:
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance", name, "-o", "yaml")
    return str((yaml.safe_load(out).get("status") or {}).get("phase")) if code == 0 else ""


async def _until_phase(lab: Lab, name: str, phase: str) -> None:
    for _ in range(240):
        if await _phase(lab, name) == phase:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{name} not {phase}: {await _phase(lab, name)}")


def _by(samples: list[Sample], metric: str, *keys: str) -> set[tuple[str, ...]]:
    return {tuple(s.labels[k] for k in keys) for s in samples if s.name == metric}


async def test_alerts_fire_on_what_the_controller_exported(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    async with Lab(tmp_path / "lab", nodes=4, gpus_per_node=0, system_nodes=2,
                   propagation_seconds=0.2, restart_backoff=0.5) as lab:
        await install(lab, system_nodes=True)
        await lab.wait_established("nodemaintenances.drainsafe.io")
        assert lab.control_plane is not None
        store = lab.control_plane.store
        # A 3 s start-up: the window in which the interrupted drain below waits for its
        # stand-in (SIGINT is sent as soon as the scale-up is seen, within a 0.05 s poll).
        await lab.apply(virtual_deployment("llm", replicas=3, startup_seconds=3.0,
                                           exit_after_sigterm_seconds=0.5))
        await lab.wait_available("default", "llm", timeout=60)
        # The controller on the system nodes (pinned), the workload on the 4 workers: 3 pods,
        # so a worker with one to drain and one without, whatever the scheduler's scores.
        workload = {p["spec"].get("nodeName") for p in ready_pods(lab, "llm")}
        workers = sorted(n["metadata"]["name"] for n in store.items(NODES, "")
                         if SYSTEM_ROLE not in n["metadata"].get("labels", {}))
        drained = next(n for n in workers if n in workload)
        kept = next(n for n in workers if n not in workload)
        other = next(n for n in workers if n not in (drained, kept))

        # 1. A NodeMaintenance leaves its node cordoned (Never); another fails (NoNodes).
        await _apply(lab, tmp_path, "keep", {"nodeNames": [kept], "uncordon": "Never"})
        await _apply(lab, tmp_path, "nothing",
                     {"nodeSelector": {"matchLabels": {"pool": "none"}}})
        await _until_phase(lab, "nothing", "Failed")
        await _until_phase(lab, "keep", "Succeeded")
        # 2. drainsafe drain interrupted right after its scale-up.
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "drainsafe", "drain", drained, "--kubeconfig",
            str(lab.kubeconfig), stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL)
        await until(lambda: store.get(DEPLOYMENTS, "default", "llm")["spec"]["replicas"] > 3,
                    timeout=60, what="the drain's scale-up")
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 60) == 130
        # 3. A cordon with no record.
        code, out = await kubectl(lab, "1.33", "cordon", other)
        assert code == 0, out

        def exported(samples: list[Sample]) -> bool:
            return len(_by(samples, "drainsafe_node_cordoned", "node")) == 3 and bool(
                _by(samples, "drainsafe_surge_active", "name"))

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not exported((scraped := await _scrape(lab))[0]):
            assert loop.time() < deadline, scraped[0]
            await asyncio.sleep(0.5)
        samples, wall = scraped
        cordons = _by(samples, "drainsafe_node_cordoned", "node", "by", "nodemaintenance")
        assert cordons == {(drained, "drain", ""), (kept, "nodemaintenance", "keep"),
                           (other, "other", "")}, cordons
        surges = _by(samples, "drainsafe_surge_active", "kind", "namespace", "name", "node",
                     "by")
        assert surges == {("Deployment", "default", "llm", drained, "drain")}, surges
        # drainsafe audit reads the same facts.
        code, out = await _drainsafe(lab, "audit", "-o", "json")
        audit = json.loads(out)
        assert code == 1
        assert {n["node"] for n in audit["nodes"]} == {c[0] for c in cordons}
        assert {(s["workload"], s["node"]) for s in audit["scaled_up"]} == {
            ("Deployment/default/llm", drained)}

        since = {s.labels["node"]: s.value for s in samples
                 if s.name == "drainsafe_node_cordoned_since_seconds"}
        surge_since = max(s.value for s in samples
                          if s.name == "drainsafe_surge_since_seconds")
        fire = {n: fires_at(wall - at, 7200, 5) for n, at in since.items()}
        surge_fire = fires_at(wall - surge_since, 3600, 5)
        both = max(fire.values()) + 1
        expects = [
            Expect(min(fire.values()) - 1, "DrainsafeCordonTooOld"),
            Expect(both, "DrainsafeCordonTooOld", (
                {"node": drained, "by": "drain", "nodemaintenance": ""},
                {"node": kept, "by": "nodemaintenance", "nodemaintenance": "keep"})),
            Expect(119, "DrainsafeCordonUnrecorded"),
            Expect(121, "DrainsafeCordonUnrecorded", ({"node": other},)),
            Expect(surge_fire - 1, "DrainsafeSurgeLeftInPlace"),
            Expect(surge_fire + 1, "DrainsafeSurgeLeftInPlace", (
                {"namespace": "default", "kind": "Deployment", "name": "llm",
                 "node": drained, "by": "drain", "nodemaintenance": ""},)),
            Expect(4, "DrainsafeNodeMaintenanceFailed"),
            Expect(6, "DrainsafeNodeMaintenanceFailed", ({"name": "nothing"},)),
        ]
        (tmp_path / "left").mkdir()
        done = run_promtool(tmp_path / "left", samples, wall, expects)
        print(done.stdout, done.stderr)
        assert done.returncode == 0, done.stdout + done.stderr

        # Healthy: everything given back; the healthy scrape fires nothing.
        for node in (drained, kept):
            code, out = await _drainsafe(lab, "uncordon", node)
            assert code == 0, out
        code, out = await kubectl(lab, "1.33", "uncordon", other)
        assert code == 0, out
        code, out = await kubectl(lab, "1.33", "delete", "nodemaintenance", "nothing")
        assert code == 0, out
        deadline = loop.time() + 30
        while (healthy := await _scrape(lab))[0] and any(
                s.name in ("drainsafe_node_cordoned", "drainsafe_surge_active")
                or s.labels.get("name") == "nothing" for s in healthy[0]):
            assert loop.time() < deadline, healthy[0]
            await asyncio.sleep(0.5)
        assert _by(healthy[0], "drainsafe_nodemaintenance_phase", "name") == {("keep",)}
        code, _ = await _drainsafe(lab, "audit")
        assert code == 0
        alerts = ("DrainsafeCordonTooOld", "DrainsafeCordonUnrecorded",
                  "DrainsafeSurgeLeftInPlace", "DrainsafeNodeMaintenanceFailed")
        (tmp_path / "healthy").mkdir()
        done = run_promtool(tmp_path / "healthy", healthy[0], healthy[1],
                            [Expect(m, a) for a in alerts for m in (10, 130, 240)])
        print(done.stdout, done.stderr)
        assert done.returncode == 0, done.stdout + done.stderr
