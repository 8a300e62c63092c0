"""A hold's effects: its start and its release written on the pod, its Events and metrics.

Every replica answers reviews, and the leader releases holds too, so two writers can reach
the same pod at the same instant. Each annotation (drainsafe.controller.record) is written
once, first writer wins: the pod is read and patched with the resourceVersion read, a merge
patch carrying metadata.resourceVersion being a precondition (a 409 when the pod changed
in between, client-go util/retry RetryOnConflict, kube.retry.retry_on_conflict), and a
writer that finds the annotation already there keeps the stored value. So every replica
measures the hold limit from one start, and the first-hold metric, the EvictionHeld and
EvictionHoldReleased Events are each written once. The object the server returned is
handed to the view (ClusterView.confirm), which is how this replica sees its own write
before its watch does; the informer caches themselves hold only what the server sent.
"""

from __future__ import annotations

import logging
from typing import Any

from drainsafe.controller.clock import Clock
from drainsafe.controller.decision import Hold, Release, SurgeKind
from drainsafe.controller.events import EventRecorder
from drainsafe.controller.metrics import GuardMetrics
from drainsafe.controller.record import HOLD_ANNOTATION, RELEASED_ANNOTATION, annotations_of
from drainsafe.controller.view import ClusterView
from drainsafe.kube import KubeClient, KubeError, api_path
from drainsafe.kube.objects import key_of, meta, rfc3339, uid_of
from drainsafe.kube.retry import KeptChanging, retry_on_conflict

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class _Replaced(Exception):
    """The pod at this name is another pod now (another UID)."""


class Holds:
    def __init__(self, client: KubeClient, view: ClusterView, events: EventRecorder,
                 metrics: GuardMetrics, clock: Clock) -> None:
        self.client, self.view, self.events = client, view, events
        self.metrics, self.clock = metrics, clock

    async def begin(self, pod: Obj, verdict: Hold) -> None:
        """Record the start of the hold on the pod, unless a replica already did."""
        if HOLD_ANNOTATION in annotations_of(pod):
            return
        if await self._write_once(pod, HOLD_ANNOTATION, rfc3339(self.clock.wall())):
            self.metrics.holds.inc()
            self.events.emit(pod, "Pod", "EvictionHeld", verdict.message)

    async def release(self, pod: Obj, verdict: Release, workload: Obj | None,
                      kind: SurgeKind = "Deployment") -> None:
        """Give the hold up: the reason on the pod, and Warning Events saying why."""
        if RELEASED_ANNOTATION in annotations_of(pod):
            return
        if not await self._write_once(pod, RELEASED_ANNOTATION, str(verdict.reason)):
            return
        self.metrics.releases.labels(str(verdict.reason)).inc()
        self.events.emit(pod, "Pod", "EvictionHoldReleased", verdict.message, "Warning")
        if workload is not None:
            self.events.emit(workload, kind, "EvictionHoldReleased",
                             verdict.message, "Warning")

    def allowed(self, pod: Obj, held_for: float) -> None:
        """A held pod's eviction is let through: its stand-in is Available."""
        self.metrics.hold_seconds.observe(held_for)
        self.events.emit(pod, "Pod", "EvictionAllowed",
                         f"a stand-in is Available after {held_for:.0f} s; "
                         "the eviction may go ahead")

    async def _write_once(self, pod: Obj, annotation: str, value: str) -> bool:
        """Write `annotation` on the pod unless it is there; True when this call wrote it."""
        m = meta(pod)
        path = api_path("v1", "pods", namespace=str(m.get("namespace")),
                        name=str(m.get("name")))
        uid = uid_of(pod)

        async def decide(current: Obj) -> tuple[Obj, bool]:
            if uid and uid_of(current) != uid:
                raise _Replaced
            if annotation in annotations_of(current):
                return current, False
            patched = await self.client.patch(path, {"metadata": {
                "resourceVersion": meta(current).get("resourceVersion"),
                "annotations": {annotation: value}}})
            return patched, True

        try:
            stored, wrote = await retry_on_conflict(self.client, path, decide)
        except (KubeError, KeptChanging, _Replaced) as exc:
            log.warning("could not annotate %s with %s: %r", key_of(pod), annotation, exc)
            return False
        self.view.confirm(stored, {annotation: annotations_of(stored).get(annotation, value)})
        return wrote
