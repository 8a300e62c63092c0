"""The NodeMaintenance reconciler's status writes: read, change, write, one writer at a time.

Status goes through the status subresource with the resourceVersion read (a 409 is read
again: kube.retry.retry_on_conflict), one writer per NodeMaintenance at a time (the pass
that plans a wave and the node tasks that report their steps share it). Each write is
completed by controller.maintenance_readout (the node table and conditions) and, once the
API server accepted it, gives that change's Events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from drainsafe.controller.maintenance_readout import MaintenanceReadout
from drainsafe.kube import KubeClient, KubeError, api_path
from drainsafe.kube.objects import meta, rfc3339
from drainsafe.kube.retry import KeptChanging, retry_on_conflict
from drainsafe.maintenance.maintained import Recorded
from drainsafe.maintenance.progress import NodeProgress, NodeState, read_nodes, status_of
from drainsafe.maintenance.reasons import NodeReason
from drainsafe.maintenance.spec import MaintenanceSpec

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class StatusWriter:
    def __init__(self, client: KubeClient, readout: MaintenanceReadout,
                 clock: Callable[[], float]) -> None:
        self.client, self.readout, self.clock = client, readout, clock
        self._writes: dict[str, asyncio.Lock] = {}  # one status writer per NodeMaintenance

    async def put(self, name: str, decide: Callable[[Obj], Obj | None]) -> bool:
        """Read, change the status, write it with the resourceVersion read (409: again);
        whether it is written (or was already so)."""
        async def write(obj: Obj) -> None:
            old = obj.get("status") or {}
            status = decide(obj)
            if status is not None:
                status = self.readout.complete(obj, status)
            if status is not None and status != old:
                await self.client.request(
                    "PUT", api_path("drainsafe.io/v1alpha1", "nodemaintenances", name=name,
                                    subresource="status"), body={**obj, "status": status})
                self.readout.written(obj, old, status)

        async with self._writes.setdefault(name, asyncio.Lock()):
            try:
                await retry_on_conflict(
                    self.client,
                    api_path("drainsafe.io/v1alpha1", "nodemaintenances", name=name), write)
                return True
            except (KubeError, KeptChanging) as exc:
                log.warning("NodeMaintenance %s: status not written: %s", name, exc)
                return False

    async def update(self, name: str, spec: MaintenanceSpec,
                     changes: dict[str, Callable[[NodeProgress], NodeProgress]], *,
                     current_wave: int | None = None) -> None:
        def decide(obj: Obj) -> Obj:
            old = obj.get("status") or {}
            nodes = read_nodes(old)
            for node, change in changes.items():
                nodes[node] = change(nodes.get(node) or NodeProgress(node))
            wave = int(old.get("currentWave") or 0) if current_wave is None else current_wave
            # paused as the object says now, not as when the node's task began
            paused = bool((obj.get("spec") or {}).get("paused", spec.paused))
            return {**old, **status_of(nodes.values(), spec.uncordon, paused, wave,
                                       int(meta(obj).get("generation") or 0))}

        await self.put(name, decide)

    async def step(self, name: str, spec: MaintenanceSpec, node: str, state: NodeState,
                   reason: NodeReason, message: str = "", *, finished: bool = False,
                   recorded: Recorded | None = None) -> str | None:
        """One node's row to `state` (and its finish time, when the step completes it);
        the finish time written, if any."""
        end = rfc3339(self.clock()) if finished else None
        await self.update(name, spec, {
            node: lambda p: p.to(state, reason, message, finished=end, recorded=recorded)})
        return end

    async def failed(self, name: str, reason: str, message: str) -> None:
        """The whole operation Failed (an invalid spec, no node selected)."""
        def decide(obj: Obj) -> Obj:
            old = obj.get("status") or {}
            return {**old, "phase": "Failed", "conditions": [{
                "type": "Failed", "status": "True", "reason": reason,
                "message": message, "lastTransitionTime": rfc3339(self.clock())}]}

        await self.put(name, decide)
