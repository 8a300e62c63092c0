"""A scale change in the middle of a rollout, with real kubelets and processes: the extra
replicas are shared between the old and new ReplicaSets by their max-replicas annotations
(proportional scaling), and the status tells a client the rollout is still going; scaling
a finished Deployment is not a rollout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lightkube.resources.apps_v1 import Deployment
from lightkube.types import PatchType

from conftest import wait_until
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab

DEPLOYMENTS = BY_KEY["apps/deployments"]
REPLICASETS = BY_KEY["apps/replicasets"]
SERVER = [sys.executable, "-c", "import signal, sys, time\n"
          "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
          "while True: time.sleep(0.1)"]


def web(replicas: int, gate: Path) -> dict[str, Any]:
    """Pods of this template are Ready while `gate` exists (another gate: another template)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                         "terminationGracePeriodSeconds": 5,
                         "containers": [{"name": "c", "command": SERVER, "readinessProbe": {
                             "exec": {"command": ["test", "-e", str(gate)]},
                             "periodSeconds": 1}}]}}}}


def deployment(lab: Lab) -> dict[str, Any]:
    d = lab.control_plane.store.peek(DEPLOYMENTS, "default", "web")
    assert d is not None
    return d  # type: ignore[no-any-return]


def sizes(lab: Lab) -> dict[str, int]:
    """spec.replicas per ReplicaSet, keyed by the gate its template waits for."""
    out = {}
    for rs in lab.control_plane.store.items(REPLICASETS, "default"):
        probe = rs["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
        out[Path(probe["exec"]["command"][-1]).name] = int(rs["spec"]["replicas"])
    return out


def progressing(lab: Lab) -> str:
    conds = (deployment(lab).get("status") or {}).get("conditions") or []
    return next((c["reason"] for c in conds if c["type"] == "Progressing"), "")


def mid_rollout(d: dict[str, Any]) -> bool:
    """What a client checks: the status is current and the rollout not complete."""
    s = d.get("status") or {}
    reason = next((c["reason"] for c in s.get("conditions") or []
                   if c["type"] == "Progressing"), "")
    return (s.get("observedGeneration") == d["metadata"]["generation"]
            and reason != "NewReplicaSetAvailable"
            and s.get("updatedReplicas", 0) < s.get("replicas", 0))


async def scale(lab: Lab, replicas: int) -> None:
    assert lab.client is not None
    await lab.client.patch(Deployment.Scale, "web", {"spec": {"replicas": replicas}},
                           namespace="default", patch_type=PatchType.MERGE)


async def test_scaling_mid_rollout_is_proportional(lab: Lab, tmp_path: Path) -> None:
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.touch()
    await lab.apply(web(2, v1))
    await lab.wait_available("default", "web")
    assert progressing(lab) == "NewReplicaSetAvailable" and not mid_rollout(deployment(lab))

    # Roll out a template whose pods do not turn Ready: stuck at 2 old + 1 new (maxSurge 1).
    await lab.apply(web(2, v2))
    await wait_until(lab.control_plane, lambda: sizes(lab) == {"v1": 2, "v2": 1}
                     and (deployment(lab).get("status") or {}).get("replicas") == 3,
                     what="a stuck rollout")
    assert mid_rollout(deployment(lab))
    assert progressing(lab) in ("NewReplicaSetCreated", "ReplicaSetUpdated")

    # Scale to 4 mid-rollout: 4 + surge 1 = 5 replicas are shared by the annotations'
    # proportions (max-replicas 3): old round(2 x 5/3) = 3, new round(1 x 5/3) = 2, not
    # all the extra to the new ReplicaSet (which would be 2 old + 3 new).
    await scale(lab, 4)
    await wait_until(lab.control_plane, lambda: sizes(lab) == {"v1": 3, "v2": 2},
                     what="proportional sizes")
    await wait_until(lab.control_plane,
                     lambda: (deployment(lab).get("status") or {}).get("replicas") == 5,
                     what="5 replicas")
    d = deployment(lab)
    assert mid_rollout(d)
    for rs in lab.control_plane.store.items(REPLICASETS, "default"):
        annotations = rs["metadata"]["annotations"]
        assert annotations["deployment.kubernetes.io/desired-replicas"] == "4"
        assert annotations["deployment.kubernetes.io/max-replicas"] == "5"

    # Let the new pods turn Ready: the rollout completes at 4 new pods.
    v2.touch()
    await wait_until(lab.control_plane, lambda: sizes(lab) == {"v1": 0, "v2": 4}
                     and progressing(lab) == "NewReplicaSetAvailable", timeout=60,
                     what="the rollout to complete")
    assert not mid_rollout(deployment(lab))

    # Scaling a finished Deployment (drainsafe's surge) is not a rollout.
    seen: list[str] = []
    unlisten = lab.control_plane.store.listen(lambda ev: seen.append(progressing(lab))
                                              if ev.resource == "apps/deployments" else None)
    try:
        await scale(lab, 5)
        await wait_until(lab.control_plane,
                         lambda: (deployment(lab).get("status") or {}).get(
                             "availableReplicas") == 5, what="5 available")
    finally:
        unlisten()
    assert set(seen) == {"NewReplicaSetAvailable"}
    assert sizes(lab) == {"v1": 0, "v2": 5}
