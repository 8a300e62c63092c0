"""Acceptance (issue 14): with the guard installed by `kubectl apply -k deploy/controller`, a
plain `kubectl drain` becomes make-before-break.

Real processes throughout: the lab's API server (calling the guard's webhook through its
Service over HTTPS), controllers and kubelets; two controller replicas as lab pods; the
streaming workload under `drainsafe serve` in each GPU pod; constant streaming load with a
new connection per request through the ClusterIP path; the real kubectl 1.27 and 1.33.
The Ready count is sampled every 0.1 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import time

import pytest

from drainsafe.demo.scenario import APP, NAMESPACE, ScenarioSettings, llm_manifests
from drainsafe.kube import KubeClient, api_path
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event
from drainsafe.lab.cluster import Lab

from .guardlab import (
    KUBECTL_DIR,
    controllers_killed,
    drain_under_load,
    guarded_deployment,
    install,
    kubectl,
    lab_path_env,
    opt_in_namespace,
    pdb,
    ready_pods,
    until,
)

pytestmark = [pytest.mark.e2e]
SETTINGS = ScenarioSettings(propagation=0.5, drain_delay=1.5, model_load=4, warmup=1.5)
DEPLOYMENTS = BY_KEY["apps/deployments"]
LEASES = BY_KEY["coordination.k8s.io/leases"]


def _cordoned(lab: Lab, node: str) -> bool:
    assert lab.control_plane is not None
    obj = lab.control_plane.store.get(BY_KEY["nodes"], "", node)
    return bool((obj.get("spec") or {}).get("unschedulable"))


def _scale_and_record(lab: Lab, name: str = APP) -> tuple[int, bool]:
    assert lab.control_plane is not None
    dep = lab.control_plane.store.get(DEPLOYMENTS, NAMESPACE, name)
    annotations = dep["metadata"].get("annotations") or {}
    return int(dep["spec"]["replicas"]), "drainsafe.io/surge" in annotations


@pytest.mark.parametrize("version", ["1.27", "1.33"])
async def test_kubectl_drain_keeps_two_ready_with_the_guard_and_drops_without(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    if not (KUBECTL_DIR / f"kubectl.{version}").exists():
        pytest.skip(f"kubectl {version} is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    async with Lab(tmp_path / "lab", nodes=3, gpus_per_node=1,
                   propagation_seconds=SETTINGS.propagation, restart_backoff=0.5) as lab:
        await install(lab)
        await lab.apply(opt_in_namespace(True), *llm_manifests(SETTINGS))
        await lab.wait_available(NAMESPACE, APP, timeout=120)
        await lab.wait_backends(NAMESPACE, APP, 2, timeout=60)
        node = sorted(p["spec"]["nodeName"] for p in ready_pods(lab, APP))[0]

        run = await drain_under_load(lab, version, node, SETTINGS)
        code, out, samples, failed, ok = run.code, run.out, run.samples, run.failed, run.ok
        assert code == 0, out
        assert 'admission webhook "guard.drainsafe.io" denied the request: drainsafe guard: ' \
               "holding the eviction of default/" in out
        assert min(samples) >= 2, samples
        assert failed == {} and ok >= 20, (failed, ok)
        await until(lambda: _scale_and_record(lab) == (2, False), timeout=30,
                    what="the scale restored and the record removed")
        # The drain evicted a controller replica too: it exited after SIGTERM, not killed.
        assert controllers_killed(lab) == []

        if version != "1.33":
            return  # the comparison without the guard runs once, with the newest kubectl
        # The same drain without the guard (the namespace opted out) drops to 1 Ready.
        code, out = await kubectl(lab, "1.33", "uncordon", node)
        assert code == 0, out
        await lab.apply(opt_in_namespace(False))
        other = sorted(p["spec"]["nodeName"] for p in ready_pods(lab, APP))[0]
        run = await drain_under_load(lab, version, other, SETTINGS)
        code, out, samples = run.code, run.out, run.samples
        assert code == 0, out
        assert "guard.drainsafe.io" not in out
        assert min(samples) <= 1, samples  # capacity lost (0 when the survivor misses a probe)
        # Nor any replica the second drain evicted.
        assert controllers_killed(lab) == []


async def test_leader_killed_mid_hold_another_replica_finishes(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    async with Lab(tmp_path / "lab", nodes=3, gpus_per_node=1, propagation_seconds=0.2,
                   restart_backoff=0.5) as lab:
        await install(lab, "--lease-seconds=4")
        # A stand-in that takes 8 s to start: the leader dies while it starts.
        await lab.apply(guarded_deployment(replicas=2, startup=8.0), pdb())
        await lab.wait_available(NAMESPACE, "llm", timeout=60)
        assert lab.control_plane is not None
        store = lab.control_plane.store
        victim = ready_pods(lab, "llm")[0]["metadata"]["name"]
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            from drainsafe.kube import TooManyRequests

            with pytest.raises(TooManyRequests):
                await client.evict(NAMESPACE, victim, uid=None)
            await until(lambda: int(store.get(DEPLOYMENTS, NAMESPACE, "llm")["spec"]
                                    ["replicas"]) == 3, timeout=20, what="the surge")
            leader = store.get(LEASES, "drainsafe-system",
                               "drainsafe-controller")["spec"]["holderIdentity"]
            assert lab.nodes is not None
            worker = lab.nodes.worker("drainsafe-system", leader)
            assert worker is not None
            pid = next(c.process.pid for c in worker.containers if c.process is not None)
            assert pid is not None
            os.killpg(pid, signal.SIGKILL)
            await client.request("DELETE", api_path("v1", "pods", namespace="drainsafe-system",
                                                    name=leader),
                                 params={"gracePeriodSeconds": "0"})
            # The drainer keeps retrying, as kubectl drain does.
            deadline = time.monotonic() + 60
            while True:
                try:
                    await client.evict(NAMESPACE, victim, uid=None)
                    break
                except TooManyRequests:
                    assert time.monotonic() < deadline, "the eviction was never allowed"
                    await asyncio.sleep(1)
            await until(lambda: len(ready_pods(lab, "llm")) >= 2, timeout=30, what="2 Ready")
        await until(lambda: _scale_and_record(lab, "llm") == (2, False), timeout=30,
                    what="nothing left scaled up")
        # The restore was made by another replica, the new leader. Its Event is written after
        # the record is removed, so it is waited for, not read at once.
        await until(lambda: any(e["reason"] == "SurgeRestored"
                                for e in store.items(BY_KEY["events"], NAMESPACE)),
                    timeout=10, what="the SurgeRestored event")
        restored = [e for e in store.items(BY_KEY["events"], NAMESPACE)
                    if e["reason"] == "SurgeRestored"]
        assert restored and all(e["reportingInstance"] != leader for e in restored)
        assert store.get(LEASES, "drainsafe-system",
                         "drainsafe-controller")["spec"]["holderIdentity"] != leader


async def test_drainsafe_drain_and_kubectl_drain_at_once_never_surge_twice(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    async with Lab(tmp_path / "lab", nodes=4, gpus_per_node=1, propagation_seconds=0.2,
                   restart_backoff=0.5) as lab:
        await install(lab)
        await lab.apply(guarded_deployment(replicas=2, startup=2.0), pdb())
        await lab.wait_available(NAMESPACE, "llm", timeout=60)
        first, second = sorted(p["spec"]["nodeName"] for p in ready_pods(lab, "llm"))
        scales: list[int] = []
        ready: list[int] = []
        # Every change of the Deployment: its scale and whose surge record it carries.
        owners: list[tuple[int, bool | None]] = []
        stop = asyncio.Event()

        def changed(event: Event) -> None:
            obj = event.obj
            if event.resource == DEPLOYMENTS.key and obj["metadata"]["name"] == "llm":
                raw = (obj["metadata"].get("annotations") or {}).get("drainsafe.io/surge")
                owners.append((int(obj["spec"]["replicas"]),
                               None if raw is None else bool(json.loads(raw).get("guard"))))

        assert lab.control_plane is not None
        unlisten = lab.control_plane.store.listen(changed)

        async def sample() -> None:
            while not stop.is_set():
                scales.append(_scale_and_record(lab, "llm")[0])
                ready.append(len(ready_pods(lab, "llm")))
                await asyncio.sleep(0.1)

        async def drainsafe_drain() -> tuple[int, str]:
            proc = await asyncio.create_subprocess_exec(
                "drainsafe", "drain", first, "--delete-emptydir-data", "--timeout=120",
                env={**os.environ, "KUBECONFIG": str(lab.kubeconfig)},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
            out, _ = await proc.communicate()
            return int(proc.returncode or 0), out.decode()

        sampler = asyncio.ensure_future(sample())
        (code, out), (ours, ours_out) = await asyncio.gather(
            kubectl(lab, "1.33", "drain", second, "--ignore-daemonsets",
                    "--delete-emptydir-data", "--timeout=120s", timeout=150),
            drainsafe_drain())
        assert code == 0, out
        # Whichever recorded its surge first, the other waited for it: drainsafe drain for
        # the guard's restore, the guard (holding kubectl's eviction) for the drain's.
        if ours != 0:
            # Or drainsafe drain planned while the guard's stand-in and the ReplicaSet's
            # replacement for kubectl's evicted pod held both free GPUs: refused up front
            # for room, with nothing changed (no cordon, no record); it goes ahead once
            # the guard is done.
            assert "no other schedulable node has room" in ours_out, ours_out
            assert not _cordoned(lab, first)
            await until(lambda: _scale_and_record(lab, "llm") == (2, False), timeout=30,
                        what="the guard's surge restored")
            ours, ours_out = await drainsafe_drain()
        assert ours == 0, ours_out
        await until(lambda: _scale_and_record(lab, "llm") == (2, False), timeout=30,
                    what="the scale restored and every record removed")
        stop.set()
        await sampler
        unlisten()
        # Never a surge on top of another drainer's, and drainsafe drain never stands down
        # to evict through the guard: the guard's scale (or its restore) not yet synced by
        # the deployment controller is no rollout (kube.objects.rollout_in_progress), so
        # drainsafe drain surged under its own record once the guard had restored. One
        # stand-in at a time, whoever's, in every change of the Deployment.
        assert max(n for n, _ in owners) <= 3, owners
        assert max(scales) <= 3, scales
        assert "held by the eviction guard" not in ours_out, (owners, ours_out)
        assert min(ready) >= 2, ready


async def test_an_hpa_managed_workload_is_surged_through_min_replicas_and_restored(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    hpas = BY_KEY["autoscaling/horizontalpodautoscalers"]
    async with Lab(tmp_path / "lab", nodes=3, gpus_per_node=1, propagation_seconds=0.2,
                   restart_backoff=0.5) as lab:
        await install(lab)
        await lab.apply(guarded_deployment(replicas=2, startup=2.0), pdb(), {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "llm", "namespace": NAMESPACE},
            "spec": {"minReplicas": 2, "maxReplicas": 2, "scaleTargetRef": {
                "apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"}}})
        await lab.wait_available(NAMESPACE, "llm", timeout=60)
        assert lab.control_plane is not None
        store = lab.control_plane.store
        victim = ready_pods(lab, "llm")[0]["metadata"]["name"]
        bounds: list[tuple[int, int]] = []
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            from drainsafe.kube import TooManyRequests

            deadline = time.monotonic() + 60
            while True:
                spec = store.get(hpas, NAMESPACE, "llm")["spec"]
                bounds.append((int(spec["minReplicas"]), int(spec["maxReplicas"])))
                try:
                    await client.evict(NAMESPACE, victim, uid=None)
                    break
                except TooManyRequests:
                    assert time.monotonic() < deadline, "the eviction was never allowed"
                    await asyncio.sleep(0.5)
        # The HPA's bounds were raised for the stand-in (an HPA takes a plain scale back)...
        assert max(b[0] for b in bounds) == 3, bounds
        # ... and come back exactly, with the scale, once the eviction is done.
        await until(lambda: _scale_and_record(lab, "llm") == (2, False), timeout=30,
                    what="the scale restored")
        spec = store.get(hpas, NAMESPACE, "llm")["spec"]
        assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 2)
        assert len(ready_pods(lab, "llm")) >= 2
