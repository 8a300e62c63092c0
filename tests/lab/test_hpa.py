"""The lab HPA's decisions (horizontal.go reconcileAutoscaler at v1.31.0), as plain data."""

from __future__ import annotations

from typing import Any

import pytest

from drainsafe.lab.apiserver.store import Store
from drainsafe.lab.controllers.hpa import (
    RECOMMENDED,
    Plan,
    plan,
    scale_target,
    stabilized,
    within_rules,
)

NOW = 1_700_000_000.0


def hpa(min_replicas: int | None = 2, max_replicas: int = 10, *,
        recommended: str | None = None, behavior: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"maxReplicas": max_replicas, "scaleTargetRef": {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
    if min_replicas is not None:
        spec["minReplicas"] = min_replicas
    if behavior is not None:
        spec["behavior"] = behavior
    meta: dict[str, Any] = {"name": "web", "namespace": "default", "uid": "u"}
    if recommended is not None:
        meta["annotations"] = {RECOMMENDED: recommended}
    return {"metadata": meta, "spec": spec}


def cond(p: Plan, type_: str) -> tuple[str, str, str]:
    found = [c for c in p.conditions if c[0] == type_]
    assert found, f"no {type_} condition in {p.conditions}"
    return found[-1][1], found[-1][2], found[-1][3]


def test_a_count_below_min_replicas_is_raised_before_any_metric() -> None:
    p = plan(hpa(3, 10), current=1, samples=[], now=NOW)
    assert (p.desired, p.rescale) == (3, True)
    assert p.reason == "Current number of replicas below Spec.MinReplicas"
    assert cond(p, "AbleToScale") == ("True", "SucceededGetScale",
                                      "the HPA controller was able to get the target's "
                                      "current scale")
    assert not [c for c in p.conditions if c[0] == "ScalingActive"]


def test_a_count_above_max_replicas_is_lowered() -> None:
    p = plan(hpa(1, 4, recommended="9"), current=6, samples=[], now=NOW)
    assert (p.desired, p.rescale) == (4, True)
    assert p.reason == "Current number of replicas above Spec.MaxReplicas"


def test_min_replicas_defaults_to_one() -> None:
    assert plan(hpa(None, 5), current=0, samples=[], now=NOW).rescale is False  # disabled
    p = plan(hpa(0, 5), current=0, samples=[], now=NOW)  # minReplicas 0: not disabled
    assert cond(p, "ScalingActive")[1] != "ScalingDisabled"


def test_a_target_scaled_to_zero_disables_autoscaling() -> None:
    p = plan(hpa(2, 5), current=0, samples=[], now=NOW)
    assert (p.desired, p.rescale) == (0, False)
    assert cond(p, "ScalingActive") == (
        "False", "ScalingDisabled", "scaling is disabled since the replica count of the "
        "target is zero")


def test_inside_the_bounds_without_metrics_nothing_changes() -> None:
    p = plan(hpa(2, 5), current=4, samples=[], now=NOW)
    assert (p.desired, p.rescale) == (4, False)
    status, reason, message = cond(p, "ScalingActive")
    assert (status, reason) == ("False", "FailedGetResourceMetric")
    assert message.startswith("the HPA was unable to compute the replica count: ")
    bad = plan(hpa(2, 5, recommended="many"), current=4, samples=[], now=NOW)
    assert "'many'" in cond(bad, "ScalingActive")[2] and bad.rescale is False


def test_the_recommendation_annotation_stands_in_for_metrics() -> None:
    p = plan(hpa(2, 10, recommended="5"), current=3, samples=[], now=NOW)
    assert (p.desired, p.rescale) == (5, True)
    assert cond(p, "ScalingActive")[:2] == ("True", "ValidMetricFound")
    assert cond(p, "AbleToScale")[1] == "ReadyForNewScale"
    assert cond(p, "ScalingLimited") == ("False", "DesiredWithinRange",
                                         "the desired count is within the acceptable range")


def test_scale_down_waits_for_the_stabilization_window() -> None:
    # Recommended 3 two minutes ago; now 2: the highest of the last 300 s (3) holds.
    samples = [(NOW - 120, 3)]
    p = plan(hpa(2, 10, recommended="2"), current=3, samples=samples, now=NOW)
    assert (p.desired, p.rescale) == (3, False)
    assert cond(p, "AbleToScale")[1] == "ScaleDownStabilized"
    assert p.recheck_in == pytest.approx(180)
    # Once the sample is older than the window, the scale-down goes through.
    later = plan(hpa(2, 10, recommended="2"), current=3, samples=samples, now=NOW + 181)
    assert (later.desired, later.rescale) == (2, True)
    assert later.reason == "All metrics below target"
    # A behavior with a zero window scales down at once.
    quick = plan(hpa(2, 10, recommended="2", behavior={"scaleDown": {
        "stabilizationWindowSeconds": 0}}), current=3, samples=samples, now=NOW)
    assert (quick.desired, quick.rescale) == (2, True)


def test_a_recommendation_below_min_replicas_is_limited() -> None:
    p = plan(hpa(3, 10, recommended="1", behavior={}), current=3, samples=[], now=NOW)
    assert (p.desired, p.rescale) == (3, False)
    assert cond(p, "ScalingLimited") == (
        "True", "TooFewReplicas", "the desired replica count is less than the minimum "
        "replica count")


@pytest.mark.parametrize(("current", "desired", "behavior", "expected"), [
    (2, 3, False, (3, "DesiredWithinRange")),
    (2, 1, False, (2, "TooFewReplicas")),
    (2, 30, False, (4, "ScaleUpLimit")),       # max(2 x 2, 4) = 4 < maxReplicas 20
    (6, 30, False, (12, "ScaleUpLimit")),
    (15, 30, False, (20, "TooManyReplicas")),  # 2 x 15 = 30 > maxReplicas
    (2, 30, True, (20, "TooManyReplicas")),    # behavior: no fixed scale-up limit here
])
def test_within_rules(current: int, desired: int, behavior: bool,
                      expected: tuple[int, str]) -> None:
    got, reason, _ = within_rules(current, desired, 2, 20, behavior)
    assert (got, reason) == expected


def test_scale_up_stabilization_with_a_behavior() -> None:
    # Up window 60 s: the lowest recommendation of the last minute (4) caps the rise.
    value, recheck = stabilized(3, 8, [(NOW - 30, 4)], NOW, up_window=60, down_window=300)
    assert value == 4 and recheck == pytest.approx(30)


def test_scale_targets_are_kinds_with_a_scale_subresource() -> None:
    store = Store()
    deployment = scale_target(store, {"apiVersion": "apps/v1", "kind": "Deployment"})
    assert deployment is not None and deployment.plural == "deployments"
    assert scale_target(store, {"apiVersion": "apps/v1", "kind": "ReplicaSet"}) is not None
    assert scale_target(store, {"apiVersion": "apps/v1", "kind": "DaemonSet"}) is None
    assert scale_target(store, {"apiVersion": "v1", "kind": "Deployment"}) is None


def test_the_controller_scales_the_target_and_never_on_an_invalid_spec() -> None:
    from drainsafe.lab.apiserver.discovery import BY_KEY
    from drainsafe.lab.apiserver.store import Store
    from drainsafe.lab.controllers.hpa import HPAS, HorizontalPodAutoscalerController

    deployments = BY_KEY["apps/deployments"]
    store = Store()
    store.create(BY_KEY["namespaces"], {"metadata": {"name": "default"}})
    store.create(deployments, {"metadata": {"name": "web", "namespace": "default"},
                               "spec": {"replicas": 3}})
    broken = hpa(2, 10)
    del broken["spec"]["maxReplicas"]  # maxReplicas 0 would otherwise mean "scale to 0"
    store.create(HPAS, {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                        **broken})
    controller = HorizontalPodAutoscalerController(store)
    controller.reconcile()
    assert store.get(deployments, "default", "web")["spec"]["replicas"] == 3
    store.mutate(HPAS, "default", "web",
                 lambda o: o["spec"].update(minReplicas=5, maxReplicas=6))
    controller.reconcile()
    assert store.get(deployments, "default", "web")["spec"]["replicas"] == 5
    status = store.get(HPAS, "default", "web")["status"]
    assert (status["currentReplicas"], status["desiredReplicas"]) == (3, 5)
