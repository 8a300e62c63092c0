"""Answering pods/eviction AdmissionReviews (every replica).

The Eviction carries no pod labels, so the reviewer reads the pod from the view (or the
API server, for a pod newer than the cache), gathers the facts, asks the pure decision
(drainsafe.controller.decision.decide) and answers (`review_response`, pure). A Hold's
start, a Release and an allowed eviction of a held pod have effects
(drainsafe.controller.holds); a pod this replica lets go counts as gone in its view for a
while.

A Hold is a 429 whose Status carries `details.causes = [{reason: GUARD_HOLD_CAUSE}]`
(kube.errors): kube-apiserver returns a denying webhook's Status as it is, details
included, with only the code (>= 400), status and message prefix set (k8s.io/apiserver
v0.33.0, Kubernetes v1.33, pkg/admission/plugin/webhook/errors/statuserror.go
ToStatusErr), so a client can tell the guard's hold from API Priority and Fairness
throttling, which is a 429 with no Status cause. kubectl drain keys on the code alone
(IsTooManyRequests) and prints the message, so its behaviour is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drainsafe.controller.clock import Clock
from drainsafe.controller.config import ControllerConfig
from drainsafe.controller.decision import (
    Allow,
    AllowReason,
    Facts,
    Hold,
    Release,
    Verdict,
    decide,
)
from drainsafe.controller.engine import SurgeEngine
from drainsafe.controller.holds import Holds
from drainsafe.controller.metrics import GuardMetrics
from drainsafe.controller.record import HOLD_ANNOTATION, annotations_of
from drainsafe.controller.view import ClusterView
from drainsafe.drain.ownership import SurgeRecord
from drainsafe.kube.errors import GUARD_HOLD_CAUSE

Obj = dict[str, Any]


@dataclass(frozen=True)
class EvictionRequest:
    """The parts of an AdmissionReview request the guard answers from."""

    uid: str
    namespace: str
    name: str
    dry_run: bool


def eviction_request(body: Mapping[str, Any]) -> tuple[str, EvictionRequest | None]:
    """(the review's uid, the eviction it asks about, or None for anything else). Pure."""
    request = body.get("request") or {}
    uid = str(request.get("uid") or "")
    if (request.get("resource") or {}).get("resource") != "pods" or \
            request.get("subResource") != "eviction":
        return uid, None
    return uid, EvictionRequest(uid, str(request.get("namespace")), str(request.get("name")),
                                bool(request.get("dryRun")))


def review_response(uid: str, verdict: Verdict, *, retry_after: int) -> dict[str, Any]:
    """The AdmissionReview v1 answer for a verdict. Pure."""
    response: dict[str, Any] = {"uid": uid, "allowed": not isinstance(verdict, Hold)}
    if isinstance(verdict, Hold):
        details: dict[str, Any] = {"causes": [{"reason": GUARD_HOLD_CAUSE,
                                               "message": verdict.message}]}
        if retry_after > 0:
            details["retryAfterSeconds"] = retry_after
        response["status"] = {"code": 429, "reason": "TooManyRequests",
                              "message": verdict.message, "details": details}
    elif isinstance(verdict, Release):
        response["warnings"] = [f"drainsafe guard released the hold: {verdict.message}"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": response}


class Reviewer:
    def __init__(self, view: ClusterView, holds: Holds, cfg: ControllerConfig, *,
                 engine: SurgeEngine | None, metrics: GuardMetrics, clock: Clock) -> None:
        self.view, self.holds, self.cfg, self.engine = view, holds, cfg, engine
        self.metrics, self.clock = metrics, clock

    def record_of(self, deployment: Mapping[str, Any]) -> SurgeRecord | None:
        return self.engine.record_of(deployment) if self.engine is not None else None

    def verdict(self, pod: Obj, *, dry_run: bool) -> tuple[Verdict, Facts]:
        """The decision for an eviction of `pod` now, and the facts it was made from."""
        facts = self.view.facts(pod, dry_run=dry_run, record_of=self.record_of,
                                can_surge=self.engine is not None)
        return decide(facts, hold_limit=self.cfg.hold_limit), facts

    async def review(self, body: Mapping[str, Any]) -> dict[str, Any]:
        started = self.clock.monotonic()
        uid, eviction = eviction_request(body)
        verdict: Verdict = Allow(AllowReason.NOT_OPTED_IN)
        if eviction is not None:
            pod = await self.view.pod(eviction.namespace, eviction.name)
            if pod is not None:
                verdict = await self._answer(pod, dry_run=eviction.dry_run)
        self.metrics.reviews.labels(type(verdict).__name__.lower()).inc()
        self.metrics.review_seconds.observe(self.clock.monotonic() - started)
        return review_response(uid, verdict, retry_after=self.cfg.retry_after)

    async def _answer(self, pod: Obj, *, dry_run: bool) -> Verdict:
        verdict, facts = self.verdict(pod, dry_run=dry_run)
        if isinstance(verdict, Hold):
            await self.holds.begin(pod, verdict)
        elif isinstance(verdict, Release):
            if not dry_run:
                self.view.let_go(pod)
                await self.holds.release(pod, verdict, self._workload(facts),
                                        facts.workload.kind if facts.workload else "Deployment")
        elif not dry_run and verdict.reason in (AllowReason.CAPACITY,
                                                AllowReason.STAND_IN_READY):
            self.view.let_go(pod)
            if HOLD_ANNOTATION in annotations_of(pod) and facts.held_for is not None:
                self.holds.allowed(pod, facts.held_for)
        return verdict

    def _workload(self, facts: Facts) -> Obj | None:
        """The pod's Deployment, StatefulSet or LeaderWorkerSet, for the release's Event."""
        if facts.workload is None:
            return None
        key = f"{facts.pod.namespace}/{facts.workload.name}"
        if facts.workload.kind == "LeaderWorkerSet":
            return self.view.lws_cache().get(key)
        informer = (self.view.statefulsets if facts.workload.kind == "StatefulSet"
                    else self.view.deployments)
        return informer.get(key)
