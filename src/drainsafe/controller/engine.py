"""The seam to the surge engine of `drainsafe drain` (one implementation of surge/restore).

The guard does not scale anything itself. It asks the engine that `drainsafe drain --surge`
uses (drainsafe.drain.scale: record the scale or the HPA's bounds on the Deployment before
any change, scale up or raise the HPA's minReplicas, restore exactly the recorded values,
also after a crash) through this Protocol, so both tools share one record format and never
surge the same workload twice.

`load_engine` binds the Protocol to drainsafe.drain.scale by plain imports, so a rename on
the engine's side fails at import and in mypy, never silently at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from drainsafe.drain import ownership, scale
from drainsafe.kube import KubeClient


class SurgeRecordView(Protocol):
    """The parts of the engine's record the guard reads."""

    @property
    def replicas(self) -> int: ...

    @property
    def pods(self) -> Mapping[str, str]: ...

    @property
    def guard(self) -> bool:
        """Written by the guard (True) or by a `drainsafe drain` (False)."""


class SurgeEngine(Protocol):
    def record_of(self, deployment: Mapping[str, Any]) -> SurgeRecordView | None:
        """The surge record on a Deployment, or None."""

    async def begin(self, workload: str, *, node: str, autoscaler: str | None,
                    pods: dict[str, str]) -> SurgeRecordView:
        """Record the guard's surge (or return the record already there, which may be a
        `drainsafe drain`'s: see its `guard`); changes no scale."""

    async def set_scale(self, workload: str, record: SurgeRecordView, target: int) -> None:
        """Scale to `target` (raising the HPA's bounds first when there is one)."""

    async def finish(self, workload: str, record: SurgeRecordView) -> None:
        """Restore exactly the recorded scale and bounds, then remove the record."""


class DrainScaleEngine:
    """SurgeEngine over drainsafe.drain.scale and drainsafe.drain.ownership.SurgeRecord."""

    def __init__(self, client: KubeClient, scale: Any, record_type: Any) -> None:
        self._client = client
        self._scale = scale
        self._record_type = record_type

    def record_of(self, deployment: Mapping[str, Any]) -> SurgeRecordView | None:
        try:
            record: SurgeRecordView | None = self._record_type.of(deployment)
        except ValueError:
            return None
        return record

    async def begin(self, workload: str, *, node: str, autoscaler: str | None,
                    pods: dict[str, str]) -> SurgeRecordView:
        record: SurgeRecordView = await self._scale.begin(
            self._client, workload, node=node, autoscaler=autoscaler, pods=pods, guard=True)
        return record

    async def set_scale(self, workload: str, record: SurgeRecordView, target: int) -> None:
        await self._scale.set_scale(self._client, workload, record, target)

    async def finish(self, workload: str, record: SurgeRecordView) -> None:
        await self._scale.finish(self._client, workload, record)


def load_engine(client: KubeClient) -> SurgeEngine:
    """The drain's surge engine, bound to `client`."""
    return DrainScaleEngine(client, scale, ownership.SurgeRecord)
