"""LeaderWorkerSet groups drained make before break (issue 29), under constant streaming load.

An LWS of 2 groups of 2 pods (a leader and a worker, one GPU each), every pod running
`drainsafe serve`, a ClusterIP Service over the leaders, a PDB over all four pods.
`drainsafe drain` of a node holding a worker: a third group (llm-2, llm-2-1) stands in,
the worker leaves through the Eviction API, lws takes its whole group down and recreates
it (restartPolicy RecreateGroupOnPodRestart, kubernetes-sigs/lws v0.10.0
pkg/controllers/pod_controller.go), and once it is Ready elsewhere the recorded 2 groups
are restored and lws removes the highest group, the stand-in. 2 whole groups stay Ready at
every 0.1 s sample and at every change, no request fails or is cut short, nothing of
drainsafe's is left on the LWS. `drainsafe drain --strategy evict` of a worker's node in
the same lab, and then a real `kubectl drain` of another, drop to 1 Ready group while the
group is recreated: the harness sees it.

7 nodes of one GPU each: the 2 groups take 4; while a worker moves, the stand-in group
takes 2 and the worker's recreation 1 (its leader's recreation takes the node the old
leader frees). With 6 nodes the plan refuses for room (tests/drain/test_group_plan.py).

Real processes: the lab's API server, scheduler, controllers (the StatefulSet controller
and the lab's LWS controller) and kubelets; `drainsafe serve` in each pod; streaming load
from a child process through the ClusterIP path with a propagation delay.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from drainsafe.demo.scenario import (
    APP,
    NAMESPACE,
    ScenarioResult,
    ScenarioSettings,
    kubectl_binary,
    run_drain_under_load,
)
from drainsafe.drain.cordon import uncordon
from drainsafe.kube import Informer, KubeClient, api_path

from .labkit import gpu_lab

pytestmark = pytest.mark.e2e

SETTINGS = ScenarioSettings(propagation=0.5, drain_delay=1.5, model_load=3, warmup=1.5,
                            kind="LeaderWorkerSet", group_size=2, nodes=7)


async def with_lws(lab: Any) -> list[dict[str, Any]]:
    await lab.install_leaderworkerset()
    return []


def assert_made_before_broken(r: ScenarioResult) -> None:
    assert r.exit_code == 0, r.detail
    assert r.ok >= 20, r.to_dict()
    assert r.failed == {} and r.truncated == 0, r.to_dict()
    # Never below 2 whole Ready groups: at any 0.1 s sample nor at any change.
    assert r.samples >= 20 and r.lowest_ready >= 2, r.to_dict()
    assert r.ready_at_return >= 2
    # The worker left through the Eviction API (its DisruptionTarget condition).
    assert r.old_pods and r.evicted_by_api == sorted(r.old_pods), r.to_dict()
    assert r.replicas_after == 2 and r.annotations_left == [], r.to_dict()
    # The stand-in group's start-up, then the recreated group's, came first.
    assert r.startup_seconds is not None and r.empty_seconds is not None
    assert r.empty_seconds >= r.startup_seconds, r.to_dict()
    assert r.command_seconds >= 2 * SETTINGS.model_load, r.to_dict()


async def back_to_two_groups(client: KubeClient, node: str) -> None:
    """The stand-in group is gone (the restore removed the highest index), groups 0 and 1
    run again, none of their pods on the drained node."""
    want = {f"{APP}-0", f"{APP}-0-1", f"{APP}-1", f"{APP}-1-1"}

    def settled(cache: dict[str, dict[str, Any]]) -> bool:
        pods = {k.split("/", 1)[1]: p for k, p in cache.items()}
        return set(pods) == want and all(
            (p.get("spec") or {}).get("nodeName") not in (None, node) for p in pods.values())

    async with Informer(client, api_path("v1", "pods", namespace=NAMESPACE),
                        label_selector=f"app={APP}") as pods:
        await pods.wait_for(settled, timeout=60, what="groups 0 and 1 only, off the node")


async def test_drainsafe_keeps_two_groups_ready_and_evict_first_drops_to_one(
        tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=SETTINGS.nodes, gpus=1,
                       propagation=SETTINGS.propagation) as lab:
        ours = await run_drain_under_load(lab, "drainsafe", SETTINGS, prepare=with_lws)
        print("surge", ours.to_dict())
        assert_made_before_broken(ours)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            await back_to_two_groups(client, ours.node)
            assert (await uncordon(client, ours.node)).changed

        theirs = await run_drain_under_load(lab, "drainsafe",
                                            replace(SETTINGS, strategy="evict"))
        print("evict", theirs.to_dict())
        assert theirs.exit_code == 0, theirs.detail
        # Evict first: one group while the worker's group is recreated and loads.
        assert theirs.lowest_ready == 1, theirs.to_dict()
        assert theirs.evicted_by_api == sorted(theirs.old_pods), theirs.to_dict()

        if kubectl_binary() is None:
            return
        # The real kubectl drain of a third worker's node: the same drop.
        kubectl = await run_drain_under_load(lab, "kubectl", SETTINGS)
        print("kubectl", kubectl.to_dict())
        assert kubectl.exit_code == 0, kubectl.detail
        assert kubectl.lowest_ready == 1, kubectl.to_dict()


async def test_a_budget_of_min_available_four_pods_lets_the_surged_group_go(
        tmp_path: Path) -> None:
    """minAvailable 4 over 2 groups of 2 wedges evict-first; with the stand-in group (6
    pods) it lets one whole group (2 pods) go, and the drain stays at 2 groups."""
    async with gpu_lab(tmp_path, nodes=SETTINGS.nodes, gpus=1,
                       propagation=SETTINGS.propagation) as lab:
        ours = await run_drain_under_load(lab, "drainsafe", replace(SETTINGS, min_available=4),
                                          prepare=with_lws)
        print("surge, minAvailable 4", ours.to_dict())
        assert_made_before_broken(ours)
