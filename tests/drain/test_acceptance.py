"""Acceptance (issue 5): under constant streaming load, `drainsafe drain` of a GPU node loses
nothing and returns only with the service back at full Ready capacity; `kubectl drain` of a
node running the same pods, in the same lab, returns while the replacement is not Ready.

Real processes: the lab's API server, scheduler, controllers and kubelets; the streaming
workload under `drainsafe serve` in each pod (drain-aware settings); streaming load with a
new connection per request through the ClusterIP path with a propagation delay; the real
kubectl binary. The scenario is the demo's and the benchmark's (drainsafe.demo.scenario).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drainsafe.demo.scenario import ScenarioSettings, kubectl_binary, run_drain_under_load
from drainsafe.drain.cordon import uncordon
from drainsafe.kube import KubeClient

from .labkit import gpu_lab

pytestmark = pytest.mark.e2e

SETTINGS = ScenarioSettings(propagation=0.5, drain_delay=1.5, model_load=5, warmup=1.5)


@pytest.mark.skipif(kubectl_binary() is None, reason="kubectl not installed")
async def test_drainsafe_loses_nothing_and_kubectl_returns_early(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=1, propagation=SETTINGS.propagation) as lab:
        ours = await run_drain_under_load(lab, "drainsafe", SETTINGS)
        assert ours.exit_code == 0, ours.detail
        assert ours.ok >= 20, ours.to_dict()
        assert ours.failed == {} and ours.truncated == 0, ours.to_dict()
        assert ours.ready_at_return == 2, "drainsafe returned before full Ready capacity"
        # It returned only after the replacement had started up (model load included).
        assert ours.command_seconds >= SETTINGS.model_load
        assert ours.capacity_seconds is not None
        assert ours.capacity_seconds <= ours.command_seconds + 0.5

        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            assert (await uncordon(client, ours.node)).changed
        theirs = await run_drain_under_load(lab, "kubectl", SETTINGS)
        assert theirs.exit_code == 0 and theirs.node != ours.node, theirs.detail
        # kubectl drain reported success while the service was one replica short.
        assert theirs.ready_at_return < 2, theirs.to_dict()
        assert theirs.command_seconds < SETTINGS.model_load
