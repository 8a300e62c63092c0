"""Acceptance (issue 29): with the guard installed, a plain `kubectl drain` of a node holding
one pod of a 2-replica StatefulSet (PDB minAvailable 2) is make-before-break.

The guard holds the eviction (429) and surges the StatefulSet 2 -> 3 through the drain's
scale engine; the new ordinal (llm-2) stands in; once it is Available the eviction goes
through the Eviction API, the StatefulSet controller recreates the pod under its name on
another node, and only once that recreation is Ready does the guard restore the recorded
scale, which removes the highest ordinal, the stand-in. Without the guard, the same drain
drops to 1 Ready, so the harness is shown to see the loss.

Real processes throughout, as in test_guard_acceptance: the lab's API server calling the
guard's webhook over HTTPS, its controllers (the StatefulSet controller among them) and
kubelets, two guard replicas installed by `kubectl apply -k deploy/controller`, `drainsafe
serve` in each GPU pod, constant streaming load through the ClusterIP path, the real kubectl
1.27 and 1.33. One GPU per node and 4 nodes: the stand-in and the recreated pod each need a
free GPU while the pod moves.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import time
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from drainsafe.demo.scenario import APP, NAMESPACE, ScenarioSettings, llm_manifests
from drainsafe.kube import KubeClient, TooManyRequests, api_path
from drainsafe.kube.objects import condition, is_ready
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab

from .guardlab import (
    KUBECTL_DIR,
    PODS,
    drain_under_load,
    install,
    kubectl,
    lab_path_env,
    opt_in_namespace,
    ready_pods,
    until,
)

pytestmark = [pytest.mark.e2e]
# Model load 3 s (the suite's scaled-down start-up): the set starts one ordinal at a time
# and the recreation waits a start-up; the stand-in's is inside kubectl's 5 s retry of a
# held eviction either way. The assertions order events by the 0.1 s samples, not by
# the load's length.
SETTINGS = ScenarioSettings(propagation=0.5, drain_delay=1.5, model_load=3, warmup=1.5,
                            kind="StatefulSet", nodes=4, min_available=2)
STATEFULSETS = BY_KEY["apps/statefulsets"]
LEASES = BY_KEY["coordination.k8s.io/leases"]
STAND_IN = f"{APP}-2"


@dataclass
class Moves:
    """What the 0.1 s samples saw of the StatefulSet's pods (times are loop times)."""

    old: str  # the pod on the drained node
    old_uid: str
    stand_in_created: float | None = None
    stand_in_ready: float | None = None
    evicted: float | None = None  # the old pod first seen terminating
    by_eviction_api: bool = False  # its DisruptionTarget condition
    recreated_ready: float | None = None  # a new pod under the old name, Ready
    restored: float | None = None  # spec.replicas back at 2
    most_replicas: int = 0
    terminated: set[str] = field(default_factory=set)  # "name/uid" ever seen terminating

    def sample(self, lab: Lab, now: float) -> None:
        assert lab.control_plane is not None
        store = lab.control_plane.store
        replicas = int(store.get(STATEFULSETS, NAMESPACE, APP)["spec"]["replicas"])
        self.most_replicas = max(self.most_replicas, replicas)
        if replicas == 2 and self.evicted is not None and self.restored is None:
            self.restored = now
        for pod in store.items(PODS, NAMESPACE):
            m = pod["metadata"]
            name, uid = m["name"], m["uid"]
            if m.get("deletionTimestamp"):
                self.terminated.add(f"{name}/{uid}")
            if name == STAND_IN:
                if self.stand_in_created is None:
                    self.stand_in_created = now
                if self.stand_in_ready is None and is_ready(pod):
                    self.stand_in_ready = now
            elif name == self.old and uid == self.old_uid:
                if m.get("deletionTimestamp") and self.evicted is None:
                    self.evicted = now
                if (condition(pod, "DisruptionTarget") or {}).get("status") == "True":
                    self.by_eviction_api = True
            elif name == self.old and self.recreated_ready is None and is_ready(pod) \
                    and not m.get("deletionTimestamp"):
                self.recreated_ready = now


def _statefulset(lab: Lab) -> dict[str, Any]:
    assert lab.control_plane is not None
    return lab.control_plane.store.get(STATEFULSETS, NAMESPACE, APP)


def _restored(lab: Lab) -> bool:
    sts = _statefulset(lab)
    pods = ready_pods(lab, APP)
    names = {p["metadata"]["name"] for p in pods}
    left = [k for obj in (sts, *pods) for k in (obj["metadata"].get("annotations") or {})
            if k.startswith("drainsafe.io/")]
    return int(sts["spec"]["replicas"]) == 2 and not left and names == {f"{APP}-0", f"{APP}-1"}


async def _statefulset_lab(lab: Lab, *install_args: str) -> tuple[str, str, str]:
    """The guard, the opted-in StatefulSet behind its Service: (node, pod, uid) to drain."""
    await install(lab, *install_args)
    await lab.apply(opt_in_namespace(True), *llm_manifests(SETTINGS))
    await until(lambda: len(ready_pods(lab, APP)) == 2, timeout=120, what="2 Ready")
    await lab.wait_backends(NAMESPACE, APP, 2, timeout=60)
    pod = sorted(ready_pods(lab, APP), key=lambda p: p["spec"]["nodeName"])[0]
    return pod["spec"]["nodeName"], pod["metadata"]["name"], pod["metadata"]["uid"]


@pytest.mark.parametrize("version", ["1.27", "1.33"])
async def test_kubectl_drain_of_a_statefulset_keeps_two_ready_with_the_guard_and_drops_without(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    if not (KUBECTL_DIR / f"kubectl.{version}").exists():
        pytest.skip(f"kubectl {version} is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    async with Lab(tmp_path / "lab", nodes=SETTINGS.nodes, gpus_per_node=1,
                   propagation_seconds=SETTINGS.propagation, restart_backoff=0.5) as lab:
        node, old, uid = await _statefulset_lab(lab)
        moves = Moves(old, uid)
        loop = asyncio.get_running_loop()
        run = await drain_under_load(lab, version, node, SETTINGS,
                                     on_sample=lambda now: moves.sample(lab, now))
        assert run.code == 0, run.out
        assert 'admission webhook "guard.drainsafe.io" denied the request: drainsafe guard: ' \
               f"holding the eviction of {NAMESPACE}/{old}" in run.out
        assert min(run.samples) >= 2, run.samples
        assert run.failed == {} and run.ok >= 20, (run.failed, run.ok)

        def settled() -> bool:
            moves.sample(lab, loop.time())
            return _restored(lab) and moves.restored is not None

        await until(settled, timeout=60, what="the scale restored and the record removed")
        # One stand-in ordinal; the pod left through the Eviction API, once, after the
        # stand-in was Ready; the restore came after its recreation was Ready.
        assert moves.most_replicas == 3, moves
        assert moves.by_eviction_api, moves
        assert None not in (moves.stand_in_created, moves.stand_in_ready, moves.evicted,
                            moves.recreated_ready), moves
        assert moves.stand_in_ready is not None and moves.evicted is not None
        assert moves.evicted >= moves.stand_in_ready, moves
        assert moves.restored is not None and moves.recreated_ready is not None
        assert moves.restored >= moves.recreated_ready, moves
        assert {t.split("/")[0] for t in moves.terminated} <= {old, STAND_IN}, moves
        assert sum(t.startswith(f"{old}/") for t in moves.terminated) == 1, moves
        held = moves.evicted - run.started
        startup = moves.stand_in_ready - (moves.stand_in_created or moves.stand_in_ready)
        print(f"kubectl {version} with the guard: lowest Ready {min(run.samples)}, failed "
              f"{sum(run.failed.values())} of {run.ok + sum(run.failed.values())}, eviction "
              f"held {held:.1f} s from the drain's start, stand-in start-up {startup:.1f} s")

        if version != "1.33":
            return  # the comparison without the guard runs once, with the newest kubectl
        # The same drain without the guard (the namespace opted out; the PDB at
        # minAvailable 1 so that an evict-first drain can proceed) drops to 1 Ready.
        code, out = await kubectl(lab, "1.33", "uncordon", node)
        assert code == 0, out
        pdb = next(m for m in llm_manifests(replace(SETTINGS, min_available=1))
                   if m["kind"] == "PodDisruptionBudget")
        await lab.apply(opt_in_namespace(False), pdb)
        other = sorted(p["spec"]["nodeName"] for p in ready_pods(lab, APP))[0]
        run = await drain_under_load(lab, "1.33", other, SETTINGS)
        assert run.code == 0, run.out
        assert "guard.drainsafe.io" not in run.out
        assert min(run.samples) <= 1, run.samples  # capacity lost
        print(f"kubectl 1.33 without the guard: lowest Ready {min(run.samples)}, failed "
              f"{sum(run.failed.values())} of {run.ok + sum(run.failed.values())}")


async def test_leader_killed_mid_hold_the_new_leader_restores_and_never_evicts_twice(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    async with Lab(tmp_path / "lab", nodes=SETTINGS.nodes, gpus_per_node=1,
                   propagation_seconds=0.2, restart_backoff=0.5) as lab:
        node, old, uid = await _statefulset_lab(lab, "--lease-seconds=4")
        code, out = await kubectl(lab, "1.33", "cordon", node)  # as a drainer does first
        assert code == 0, out
        assert lab.control_plane is not None
        store = lab.control_plane.store
        moves = Moves(old, uid)
        loop = asyncio.get_running_loop()
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            with pytest.raises(TooManyRequests):
                await client.evict(NAMESPACE, old, uid=uid)

            def surged() -> bool:
                moves.sample(lab, loop.time())
                return int(_statefulset(lab)["spec"]["replicas"]) == 3

            await until(surged, timeout=30, what="the surge")
            # The leader dies while the stand-in ordinal starts (its model load).
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
            # The drainer keeps retrying, as kubectl drain does, always for the same pod.
            deadline = time.monotonic() + 90
            while True:
                moves.sample(lab, loop.time())
                try:
                    await client.evict(NAMESPACE, old, uid=uid)
                    break
                except TooManyRequests:
                    assert time.monotonic() < deadline, "the eviction was never allowed"
                    await asyncio.sleep(0.5)

        def settled() -> bool:
            moves.sample(lab, loop.time())
            return _restored(lab) and moves.restored is not None

        await until(settled, timeout=60, what="the scale restored and the record removed")
        assert moves.most_replicas == 3, moves  # never a second surge
        assert moves.stand_in_ready is not None and moves.evicted is not None
        assert moves.evicted >= moves.stand_in_ready, moves
        assert moves.restored is not None and moves.recreated_ready is not None
        assert moves.restored >= moves.recreated_ready, moves
        assert sum(t.startswith(f"{old}/") for t in moves.terminated) == 1, moves
        # The restore was another replica's, the new leader's (its Event follows the
        # record's removal, so it is waited for).
        await until(lambda: any(e["reason"] == "SurgeRestored"
                                for e in store.items(BY_KEY["events"], NAMESPACE)),
                    timeout=10, what="the SurgeRestored event")
        restored = [e for e in store.items(BY_KEY["events"], NAMESPACE)
                    if e["reason"] == "SurgeRestored"]
        assert len(restored) == 1 and restored[0]["reportingInstance"] != leader, restored
        assert restored[0]["involvedObject"]["kind"] == "StatefulSet", restored
        assert store.get(LEASES, "drainsafe-system",
                         "drainsafe-controller")["spec"]["holderIdentity"] != leader
