"""The seam to the surge engine of `drainsafe drain` (one implementation of surge/restore).

The guard does not scale anything itself. It asks the engine that `drainsafe drain --surge`
uses (drainsafe.drain.scale: record the scale or the HPA's bounds on the Deployment before
any change, scale up or raise the HPA's minReplicas, restore exactly the recorded values,
also after a crash) through this Protocol, so both tools share one record format
(drainsafe.drain.ownership.SurgeRecord) and never surge the same workload twice.

The Protocol speaks the engine's own record type, and `DrainScaleEngine` calls
drainsafe.drain.scale's functions by name with typed arguments, so a rename or a changed
signature on the engine's side fails at import and in mypy, never silently at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from drainsafe.drain import scale
from drainsafe.drain.ownership import SurgeRecord
from drainsafe.kube import KubeClient
from drainsafe.kube.objects import WorkloadRef


class SurgeEngine(Protocol):
    def record_of(self, deployment: Mapping[str, Any]) -> SurgeRecord | None:
        """The surge record on a Deployment, or None (also when it is unreadable)."""

    async def begin(self, workload: WorkloadRef, *, node: str, autoscaler: str | None,
                    pods: dict[str, str]) -> SurgeRecord:
        """Record the guard's surge (or return the record already there, which may be a
        `drainsafe drain`'s: see its `guard`); changes no scale."""

    async def set_scale(self, workload: WorkloadRef, record: SurgeRecord, target: int
                        ) -> None:
        """Scale to `target` (raising the HPA's bounds first when there is one)."""

    async def finish(self, workload: WorkloadRef, record: SurgeRecord) -> None:
        """Restore exactly the recorded scale and bounds, then remove the record."""


class DrainScaleEngine:
    """SurgeEngine over drainsafe.drain.scale, bound to one client."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    def record_of(self, deployment: Mapping[str, Any]) -> SurgeRecord | None:
        try:
            return SurgeRecord.of(deployment)
        except ValueError:
            return None

    async def begin(self, workload: WorkloadRef, *, node: str, autoscaler: str | None,
                    pods: dict[str, str]) -> SurgeRecord:
        return await scale.begin(self._client, str(workload), node=node,
                                 autoscaler=autoscaler, pods=pods, guard=True)

    async def set_scale(self, workload: WorkloadRef, record: SurgeRecord, target: int
                        ) -> None:
        await scale.set_scale(self._client, str(workload), record, target)

    async def finish(self, workload: WorkloadRef, record: SurgeRecord) -> None:
        await scale.finish(self._client, str(workload), record)


def load_engine(client: KubeClient) -> SurgeEngine:
    """The drain's surge engine, bound to `client`."""
    return DrainScaleEngine(client)
