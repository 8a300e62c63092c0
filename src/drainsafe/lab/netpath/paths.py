"""Wiring: Services and EndpointSlices from the API to each traffic path, each late by its
own propagation delay."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.lab.netpath.endpoints import Key, ServiceView, service_views
from drainsafe.lab.netpath.ingress import IngressPath
from drainsafe.lab.netpath.l4 import L4Proxy
from drainsafe.lab.netpath.propagation import DelayedFeed, Propagation


@dataclass
class Consumer:
    name: str
    delay: float
    feed: DelayedFeed[dict[Key, ServiceView]]
    view: dict[Key, ServiceView]


class NetPaths:
    """The ClusterIP (L4) path and, optionally, the nginx ingress path of one lab."""

    def __init__(self, client: KubeClient, *, propagation: Propagation, workdir: Path,
                 ingress: bool = True, rng: random.Random | None = None) -> None:
        self.client = client
        self.rng = rng or random.Random()
        self.propagation = propagation
        self.l4 = L4Proxy(self.rng)
        self.ingress = IngressPath(workdir / "ingress") if ingress else None
        self.consumers: dict[str, Consumer] = {}
        self._add("clusterip", self.l4.apply)
        if self.ingress is not None:
            self._add("ingress", self.ingress.apply)
        self.services = Informer(client, api_path("v1", "services"), on_event=self._changed)
        self.slices = Informer(client, api_path("discovery.k8s.io/v1", "endpointslices"),
                               on_event=self._changed)
        self._scheduled = False
        self.current: dict[Key, ServiceView] = {}

    def _add(self, name: str,
             apply: Callable[[Mapping[Key, ServiceView]], Awaitable[None]]) -> None:
        consumer = Consumer(name, self.propagation.draw(self.rng),
                            DelayedFeed(0.0, self._noop), {})

        async def applied(view: dict[Key, ServiceView]) -> None:
            await apply(view)
            consumer.view = view
        consumer.feed = DelayedFeed(consumer.delay, applied)
        self.consumers[name] = consumer

    @staticmethod
    async def _noop(view: dict[Key, ServiceView]) -> None:
        return None

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        # Coalesce a burst of events into one snapshot per loop turn.
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._publish)

    def _publish(self) -> None:
        self._scheduled = False
        self.current = service_views(self.services.cache.values(), self.slices.cache.values())
        for consumer in self.consumers.values():
            consumer.feed.push(self.current)

    async def start(self) -> None:
        await asyncio.gather(self.services.start(sync_timeout=30),
                             self.slices.start(sync_timeout=30))

    def known(self, path: str, namespace: str, name: str) -> ServiceView | None:
        """The Service as the given path currently sees it (after propagation)."""
        return self.consumers[path].view.get((namespace, name))

    async def stop(self) -> None:
        await asyncio.gather(self.services.stop(), self.slices.stop())
        for consumer in self.consumers.values():
            await consumer.feed.close()
        await self.l4.close()
        if self.ingress is not None:
            await self.ingress.close()
