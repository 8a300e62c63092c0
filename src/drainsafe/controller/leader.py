"""One leader among the replicas, with a coordination.k8s.io/v1 Lease.

As client-go's leaderelection (tools/leaderelection/leaderelection.go, resourcelock
LeaseLock): a candidate takes the Lease when it is absent, held by itself, or not renewed
for leaseDurationSeconds; every write carries the resourceVersion it read, so two candidates
never both win (409 for the loser). The holder renews every `retry` seconds and stops
acting as leader as soon as a renewal fails past its own deadline.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from drainsafe.kube import KubeClient, KubeError, NotFound, api_path
from drainsafe.kube.objects import parse_time, rfc3339_micro

log = logging.getLogger(__name__)


def may_take(lease: dict[str, Any] | None, identity: str, now: dt.datetime) -> bool:
    """Is the Lease free for `identity` (absent, ours, or expired)? Pure."""
    if lease is None:
        return True
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if not holder or holder == identity:
        return True
    renewed = parse_time(spec.get("renewTime"))
    if renewed is None:
        renewed = parse_time(spec.get("acquireTime"))
    duration = float(spec.get("leaseDurationSeconds") or 15)
    return renewed is None or now.timestamp() - renewed > duration


class LeaderElector:
    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str, *,
                 lease_seconds: float = 15.0, retry_seconds: float = 2.0,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self.client = client
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds, self.retry_seconds = lease_seconds, retry_seconds
        self.clock = clock
        self.is_leader = False
        self.changed = asyncio.Event()
        self._renewed_at: dt.datetime | None = None

    @property
    def path(self) -> str:
        return api_path("coordination.k8s.io/v1", "leases", namespace=self.namespace,
                        name=self.name)

    async def try_once(self) -> bool:
        """One acquire-or-renew attempt; returns whether we hold the Lease now."""
        now = self.clock()
        try:
            lease: dict[str, Any] | None = await self.client.get(self.path)
        except NotFound:
            lease = None
        if not may_take(lease, self.identity, now):
            return False
        spec = dict((lease or {}).get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = rfc3339_micro(now.timestamp())
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if lease is not None else 0)
        spec.update(holderIdentity=self.identity, renewTime=rfc3339_micro(now.timestamp()),
                    leaseDurationSeconds=int(self.lease_seconds))
        if lease is None:
            await self.client.post(
                api_path("coordination.k8s.io/v1", "leases", namespace=self.namespace),
                {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec})
        else:
            body = {**lease, "spec": spec}
            await self.client.request("PUT", self.path, body=body)
        return True

    async def run(self) -> None:
        """Acquire and renew forever; `is_leader` follows."""
        while True:
            try:
                held = await self.try_once()
                if held:
                    self._renewed_at = self.clock()
            except KubeError as exc:  # a 409 means someone else wrote first
                log.info("lease %s/%s: %s", self.namespace, self.name, exc)
                held = False
            if not held and self.is_leader and self._renewed_at is not None:
                # keep leading until our own last renewal would have expired
                age = (self.clock() - self._renewed_at).total_seconds()
                held = age < self.lease_seconds * 2 / 3
            if held != self.is_leader:
                self.is_leader = held
                log.info("%s is %s", self.identity, "the leader" if held else "not the leader")
                self.changed.set()
            await asyncio.sleep(self.retry_seconds)

    async def release(self) -> None:
        """Give the Lease up on a clean stop, so another replica takes over at once."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            lease = await self.client.get(self.path)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") == self.identity:
                spec["holderIdentity"] = None
                await self.client.request("PUT", self.path, body={**lease, "spec": spec})
        except KubeError as exc:
            log.info("could not release lease: %s", exc)
