"""StatefulSets drained make before break (issue 29), under constant streaming load.

`drainsafe drain` of a node holding one pod of a 2-replica StatefulSet behind a Service,
with a PDB of minAvailable 2 (which wedges evict-first): a new ordinal (llm-2) stands in,
the old pod leaves through the Eviction API and is recreated under its name on another
node, then the recorded scale is restored and the StatefulSet controller removes the
highest ordinal, the stand-in. Ready stays at 2 or more at every 0.1 s sample and at every
change, no request fails or is cut short, and nothing of drainsafe's is left on the
StatefulSet. A real `kubectl drain` of the same set (PDB minAvailable 1, so that it can
proceed) drops to 1 Ready: the harness sees the failure mode.

Real processes: the lab's API server, scheduler, controllers (the StatefulSet controller
as kube-controller-manager runs it) and kubelets; `drainsafe serve` in each pod; streaming
load through the ClusterIP path with a propagation delay; the real kubectl binary. The
scenario is the Deployment acceptance test's (drainsafe.demo.scenario) with kind
StatefulSet. One GPU per pod and node: 4 nodes, since the stand-in and the recreated pod
each need a free GPU while the pod moves.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

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

# Model load 3 s, the suite's scaled-down start-up (as test_group_drain): the set starts
# one ordinal at a time and each drain waits for two start-ups (the stand-in's, then the
# recreation's), while the assertions compare against SETTINGS.model_load and the change
# history, so a shorter load keeps each one meaningful. kubectl's drop to 1 Ready lasts
# the recreation's whole start-up (drain delay, exit, model load) whatever its length.
SETTINGS = ScenarioSettings(propagation=0.5, drain_delay=1.5, model_load=3, warmup=1.5,
                            kind="StatefulSet", nodes=4)


def assert_made_before_broken(r: ScenarioResult) -> None:
    assert r.exit_code == 0, r.detail
    assert r.ok >= 20, r.to_dict()
    assert r.failed == {} and r.truncated == 0, r.to_dict()
    # Never below 2 Ready: at any 0.1 s sample nor at any change of the count.
    assert r.samples >= 20 and r.lowest_ready >= 2, r.to_dict()
    assert r.ready_at_return >= 2
    # The old pod left through the Eviction API (its DisruptionTarget condition).
    assert r.old_pods and r.evicted_by_api == sorted(r.old_pods), r.to_dict()
    assert r.replicas_after == 2 and r.annotations_left == [], r.to_dict()
    # The stand-in's start-up and then the recreation's came first.
    assert r.startup_seconds is not None and r.empty_seconds is not None
    assert r.empty_seconds >= r.startup_seconds, r.to_dict()
    assert r.command_seconds >= 2 * SETTINGS.model_load, r.to_dict()


async def back_to_its_ordinals(client: KubeClient, node: str, old: list[str]) -> None:
    """The stand-in is gone (the restore removed the highest ordinal), the old pods run
    again under their names, elsewhere."""
    want = {f"{APP}-0", f"{APP}-1"}

    def settled(cache: dict[str, dict[str, object]]) -> bool:
        pods = {k.split("/", 1)[1]: p for k, p in cache.items()}
        return set(pods) == want and all(
            (pods[n].get("spec") or {}).get("nodeName") not in (None, node)  # type: ignore[union-attr]
            for n in old)

    async with Informer(client, api_path("v1", "pods", namespace=NAMESPACE),
                        label_selector=f"app={APP}") as pods:
        await pods.wait_for(settled, timeout=60, what="only llm-0 and llm-1, off the node")


@pytest.mark.skipif(kubectl_binary() is None, reason="kubectl not installed")
async def test_drainsafe_keeps_a_statefulset_at_capacity_and_kubectl_drops_it(
        tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=SETTINGS.nodes, gpus=1,
                       propagation=SETTINGS.propagation) as lab:
        ours = await run_drain_under_load(lab, "drainsafe", replace(SETTINGS, min_available=2))
        assert_made_before_broken(ours)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            await back_to_its_ordinals(client, ours.node, ours.old_pods)
            assert (await uncordon(client, ours.node)).changed

        theirs = await run_drain_under_load(lab, "kubectl", replace(SETTINGS, min_available=1))
        assert theirs.exit_code == 0 and theirs.node != ours.node, theirs.detail
        # kubectl drain (evict first) had one replica while the pod was recreated and
        # loaded its model.
        assert theirs.lowest_ready == 1, theirs.to_dict()
        assert theirs.failed == {} and theirs.truncated == 0, theirs.to_dict()


async def test_an_hpa_owned_statefulset_is_surged_through_its_min_replicas(
        tmp_path: Path) -> None:
    settings = replace(SETTINGS, hpa_min=2, min_available=2)
    async with gpu_lab(tmp_path, nodes=SETTINGS.nodes, gpus=1,
                       propagation=SETTINGS.propagation) as lab:
        ours = await run_drain_under_load(lab, "drainsafe", settings)
        assert_made_before_broken(ours)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            hpa = await client.get(api_path("autoscaling/v2", "horizontalpodautoscalers",
                                            namespace=NAMESPACE, name=APP))
            assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 4)
            await back_to_its_ordinals(client, ours.node, ours.old_pods)
