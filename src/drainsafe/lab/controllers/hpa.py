"""HorizontalPodAutoscaler controller (autoscaling/v2) without a metrics API.

After kubernetes/kubernetes pkg/controller/podautoscaler/horizontal.go at v1.31.0
(`reconcileAutoscaler`, `normalizeDesiredReplicas`, `stabilizeRecommendation`,
`convertDesiredReplicasWithRules`, `setStatus`):
- the target is read through scale-subresource semantics: any served kind with a `scale`
  subresource (Deployment, ReplicaSet, StatefulSet), its spec.replicas being the current
  replica count. A target that cannot be read sets
  AbleToScale=False/FailedGetScale ("the HPA controller was unable to get the target's
  current scale: ...");
- minReplicas defaults to 1. A target scaled to 0 (with minReplicas > 0) disables
  autoscaling (ScalingActive=False/ScalingDisabled). Otherwise, **before any metric**, a
  count above maxReplicas is set to maxReplicas ("Current number of replicas above
  Spec.MaxReplicas") and one below minReplicas to minReplicas ("Current number of replicas
  below Spec.MinReplicas"): a direct scale outside the bounds is taken back, which is why
  drainsafe raises minReplicas instead of scaling an HPA's target;
- inside the bounds the count comes from metrics. The lab serves no metrics API, so, as on
  a cluster whose metrics are unavailable, the HPA then changes nothing
  (ScalingActive=False/FailedGetResourceMetric) - unless the HPA carries the annotation
  `lab.drainsafe.io/recommended-replicas: "N"`, which stands in for the metrics' answer:
  ScalingActive=True/ValidMetricFound, the scale-down stabilization window (the highest
  recommendation of the last `behavior.scaleDown.stabilizationWindowSeconds`, default
  300 s, the controller's --horizontal-pod-autoscaler-downscale-stabilization), the
  scale-up window when a behavior sets one, then the bounds and (without a behavior) the
  scale-up limit max(2 x current, 4), reported as ScalingLimited (TooFewReplicas,
  TooManyReplicas, ScaleUpLimit, DesiredWithinRange) and AbleToScale
  (ScaleDownStabilized, ScaleUpStabilized, ReadyForNewScale);
- a rescale writes the target's spec.replicas, sets AbleToScale=True/SucceededRescale,
  status.lastScaleTime, and a SuccessfulRescale event "New size: N; reason: ...";
- status: currentReplicas, desiredReplicas, lastScaleTime, conditions. Like the real
  controller it does not set status.observedGeneration, so a client cannot use it to
  tell that the HPA saw a spec change; watch the target's replicas instead.
Differences: the real controller syncs each HPA every 15 s (--horizontal-pod-autoscaler-
sync-period); the lab's reacts at once to any change of an HPA or a scale target, so a
direct scale outside the bounds is taken back sooner. The behavior's rate policies
(pods/percent per period) are not emulated, only its stabilization windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drainsafe.kube.objects import rfc3339
from drainsafe.lab.apiserver import crd
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY, ResourceType
from drainsafe.lab.apiserver.store import Event, Obj, Store, clone
from drainsafe.lab.controllers import Controller
from drainsafe.lab.controllers.podstate import set_condition
from drainsafe.lab.controllers.scheduler import record_event

HPAS = BY_KEY["autoscaling/horizontalpodautoscalers"]
RECOMMENDED = "lab.drainsafe.io/recommended-replicas"
DOWNSCALE_STABILIZATION_SECONDS = 300.0
COMPONENT = "horizontal-pod-autoscaler"

Condition = tuple[str, str, str, str]  # type, status, reason, message


def scale_target(store: Store, ref: dict[str, Any]) -> ResourceType | None:
    """The served resource behind a scaleTargetRef, if it has a scale subresource
    (custom kinds included: the scale client resolves them by discovery)."""
    group, _, version = str(ref.get("apiVersion") or "").rpartition("/")
    found = [rt for rt in store.catalog.all()
             if rt.kind == ref.get("kind") and rt.group == group and rt.subresource("scale")]
    return next((rt for rt in found if rt.version == version), found[0] if found else None)


def _replicas(store: Store, rt: ResourceType, target: Obj) -> int:
    paths = crd.scale_paths(store, rt)
    if paths is not None:
        return crd.spec_replicas(paths, target)
    return int((target.get("spec") or {}).get("replicas", 1))


def _set_replicas(store: Store, rt: ResourceType, target: Obj, replicas: int) -> None:
    paths = crd.scale_paths(store, rt)
    if paths is not None:
        crd.set_replicas(paths, target, replicas)
    else:
        target.setdefault("spec", {})["replicas"] = replicas


@dataclass
class Recommendations:
    """The timestamped recommendations of one HPA (the controller's `recommendations`)."""

    samples: list[tuple[float, int]] = field(default_factory=list)

    def record(self, now: float, value: int, keep: float) -> None:
        self.samples = [(t, v) for t, v in self.samples if t > now - keep]
        if self.samples and self.samples[-1][1] == value:
            self.samples[-1] = (now, value)  # same answer again: only the newest matters
        else:
            self.samples.append((now, value))


@dataclass(frozen=True)
class Plan:
    """What one reconcile pass decides, as plain data."""

    desired: int
    rescale: bool
    reason: str  # the rescale reason in the SuccessfulRescale event
    conditions: tuple[Condition, ...]
    recheck_in: float | None = None  # a stabilization window expires then


def within_rules(current: int, desired: int, min_replicas: int, max_replicas: int,
                 behavior: bool) -> tuple[int, str, str]:
    """convertDesiredReplicasWithRules (behavior nil: the scale-up limit applies) and the
    bounds part of convertDesiredReplicasWithBehaviorRate."""
    up_limit = max(2 * current, 4)
    if not behavior and max_replicas > up_limit:
        most, reason, message = (up_limit, "ScaleUpLimit", "the desired replica count is "
                                 "increasing faster than the maximum scale rate")
    else:
        most, reason, message = (max_replicas, "TooManyReplicas",
                                 "the desired replica count is more than the maximum "
                                 "replica count")
    if desired < min_replicas:
        return (min_replicas, "TooFewReplicas",
                "the desired replica count is less than the minimum replica count")
    if desired > most:
        return most, reason, message
    return desired, "DesiredWithinRange", "the desired count is within the acceptable range"


def stabilized(current: int, recommendation: int, samples: list[tuple[float, int]],
               now: float, up_window: float | None, down_window: float) -> tuple[int, float | None]:
    """stabilizeRecommendation (up_window None: no behavior) or its WithBehaviors form;
    returns the stabilized count and when the sample holding it expires (or None)."""
    down = [(t, v) for t, v in samples if t > now - down_window]
    if up_window is None:
        value = max([recommendation, *(v for _, v in down)])
    else:
        up = [(t, v) for t, v in samples if t > now - up_window]
        upper = max([recommendation, *(v for _, v in down)])
        lower = min([recommendation, *(v for _, v in up)])
        value = min(max(current, lower), upper)
    holders = [t + down_window for t, v in down if v > recommendation and v >= value]
    if up_window is not None:
        holders += [t + up_window for t, v in samples
                    if t > now - up_window and v < recommendation]
    return value, (min(holders) - now if holders and value != recommendation else None)


def bounds(hpa: Obj) -> tuple[int, int]:
    """(minReplicas, maxReplicas); minReplicas defaults to 1."""
    spec = hpa.get("spec") or {}
    low = spec.get("minReplicas")
    return (1 if low is None else int(low)), int(spec.get("maxReplicas") or 0)


def plan(hpa: Obj, current: int, samples: list[tuple[float, int]], now: float) -> Plan:
    """reconcileAutoscaler's decision for a target whose scale was read."""
    spec = hpa.get("spec") or {}
    min_replicas, max_replicas = bounds(hpa)
    got_scale: Condition = ("AbleToScale", "True", "SucceededGetScale",
                            "the HPA controller was able to get the target's current scale")
    if current == 0 and min_replicas != 0:
        return Plan(0, False, "", (got_scale, (
            "ScalingActive", "False", "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero")))
    if current > max_replicas:
        return Plan(max_replicas, True, "Current number of replicas above Spec.MaxReplicas",
                    (got_scale,))
    if current < min_replicas:
        return Plan(min_replicas, True, "Current number of replicas below Spec.MinReplicas",
                    (got_scale,))
    raw = ((hpa["metadata"].get("annotations") or {}).get(RECOMMENDED) or "").strip()
    try:
        recommendation = int(raw)
    except ValueError:
        recommendation = -1
    if recommendation < 0:
        why = (f"the {RECOMMENDED} annotation is not a replica count: {raw!r}" if raw else
               f"the lab serves no metrics API (the {RECOMMENDED} annotation stands in "
               "for one)")
        return Plan(current, False, "", (got_scale, (
            "ScalingActive", "False", "FailedGetResourceMetric",
            f"the HPA was unable to compute the replica count: {why}")))
    active: Condition = ("ScalingActive", "True", "ValidMetricFound",
                         "the HPA was able to successfully calculate a replica count from "
                         f"the {RECOMMENDED} annotation")
    reason = ""
    if recommendation > current:
        reason = f"the {RECOMMENDED} annotation above target"
    elif recommendation < current:
        reason = "All metrics below target"
    behavior = spec.get("behavior")
    down_window = DOWNSCALE_STABILIZATION_SECONDS
    up_window: float | None = None
    if behavior is not None:
        down = (behavior.get("scaleDown") or {}).get("stabilizationWindowSeconds")
        up = (behavior.get("scaleUp") or {}).get("stabilizationWindowSeconds")
        down_window = float(down) if down is not None else DOWNSCALE_STABILIZATION_SECONDS
        up_window = float(up) if up is not None else 0.0
    value, recheck = stabilized(current, recommendation, samples, now, up_window, down_window)
    if value != recommendation:
        able: Condition = (
            ("AbleToScale", "True", "ScaleDownStabilized", "recent recommendations were "
             "higher than current one, applying the highest recent recommendation")
            if behavior is None or recommendation < current else
            ("AbleToScale", "True", "ScaleUpStabilized", "recent recommendations were lower "
             "than current one, applying the lowest recent recommendation"))
    else:
        able = ("AbleToScale", "True", "ReadyForNewScale",
                "recommended size matches current size")
    desired, limit_reason, limit_message = within_rules(
        current, value, min_replicas, max_replicas, behavior is not None)
    limited: Condition = ("ScalingLimited", "False" if desired == value else "True",
                          limit_reason, limit_message)
    return Plan(desired, desired != current, reason, (got_scale, able, active, limited),
                recheck)


class HorizontalPodAutoscalerController(Controller):
    name = "horizontal-pod-autoscaler"
    watches = frozenset({"autoscaling/horizontalpodautoscalers"})

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._recommendations: dict[str, Recommendations] = {}

    def _on_event(self, ev: Event) -> None:
        """HPAs, and every kind with a scale subresource (custom kinds come and go)."""
        rt = self.store.catalog.by_key(ev.resource)
        if ev.resource in self.watches or (rt is not None and rt.subresource("scale")):
            self.wake()

    def reconcile(self) -> float | None:
        next_wake: float | None = None
        alive = set()
        for hpa in list(self.store.items(HPAS)):
            alive.add(hpa["metadata"]["uid"])
            try:
                delay = self.sync(hpa)
            except st.StatusError:
                delay = 1.0  # e.g. a conflict with another writer: try again soon
            if delay is not None:
                next_wake = delay if next_wake is None else min(next_wake, delay)
        for uid in set(self._recommendations) - alive:
            del self._recommendations[uid]
        return next_wake

    def sync(self, hpa: Obj) -> float | None:
        low, high = bounds(hpa)
        if high < 1 or low > high:
            return None  # the API server rejects such a spec; never scale on one
        ns = hpa["metadata"]["namespace"]
        now = self.store.clock()
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        rt = scale_target(self.store, ref)
        target = self.store.peek(rt, ns, str(ref.get("name"))) if rt is not None else None
        if rt is None or target is None:
            group, _, _ = str(ref.get("apiVersion") or "").rpartition("/")
            err = (f'no matches for kind "{ref.get("kind")}" in group "{group}"'
                   if rt is None else
                   f'{rt.plural}{"." + rt.group if rt.group else ""} '
                   f'"{ref.get("name")}" not found')
            self._write_status(hpa, None, None, (
                ("AbleToScale", "False", "FailedGetScale",
                 f"the HPA controller was unable to get the target's current scale: {err}"),),
                event=("Warning", "FailedGetScale", err))
            return None
        current = _replicas(self.store, rt, target)
        history = self._recommendations.setdefault(hpa["metadata"]["uid"], Recommendations())
        if not history.samples:  # recordInitialRecommendation
            history.samples.append((now, current))
        decision = plan(hpa, current, history.samples, now)
        if any(c[0] == "ScalingActive" and c[2] == "ValidMetricFound"
               for c in decision.conditions):
            keep = max(DOWNSCALE_STABILIZATION_SECONDS, _windows(hpa))
            recommended = int((hpa["metadata"].get("annotations") or {})[RECOMMENDED])
            history.record(now, recommended, keep)
        conditions = decision.conditions
        event: tuple[str, str, str] | None = None
        scaled_at: float | None = None
        desired: int | None = decision.desired
        if decision.rescale:
            def rescale(o: Obj) -> None:
                _set_replicas(self.store, rt, o, decision.desired)
            try:
                self.store.mutate(rt, ns, target["metadata"]["name"], rescale)
            except st.StatusError as exc:
                conditions = (*conditions, (
                    "AbleToScale", "False", "FailedUpdateScale",
                    f"the HPA controller was unable to update the target scale: {exc}"))
                desired = current
                event = ("Warning", "FailedRescale", f"New size: {decision.desired}; "
                         f"reason: {decision.reason}; error: {exc}")
            else:
                conditions = (*conditions, (
                    "AbleToScale", "True", "SucceededRescale",
                    f"the HPA controller was able to update the target scale to "
                    f"{decision.desired}"))
                scaled_at = now
                event = ("Normal", "SuccessfulRescale",
                         f"New size: {decision.desired}; reason: {decision.reason}")
        elif any(c[2] == "FailedGetResourceMetric" for c in conditions):
            desired = None  # the real controller returns early: only currentReplicas is set
        self._write_status(hpa, current, desired, conditions, event=event,
                           scaled_at=scaled_at)
        return decision.recheck_in

    def _write_status(self, hpa: Obj, current: int | None, desired: int | None,
                      conditions: tuple[Condition, ...], *,
                      event: tuple[str, str, str] | None = None,
                      scaled_at: float | None = None) -> None:
        latest = self.store.peek(HPAS, hpa["metadata"]["namespace"], hpa["metadata"]["name"])
        if latest is None or latest["metadata"]["uid"] != hpa["metadata"]["uid"]:
            return
        status = clone(latest.get("status") or {})
        if current is not None:
            status["currentReplicas"] = current
        if desired is not None:
            status["desiredReplicas"] = desired
        status.setdefault("desiredReplicas", 0)
        if scaled_at is not None:
            status["lastScaleTime"] = rfc3339(scaled_at)
        now = rfc3339(self.store.clock())
        conds = list(status.get("conditions") or [])
        before = {c.get("type"): (c.get("status"), c.get("reason")) for c in conds}
        for type_, cstatus, reason, message in conditions:
            conds = set_condition(conds, {"type": type_, "status": cstatus, "reason": reason,
                                          "message": message}, now)
        status["conditions"] = conds
        if event is not None:
            type_, reason, message = event
            if reason != "FailedGetScale" or before.get("AbleToScale") != ("False", reason):
                record_event(self.store, latest, reason=reason, message=message, type_=type_,
                             component=COMPONENT)
        if status != latest.get("status"):
            updated = clone(latest)
            updated["status"] = status
            self.store.update(HPAS, updated, subresource="status")


def _windows(hpa: Obj) -> float:
    behavior = (hpa.get("spec") or {}).get("behavior") or {}
    return max((float((behavior.get(k) or {}).get("stabilizationWindowSeconds") or 0)
                for k in ("scaleUp", "scaleDown")), default=0.0)
