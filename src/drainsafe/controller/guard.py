"""The guard: answers eviction reviews from the shared view; the leader surges and restores.

Every replica answers reviews (`review`): it reads the pod from its cache (the Eviction
carries no pod labels), gathers the facts, asks the pure decision, and answers. Holding
writes `drainsafe.io/eviction-held-since` on the pod (once), which is how the leader learns
that a stand-in is wanted and how every replica agrees on when the hold began.

Only the leader (drainsafe.controller.leader) changes scales (`reconcile`): for each
Deployment with a pod the decision holds for a stand-in (a Hold with a surge, never one
waiting for room or a rollout) it records and starts a surge through the drain's surge engine
(drainsafe.controller.engine) to the recorded scale plus one per held pod, and restores the
recorded scale once no held pod is left (evicted, gone, or released). It works from the
record on the Deployment and the annotations on the pods, so a new leader finishes or
restores what the previous one started. A hold the drainer stopped retrying is released by
the leader after the hold limit too, so no surge outlives its reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Mapping
from typing import Any

from drainsafe.controller.config import ControllerConfig
from drainsafe.controller.decision import Allow, AllowReason, Facts, Hold, Release, decide
from drainsafe.controller.engine import SurgeEngine
from drainsafe.controller.events import record_event
from drainsafe.controller.leader import LeaderElector
from drainsafe.controller.metrics import GuardMetrics
from drainsafe.controller.record import (
    HOLD_ANNOTATION,
    RELEASED_ANNOTATION,
    rfc3339,
)
from drainsafe.controller.view import (
    gather,
    held_pods,
    is_active,
    pod_key,
    workload_pods,
)
from drainsafe.drain.ownership import SurgeRecord
from drainsafe.kube import Informer, KubeClient, KubeError, NotFound, api_path
from drainsafe.kube.objects import WorkloadRef

log = logging.getLogger(__name__)
Obj = dict[str, Any]
LET_GO_SECONDS = 10.0


def review_response(uid: str, verdict: Allow | Hold | Release, *, retry_after: int
                    ) -> dict[str, Any]:
    """The AdmissionReview v1 answer for a verdict. Pure."""
    response: dict[str, Any] = {"uid": uid, "allowed": not isinstance(verdict, Hold)}
    if isinstance(verdict, Hold):
        status: dict[str, Any] = {"code": 429, "reason": "TooManyRequests",
                                  "message": verdict.message}
        if retry_after > 0:
            status["details"] = {"retryAfterSeconds": retry_after}
        response["status"] = status
    elif isinstance(verdict, Release):
        response["warnings"] = [f"drainsafe guard released the hold: {verdict.message}"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": response}


class Guard:
    def __init__(self, client: KubeClient, cfg: ControllerConfig, *,
                 engine: SurgeEngine | None, elector: LeaderElector,
                 metrics: GuardMetrics | None = None) -> None:
        self.client, self.cfg, self.engine, self.elector = client, cfg, engine, elector
        self.metrics = metrics or GuardMetrics()
        self.pods = Informer(client, "/api/v1/pods")
        self.deployments = Informer(client, "/apis/apps/v1/deployments")
        self.replicasets = Informer(client, "/apis/apps/v1/replicasets")
        self.nodes = Informer(client, "/api/v1/nodes")
        self.namespaces = Informer(client, "/api/v1/namespaces")
        self.autoscalers = Informer(client, "/apis/autoscaling/v2/horizontalpodautoscalers")
        self._informers = [self.pods, self.deployments, self.replicasets, self.nodes,
                           self.namespaces, self.autoscalers]
        self._let_go: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await asyncio.gather(*(i.start() for i in self._informers))

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(i.stop() for i in self._informers))

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- answering (every replica) ------------------------------------------------

    def _facts(self, pod: Obj, *, dry_run: bool, now: dt.datetime) -> Facts:
        ns = (pod.get("metadata") or {}).get("namespace")
        mono = time.monotonic()
        self._let_go = {k: t for k, t in self._let_go.items() if mono - t < LET_GO_SECONDS}
        facts = gather(pod, namespace=self.namespaces.get(str(ns)),
                       deployments=self.deployments.cache, replicasets=self.replicasets.cache,
                       pods=self.pods.cache, nodes=self.nodes.cache,
                       record_of=self._record_of, let_go=self._let_go, now=now,
                       dry_run=dry_run)
        return dataclasses.replace(facts, can_surge=self.engine is not None)

    def _record_of(self, deployment: Mapping[str, Any]) -> SurgeRecord | None:
        return self.engine.record_of(deployment) if self.engine is not None else None

    async def _pod(self, namespace: str, name: str) -> Obj | None:
        pod = self.pods.get(f"{namespace}/{name}")
        if pod is not None:
            return pod
        try:  # a pod newer than the cache
            return await self.client.get(api_path("v1", "pods", namespace=namespace, name=name))
        except NotFound:
            return None

    async def review(self, body: Mapping[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        request = body.get("request") or {}
        uid = str(request.get("uid") or "")
        verdict: Allow | Hold | Release = Allow(AllowReason.NOT_OPTED_IN)
        if (request.get("resource") or {}).get("resource") == "pods" and \
                request.get("subResource") == "eviction":
            pod = await self._pod(str(request.get("namespace")), str(request.get("name")))
            if pod is not None:
                verdict = await self._answer(pod, dry_run=bool(request.get("dryRun")))
        self.metrics.reviews.labels(type(verdict).__name__.lower()).inc()
        self.metrics.review_seconds.observe(time.perf_counter() - started)
        return review_response(uid, verdict, retry_after=self.cfg.retry_after)

    async def _answer(self, pod: Obj, *, dry_run: bool) -> Allow | Hold | Release:
        now = dt.datetime.now(dt.UTC)
        facts = self._facts(pod, dry_run=dry_run, now=now)
        verdict = decide(facts, hold_limit=self.cfg.hold_limit)
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        key = pod_key(pod)
        if isinstance(verdict, Hold):
            if HOLD_ANNOTATION not in annotations:
                self.metrics.holds.inc()
                await self._annotate(pod, HOLD_ANNOTATION, rfc3339(now))
                self._background(record_event(
                    self.client, pod, reason="EvictionHeld", message=verdict.message,
                    kind="Pod", api_version="v1", instance=self.cfg.identity))
            return verdict
        if isinstance(verdict, Release):
            if not dry_run:
                self._let_go[key] = time.monotonic()
                if RELEASED_ANNOTATION not in annotations:
                    await self._release(pod, verdict, facts.workload.name
                                        if facts.workload is not None else None)
            return verdict
        if not dry_run and verdict.reason in (AllowReason.CAPACITY,
                                              AllowReason.STAND_IN_READY):
            self._let_go[key] = time.monotonic()
            if HOLD_ANNOTATION in annotations and facts.held_for is not None:
                self.metrics.hold_seconds.observe(facts.held_for)
                self._background(record_event(
                    self.client, pod, reason="EvictionAllowed",
                    message=f"a stand-in is Available after {facts.held_for:.0f} s; "
                            "the eviction may go ahead",
                    kind="Pod", api_version="v1", instance=self.cfg.identity))
        return verdict

    async def _annotate(self, pod: Obj, key: str, value: str) -> None:
        meta = pod.get("metadata") or {}
        path = api_path("v1", "pods", namespace=str(meta.get("namespace")),
                        name=str(meta.get("name")))
        try:
            await self.client.patch(path, {"metadata": {"annotations": {key: value}}})
        except KubeError as exc:
            log.warning("could not annotate %s: %s", pod_key(pod), exc)

    async def _release(self, pod: Obj, verdict: Release, deployment: str | None) -> None:
        self.metrics.releases.labels(str(verdict.reason)).inc()
        await self._annotate(pod, RELEASED_ANNOTATION, str(verdict.reason))
        self._background(record_event(
            self.client, pod, reason="EvictionHoldReleased", message=verdict.message,
            kind="Pod", api_version="v1", instance=self.cfg.identity, event_type="Warning"))
        ns = str((pod.get("metadata") or {}).get("namespace"))
        dep = self.deployments.get(f"{ns}/{deployment}") if deployment else None
        if dep is not None:
            self._background(record_event(
                self.client, dep, reason="EvictionHoldReleased", message=verdict.message,
                kind="Deployment", api_version="apps/v1", instance=self.cfg.identity,
                event_type="Warning"))

    # ---- surging (the leader) -----------------------------------------------------

    async def run_reconciler(self) -> None:
        while True:
            if self.elector.is_leader:
                try:
                    await self.reconcile()
                except Exception:  # the loop outlives any one bad pass; the next retries
                    log.exception("reconcile failed; retrying")
            await asyncio.sleep(self.cfg.reconcile_seconds)

    def _autoscaler_of(self, deployment: Mapping[str, Any]) -> str | None:
        meta = deployment.get("metadata") or {}
        for hpa in self.autoscalers.cache.values():
            hmeta = hpa.get("metadata") or {}
            ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
            if hmeta.get("namespace") == meta.get("namespace") and \
                    ref.get("kind") == "Deployment" and ref.get("name") == meta.get("name"):
                return f"{hmeta.get('namespace')}/{hmeta.get('name')}"
        return None

    async def reconcile(self) -> None:
        """One pass over the Deployments: surge for held pods, restore when none is left."""
        if self.engine is None:
            return
        now = dt.datetime.now(dt.UTC)
        for dep in list(self.deployments.cache.values()):
            meta = dep.get("metadata") or {}
            members = workload_pods(dep, self.pods.cache.values(), self.replicasets.cache)
            # Holds the drainer stopped asking about are released here, with the same rule;
            # and only a hold the decision answers with a surge asks for one: a pod held for
            # room or for a rollout must not be surged for (a stand-in with no room is an
            # unschedulable pod, and its record would hide why the hold is released).
            wanting: set[str] = set()
            for p in members:
                annotations = (p.get("metadata") or {}).get("annotations") or {}
                if is_active(p) and HOLD_ANNOTATION in annotations \
                        and RELEASED_ANNOTATION not in annotations:
                    verdict = decide(self._facts(p, dry_run=False, now=now),
                                     hold_limit=self.cfg.hold_limit)
                    if isinstance(verdict, Release):
                        await self._release(p, verdict, str(meta.get("name")))
                        p.setdefault("metadata", {}).setdefault(
                            "annotations", {})[RELEASED_ANNOTATION] = str(verdict.reason)
                    elif isinstance(verdict, Hold) and verdict.surge_to is not None:
                        wanting.add(pod_key(p))
            held = held_pods(members)
            record = self.engine.record_of(dep)
            workload = WorkloadRef("Deployment", str(meta.get("namespace")),
                                   str(meta.get("name")))
            if record is not None and not record.guard:
                continue  # a `drainsafe drain` surge: it restores its own
            if record is None:
                if not wanting:
                    continue
                first = next(p for p in members if pod_key(p) in wanting)
                record = await self.engine.begin(
                    workload, node=str((first.get("spec") or {}).get("nodeName") or ""),
                    autoscaler=self._autoscaler_of(dep),
                    pods={pod_key(p): str(p["metadata"].get("uid")) for p in members
                          if pod_key(p) in wanting})
                if not record.guard:
                    continue  # a `drainsafe drain` recorded first: its surge, not ours
                self.metrics.surges.inc()
                self._background(record_event(
                    self.client, dep, reason="SurgeForEviction",
                    message=f"surging {record.replicas} -> {record.replicas + len(held)} "
                            f"for a stand-in of {', '.join(sorted(held))}",
                    kind="Deployment", api_version="apps/v1", instance=self.cfg.identity))
            if held:
                target = record.replicas + len(held)
                if int((dep.get("spec") or {}).get("replicas", 1)) != target:
                    await self.engine.set_scale(workload, record, target)
                continue
            await self.engine.finish(workload, record)
            self.metrics.restores.inc()
            self._background(record_event(
                self.client, dep, reason="SurgeRestored",
                message=f"restored to {record.replicas} replicas: no eviction is held",
                kind="Deployment", api_version="apps/v1", instance=self.cfg.identity))
