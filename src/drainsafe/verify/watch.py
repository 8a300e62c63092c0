"""The shell around LifecycleTracker: list+watch pods and EndpointSlices while load runs.

Uses drainsafe.kube's Informer (its own list+watch loop with relist on 410 and reconnects), so
verify does not carry another watch loop. Every watch event is stamped with the time verify saw
it, on the same clock as the requests.
"""

from __future__ import annotations

import time

from drainsafe.kube.client import KubeClient, Obj, api_path
from drainsafe.kube.watch import Informer
from drainsafe.verify.lifecycle import LifecycleTracker
from drainsafe.verify.podmetrics import PodMetricsReader
from drainsafe.verify.record import EventCallback, LifecycleEvent


class LifecycleWatch:
    def __init__(self, client: KubeClient, namespace: str, selector: str | None,
                 clock_zero: tuple[float, float], on_event: EventCallback | None = None,
                 metrics: PodMetricsReader | None = None) -> None:
        self._loop_zero, wall_zero = clock_zero
        self._metrics = metrics
        self._tracker = LifecycleTracker(started_at=wall_zero)
        self._on_event = on_event
        self._initial = True
        self.events: list[LifecycleEvent] = []
        self._pods = Informer(client, api_path("v1", "pods", namespace=namespace),
                              label_selector=selector, on_event=self._pod_event)
        # All slices of the namespace: the tracker keeps only endpoints of the watched pods,
        # so no Service name is needed.
        self._slices = Informer(
            client, api_path("discovery.k8s.io/v1", "endpointslices", namespace=namespace),
            on_event=self._slice_event)

    def _now(self) -> float:
        return round(time.monotonic() - self._loop_zero, 3)

    def _emit(self, events: list[LifecycleEvent]) -> None:
        for event in events:
            self.events.append(event)
            if self._on_event is not None:
                self._on_event(event)

    def _pod_event(self, kind: str, pod: Obj) -> None:
        if kind == "DELETED":
            name = str((pod.get("metadata") or {}).get("name", ""))
            # A deletion can be the first time the final state is seen (fast exits).
            self._emit(self._tracker.pod_seen(self._now(), pod, initial=self._initial))
            self._emit(self._tracker.pod_gone(self._now(), name))
            if self._metrics is not None:
                self._metrics.pod_gone(name)
        else:
            self._emit(self._tracker.pod_seen(self._now(), pod, initial=self._initial))
            if self._metrics is not None:
                self._metrics.pod_seen(pod)

    def _slice_event(self, kind: str, endpoint_slice: Obj) -> None:
        if kind == "DELETED":
            name = str((endpoint_slice.get("metadata") or {}).get("name", ""))
            self._emit(self._tracker.slice_gone(self._now(), name))
        else:
            self._emit(self._tracker.slice_seen(self._now(), endpoint_slice))

    async def start(self, *, sync_timeout: float = 30.0) -> None:
        await self._pods.start(sync_timeout=sync_timeout)
        try:
            await self._slices.start(sync_timeout=sync_timeout)
        except BaseException:
            await self._pods.stop()
            raise
        self._initial = False

    async def stop(self) -> None:
        await self._slices.stop()
        await self._pods.stop()
