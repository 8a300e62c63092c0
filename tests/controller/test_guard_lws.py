"""Acceptance (issue 29): with the guard installed, a plain `kubectl drain` of a node holding
a worker of a LeaderWorkerSet (2 groups of 2, one GPU per pod) keeps 2 whole groups Ready.

The guard holds the worker's eviction (429) and surges the LWS 2 -> 3 groups through the
engine `drainsafe drain` uses (drain.scale, drain.groups); the stand-in group (llm-2,
llm-2-1) starts; once it is whole Ready the eviction goes through the Eviction API, lws
takes the worker's group down and recreates it (restartPolicy RecreateGroupOnPodRestart,
kubernetes-sigs/lws v0.10.0 pkg/controllers/pod_controller.go handleRestartPolicy), and
only once that group is whole Ready again does the guard restore the recorded 2 groups,
which removes the highest group, the stand-in (leaderworkerset_controller.go). The guard's
leader killed mid-hold: the next one scales to the same 3 groups, never more, and restores
exactly. Without the guard, the same harness (demo.scenario.run_drain_under_load) sees a
real kubectl drain drop to 1 Ready group: tests/drain/test_group_drain.py asserts it.

One lab for the module (7 nodes of one GPU: the 2 groups take 4, the stand-in group 2, the
recreated worker 1), the guard by `kubectl apply -k deploy/controller` (2 replicas, Lease
of 4 s), `drainsafe serve` in each pod, streaming load through the leaders' Service
(demo.scenario.run_drain_under_load: whole Ready groups every 0.1 s and at each change).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
import pytest_asyncio

from drainsafe.demo.scenario import (
    APP,
    NAMESPACE,
    ScenarioResult,
    ScenarioSettings,
    llm_manifests,
    run_drain_under_load,
    service_name,
)
from drainsafe.drain.cordon import uncordon
from drainsafe.kube import KubeClient, TooManyRequests, api_path
from drainsafe.kube.objects import LWS_WORKER_INDEX_LABEL, lws_ready_groups
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab

from .guardlab import KUBECTL_DIR, PODS, install, lab_path_env, opt_in_namespace, until

# The module's lab starts within its first test's time limit.
pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.timeout(240)]
SETTINGS = ScenarioSettings(propagation=0.5, drain_delay=1.0, model_load=3, warmup=1.0,
                            kind="LeaderWorkerSet", group_size=2, nodes=7, guarded=True)
LEASES = BY_KEY["coordination.k8s.io/leases"]
# kubectl drain of the LWS's pods only: a guard replica on the node would be evicted too,
# and the lab's guard pod takes its whole grace period (30 s) to go, which is not what
# these tests measure.
ONLY_THE_LWS = (f"--pod-selector=app={APP}",)
EVENTS = BY_KEY["events"]


def _kubectl(version: str) -> str:
    binary = KUBECTL_DIR / f"kubectl.{version}"
    if not binary.exists():
        pytest.skip(f"kubectl {version} is not installed")
    return str(binary)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lab(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Lab]:
    _kubectl("1.33")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", lab_path_env())
        async with Lab(tmp_path_factory.mktemp("lwsguard") / "lab", nodes=SETTINGS.nodes,
                       gpus_per_node=1, propagation_seconds=SETTINGS.propagation,
                       restart_backoff=0.5) as lab:
            # The CRD first: the guard watches leaderworkersets when they are served.
            await lab.install_leaderworkerset()
            await install(lab, "--lease-seconds=4")
            await lab.apply(opt_in_namespace(True), *llm_manifests(SETTINGS))
            await until(lambda: sorted(lws_ready_groups(_app_pods(lab), 2)) == [0, 1],
                        timeout=60, what="2 Ready groups")
            await lab.wait_backends(NAMESPACE, service_name(SETTINGS), 2, timeout=60)
            yield lab


def _store(lab: Lab) -> Any:
    assert lab.control_plane is not None
    return lab.control_plane.store


def _lws(lab: Lab) -> dict[str, Any]:
    store = _store(lab)
    rt = store.catalog.lookup("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
    return dict(store.get(rt, NAMESPACE, APP))


def _app_pods(lab: Lab) -> list[dict[str, Any]]:
    return [p for p in _store(lab).items(PODS, NAMESPACE)
            if (p["metadata"].get("labels") or {}).get("app") == APP]


def _events(lab: Lab, reason: str) -> list[dict[str, Any]]:
    return [e for e in _store(lab).items(EVENTS, NAMESPACE) if e["reason"] == reason]


def _settled(lab: Lab, node: str) -> bool:
    """Restored: 2 groups recorded nowhere, groups 0 and 1 whole Ready off `node`, the
    stand-in group gone, no drainsafe annotation on the LWS or its pods."""
    lws = _lws(lab)
    pods = _app_pods(lab)
    notes = [k for obj in (lws, *pods) for k in (obj["metadata"].get("annotations") or {})
             if k.startswith("drainsafe.io/")]
    names = {p["metadata"]["name"] for p in pods}
    return (int(lws["spec"]["replicas"]) == 2 and not notes
            and names == {f"{APP}-0", f"{APP}-0-1", f"{APP}-1", f"{APP}-1-1"}
            and sorted(lws_ready_groups(pods, 2)) == [0, 1]
            and all(p["spec"].get("nodeName") != node for p in pods))


async def _reset(lab: Lab, node: str) -> None:
    await until(lambda: _settled(lab, node), timeout=60, what="the surge restored")
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        await uncordon(client, node, force=True)


def _report(label: str, r: ScenarioResult) -> None:
    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} s"

    bound = (f" (bound {s(r.lower_bound_seconds)} = group start-up {SETTINGS.model_load} "
             f"+ drain delay {SETTINGS.drain_delay})") if r.lower_bound_seconds else ""
    print(f"\n{label}: lowest Ready groups {r.lowest_ready}/2 ({r.samples} samples), ok "
          f"{r.ok} failed {r.total_failed} truncated {r.truncated}, worker gone after "
          f"{s(r.empty_seconds)}{bound}, group start-up {s(r.startup_seconds)}, command "
          f"{s(r.command_seconds)}, below 2 groups {s(r.seconds_below_desired)}")


async def _budget(lab: Lab, spec: dict[str, Any]) -> None:
    """Set the PDB's spec (a merge patch: the other field cleared)."""
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        await client.patch(api_path("policy/v1", "poddisruptionbudgets", namespace=NAMESPACE,
                                    name=APP), {"spec": spec})


async def test_the_leader_killed_mid_hold_the_next_restores_exactly(lab: Lab) -> None:
    """Runs first, on the lab as the fixture left it (the guard's caches settled). The
    PDB at minAvailable 4 pods: while the killed leader is still an endpoint of the
    webhook's Service, a review that cannot reach it fails open (failurePolicy Ignore) and
    only the budget stands; with 4 pods it lets none go before the stand-in group."""
    await _budget(lab, {"maxUnavailable": None, "minAvailable": 4})
    try:
        await _leader_killed_mid_hold(lab)
    finally:
        await _budget(lab, {"minAvailable": None, "maxUnavailable": 2})


async def _leader_killed_mid_hold(lab: Lab) -> None:
    store = _store(lab)
    pods = [p for p in _app_pods(lab)
            if (p["metadata"].get("labels") or {}).get(LWS_WORKER_INDEX_LABEL) == "1"]
    worker = sorted(pods, key=lambda p: p["spec"]["nodeName"])[0]
    node, name, uid = worker["spec"]["nodeName"], worker["metadata"]["name"], \
        worker["metadata"]["uid"]
    restores = len(_events(lab, "SurgeRestored"))
    most = 0
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        await client.patch(api_path("v1", "nodes", name=node), {"spec": {"unschedulable": True}})
        with pytest.raises(TooManyRequests):
            await client.evict(NAMESPACE, name, uid=uid)
        await until(lambda: int(_lws(lab)["spec"]["replicas"]) == 3, timeout=30,
                    what="the surge to 3 groups")
        # The leader dies while the stand-in group loads its model.
        leader = store.get(LEASES, "drainsafe-system",
                           "drainsafe-controller")["spec"]["holderIdentity"]
        assert lab.nodes is not None
        guard = lab.nodes.worker("drainsafe-system", leader)
        assert guard is not None
        pid = next(c.process.pid for c in guard.containers if c.process is not None)
        os.killpg(pid, signal.SIGKILL)
        await client.request("DELETE", api_path("v1", "pods", namespace="drainsafe-system",
                                                name=leader),
                             params={"gracePeriodSeconds": "0"})
        # The drainer keeps asking, as kubectl drain does, for the same pod.
        deadline = time.monotonic() + 90
        while True:
            most = max(most, int(_lws(lab)["spec"]["replicas"]))
            try:
                await client.evict(NAMESPACE, name, uid=uid)
                break
            except TooManyRequests:
                assert time.monotonic() < deadline, "the eviction was never allowed"
                await asyncio.sleep(0.5)
        # Allowed only once a stand-in group was whole Ready.
        assert 2 in lws_ready_groups(_app_pods(lab), 2), \
            "evicted before the stand-in group was Ready"

        def watched() -> bool:
            nonlocal most
            most = max(most, int(_lws(lab)["spec"]["replicas"]))
            return _settled(lab, node)

        await until(watched, timeout=90, what="the restore by the next leader")
        await uncordon(client, node, force=True)
    assert most == 3  # never a second surge on top
    done = _events(lab, "SurgeRestored")[restores:]
    assert len(done) == 1 and done[0]["reportingInstance"] != leader, done
    assert done[0]["involvedObject"]["kind"] == "LeaderWorkerSet"


@pytest.mark.parametrize(("version", "min_available"), [("1.33", None), ("1.27", 4)])
async def test_kubectl_drain_keeps_two_groups_ready_with_the_guard(
        lab: Lab, version: str, min_available: int | None) -> None:
    """1.27 under a PDB of minAvailable 4 pods over the 2 groups, which alone lets no pod
    go: with the stand-in group it lets one whole group go, and the guard waits for that."""
    surges = len(_events(lab, "SurgeForEviction"))
    if min_available is not None:
        await _budget(lab, {"maxUnavailable": None, "minAvailable": min_available})
    try:
        r = await run_drain_under_load(lab, "kubectl",
                                       replace(SETTINGS, min_available=min_available),
                                       kubectl=_kubectl(version), kubectl_args=ONLY_THE_LWS)
    finally:
        if min_available is not None:
            await _budget(lab, {"minAvailable": None, "maxUnavailable": 2})
    _report(f"kubectl {version} with the guard, PDB "
            f"{'maxUnavailable 2' if min_available is None else f'minAvailable {min_available}'}",
            r)
    assert r.exit_code == 0, r.detail
    assert r.samples >= 20 and r.lowest_ready >= 2, r.to_dict()
    assert r.failed == {} and r.truncated == 0 and r.ok >= 20, r.to_dict()
    # The worker left through the Eviction API, after the stand-in group's start-up and
    # the hold (kubectl retries a 429 every 5 s).
    assert r.old_pods and r.evicted_by_api == sorted(r.old_pods), r.to_dict()
    assert r.empty_seconds is not None and r.empty_seconds >= r.lower_bound_seconds, \
        r.to_dict()
    await _reset(lab, r.node)
    assert r.replicas_after in (2, 3)  # read as the drain ended; the restore follows
    # One surge for this drain (one stand-in group, 2 -> 3), restored by the guard.
    held = _events(lab, "SurgeForEviction")[surges:]
    assert len(held) == 1 and "2 -> 3 for a stand-in of group" in held[0]["message"], held
    assert held[0]["involvedObject"]["kind"] == "LeaderWorkerSet"
