"""The guard, assembled: one replica's view, reviewer and (when it leads) reconciler.

- drainsafe.controller.view: the informers and the facts read from them;
- drainsafe.controller.reviewer: answers AdmissionReviews (every replica);
- drainsafe.controller.reconciler: the leader's surge and restore;
- drainsafe.controller.holds and .events: a hold's writes on the pod, and Events.

The clocks are injected (drainsafe.controller.clock), so none of these reads the time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drainsafe.controller.clock import Clock
from drainsafe.controller.config import ControllerConfig
from drainsafe.controller.engine import SurgeEngine
from drainsafe.controller.events import EventRecorder
from drainsafe.controller.holds import Holds
from drainsafe.controller.leader import LeaderElector
from drainsafe.controller.metrics import GuardMetrics
from drainsafe.controller.reconciler import Reconciler
from drainsafe.controller.reviewer import Reviewer
from drainsafe.controller.view import ClusterView
from drainsafe.kube import KubeClient


class Guard:
    def __init__(self, client: KubeClient, cfg: ControllerConfig, *,
                 engine: SurgeEngine | None, elector: LeaderElector,
                 metrics: GuardMetrics | None = None, clock: Clock | None = None) -> None:
        self.cfg, self.elector = cfg, elector
        self.clock = clock or Clock()
        self.metrics = metrics or GuardMetrics()
        self.view = ClusterView(client, self.clock)
        self.events = EventRecorder(client, instance=cfg.identity, wall=self.clock.wall)
        self.holds = Holds(client, self.view, self.events, self.metrics, self.clock)
        self.reviewer = Reviewer(self.view, self.holds, cfg, engine=engine,
                                 metrics=self.metrics, clock=self.clock)
        self.reconciler = Reconciler(self.view, self.reviewer, self.holds, self.events,
                                     engine, self.metrics)

    async def start(self) -> None:
        await self.view.start()

    async def stop(self) -> None:
        await self.events.stop()
        await self.view.stop()

    async def review(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.reviewer.review(body)

    async def run_reconciler(self) -> None:
        await self.reconciler.run(self.elector, self.cfg.reconcile_seconds)
