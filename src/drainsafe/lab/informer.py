"""A small informer over lightkube: list, then watch from the list's resourceVersion.

What client-go's reflector does, reduced to what the node side needs: a cache of objects
(as plain dicts) and a callback per change. When the watch ends with 410 Expired (a
resourceVersion too old, sent as an ERROR event in a 200 stream: k8s.io/apiserver
pkg/storage/cacher/cacher.go), or breaks, it lists again and reports the difference, so no
deletion is lost across the gap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.core.exceptions import ObjectDeleted
from lightkube.types import OnErrorAction, OnErrorResult

from drainsafe.kube.watch import relist_events

log = logging.getLogger(__name__)

Key = tuple[str, str]
Handler = Callable[[str, dict[str, Any]], None]


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Informer:
    def __init__(self, client: AsyncClient, resource: Any, *, on_event: Handler,
                 fields: dict[str, Any] | None = None, namespace: str = "*",
                 retry_seconds: float = 0.5) -> None:
        self.client = client
        self.resource = resource
        self.on_event = on_event
        self.fields = fields
        self.namespace = namespace
        self.retry_seconds = retry_seconds
        self.cache: dict[Key, dict[str, Any]] = {}
        self.synced = asyncio.Event()

    async def run(self) -> None:
        while True:
            try:
                version = await self._relist()
                self.synced.set()
                await self._watch(version)
            except asyncio.CancelledError:
                raise
            except (httpx2.HTTPError, ApiError, ObjectDeleted, OSError) as exc:
                log.debug("informer %s: %s; relisting", self.resource.__name__, exc)
            await asyncio.sleep(self.retry_seconds)

    async def _relist(self) -> str:
        listing = self.client.list(self.resource, namespace=self.namespace, fields=self.fields)
        fresh: dict[Key, dict[str, Any]] = {}
        async for obj in listing:
            data = obj.to_dict()
            fresh[key_of(data)] = data
        version = str(listing.resourceVersion)
        events = relist_events(self.cache, fresh)
        self.cache = fresh
        for kind, data in events:
            self.on_event(kind, data)
        return version

    async def _watch(self, version: str) -> None:
        def stop(exc: Exception, count: int) -> OnErrorResult:
            # Any break (410 Expired included) ends this watch; run() relists.
            return OnErrorResult(OnErrorAction.STOP)

        stream = self.client.watch(self.resource, namespace=self.namespace, fields=self.fields,
                                   resource_version=version, on_error=stop)
        async for kind, obj in stream:
            if kind == "BOOKMARK":
                continue
            data = obj.to_dict()
            key = key_of(data)
            if kind == "DELETED":
                self.cache.pop(key, None)
            else:
                self.cache[key] = data
            self.on_event(kind, data)

