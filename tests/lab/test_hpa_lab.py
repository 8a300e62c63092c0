"""The lab HPA against real kubelets and processes: it raises replicas to minReplicas, takes
back a direct scale below it (why drainsafe raises minReplicas instead of scaling), and
follows a raised and restored minReplicas."""

from __future__ import annotations

import sys
from typing import Any

from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.autoscaling_v2 import HorizontalPodAutoscaler
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from conftest import wait_until
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab
from drainsafe.lab.controllers.hpa import RECOMMENDED

PODS = BY_KEY["pods"]
DEPLOYMENTS = BY_KEY["apps/deployments"]
HPAS = BY_KEY["autoscaling/horizontalpodautoscalers"]
SERVER = [sys.executable, "-c", "import signal, sys, time\n"
          "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
          "while True: time.sleep(0.1)"]


def web(replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                         "terminationGracePeriodSeconds": 5,
                         "containers": [{"name": "c", "command": SERVER}]}}}}


def autoscaler(min_replicas: int, max_replicas: int) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minReplicas": min_replicas, "maxReplicas": max_replicas,
                     "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": "web"}}}


def ready_pods(lab: Lab) -> int:
    return sum(1 for p in lab.control_plane.store.items(PODS, "default")
               if not p["metadata"].get("deletionTimestamp")
               and any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (p.get("status") or {}).get("conditions") or []))


def replicas(lab: Lab) -> int:
    d = lab.control_plane.store.peek(DEPLOYMENTS, "default", "web")
    return int(d["spec"]["replicas"]) if d is not None else -1


def hpa_status(lab: Lab) -> dict[str, Any]:
    h = lab.control_plane.store.peek(HPAS, "default", "web")
    return (h or {}).get("status") or {}


def conditions(lab: Lab) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"])
            for c in hpa_status(lab).get("conditions") or []}


async def test_hpa_enforces_min_replicas_and_takes_back_a_direct_scale(lab: Lab) -> None:
    assert lab.client is not None
    await lab.apply(web(1))
    await lab.wait_available("default", "web")

    # The HPA raises the Deployment to minReplicas.
    await lab.apply(autoscaler(3, 5))
    await wait_until(lab.control_plane, lambda: replicas(lab) == 3 and ready_pods(lab) == 3,
                     what="3 Ready replicas")
    await wait_until(lab.control_plane, lambda: hpa_status(lab).get("currentReplicas") == 3,
                     what="HPA status")
    status = hpa_status(lab)
    assert status["desiredReplicas"] == 3 and status.get("lastScaleTime")
    assert conditions(lab)["AbleToScale"][0] == "True"
    # No metrics in the lab: inside the bounds the HPA changes nothing, and says why.
    assert conditions(lab)["ScalingActive"] == ("False", "FailedGetResourceMetric")

    # A direct scale below minReplicas (what `kubectl scale` does) is taken back.
    await lab.client.patch(Deployment.Scale, "web", {"spec": {"replicas": 1}},
                           namespace="default", patch_type=PatchType.MERGE)
    await wait_until(lab.control_plane, lambda: replicas(lab) == 3 and ready_pods(lab) == 3,
                     what="the HPA to restore 3 replicas")
    events = [e async for e in lab.client.list(Event, namespace="default")
              if e.involvedObject.kind == "HorizontalPodAutoscaler"
              and e.reason == "SuccessfulRescale"]
    assert [e.message for e in events] == [
        "New size: 3; reason: Current number of replicas below Spec.MinReplicas"] * 2

    # A direct scale inside the bounds stays (no metrics say otherwise).
    await lab.client.patch(Deployment.Scale, "web", {"spec": {"replicas": 4}},
                           namespace="default", patch_type=PatchType.MERGE)
    await wait_until(lab.control_plane, lambda: ready_pods(lab) == 4, what="4 replicas")
    assert replicas(lab) == 4

    # Raising minReplicas above the count scales up; restoring it leaves the count alone.
    await lab.client.patch(HorizontalPodAutoscaler, "web", {"spec": {"minReplicas": 5}},
                           namespace="default", patch_type=PatchType.MERGE)
    await wait_until(lab.control_plane, lambda: replicas(lab) == 5 and ready_pods(lab) == 5,
                     what="5 replicas")
    await lab.client.patch(HorizontalPodAutoscaler, "web", {"spec": {"minReplicas": 3}},
                           namespace="default", patch_type=PatchType.MERGE)
    await lab.client.patch(Deployment.Scale, "web", {"spec": {"replicas": 3}},
                           namespace="default", patch_type=PatchType.MERGE)
    await wait_until(lab.control_plane, lambda: ready_pods(lab) == 3, what="3 replicas")
    assert replicas(lab) == 3


async def test_hpa_with_a_recommendation_scales_and_reports_limits(lab: Lab) -> None:
    assert lab.client is not None
    await lab.apply(web(2))
    await lab.wait_available("default", "web")
    hpa = autoscaler(2, 3)
    hpa["metadata"]["annotations"] = {RECOMMENDED: "6"}
    hpa["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": 0}}
    await lab.apply(hpa)
    await wait_until(lab.control_plane, lambda: replicas(lab) == 3
                     and conditions(lab).get("ScalingLimited") == ("True", "TooManyReplicas"),
                     what="the HPA to stop at maxReplicas")
    assert conditions(lab)["ScalingActive"] == ("True", "ValidMetricFound")
    # Recommend fewer than minReplicas: down to 2, limited by the minimum.
    await lab.client.patch(HorizontalPodAutoscaler, "web", {"metadata": {"annotations": {
        RECOMMENDED: "1"}}}, namespace="default", patch_type=PatchType.MERGE)
    await wait_until(lab.control_plane, lambda: replicas(lab) == 2
                     and conditions(lab).get("ScalingLimited") == ("True", "TooFewReplicas"),
                     what="the HPA to stop at minReplicas")
    # A target the lab cannot scale.
    await lab.client.patch(HorizontalPodAutoscaler, "web", {"spec": {"scaleTargetRef": {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}}},
        namespace="default", patch_type=PatchType.MERGE)
    await wait_until(lab.control_plane, lambda: conditions(lab).get("AbleToScale")
                     == ("False", "FailedGetScale"), what="FailedGetScale")
