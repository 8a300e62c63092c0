"""The node's progress record while a drain runs: which pods it evicted, and its state.

drain.ownership defines the record (annotation drainsafe.io/drain-progress) and its
patches; `NodeProgress` is the one writer during a node's drain. It cordons (drain.cordon,
read-decide-write on conflict) and so reads back what an earlier run recorded, then
writes the record after every accepted eviction and at the end (drained, failed,
interrupted), one write at a time, retrying a transient failure (kube.retry). A rerun
reads the record back: a pod listed as evicted is never evicted again (drain.evict.guard).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

from drainsafe.drain import ownership
from drainsafe.drain.cordon import cordon
from drainsafe.kube import KubeClient, api_path
from drainsafe.kube.objects import rfc3339
from drainsafe.kube.retry import Backoff, retry_transient


class NodeProgress:
    def __init__(self, client: KubeClient, node: str, *, backoff: Backoff,
                 rng: random.Random, retries: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.node = node
        self.backoff = backoff
        self.rng = rng
        self.retries = retries
        self.clock = clock
        self.record = ownership.Progress()
        self._lock = asyncio.Lock()

    async def cordon(self, *, reason: str, state: ownership.ProgressState = "draining") -> None:
        """Cordon with the ownership record; keeps what an earlier run recorded."""
        self.record = await cordon(self.client, self.node, reason=reason, state=state,
                                   attempts=self.retries, clock=self.clock)

    def evicted_uid(self, key: str) -> str | None:
        """The UID the record lists as evicted under the pod key "ns/name"."""
        return self.record.evicted.get(key)

    async def write(self, state: ownership.ProgressState, detail: str) -> None:
        async with self._lock:
            self.record.state = state
            self.record.detail = detail
            self.record.updated = rfc3339(self.clock())
            body = ownership.progress_patch(self.record)
            path = api_path("v1", "nodes", name=self.node)
            await retry_transient(lambda: self.client.patch(path, body),
                                  backoff=self.backoff, rng=self.rng, retries=self.retries)

    async def evicted(self, key: str, uid: str) -> None:
        """Record an accepted eviction (before anything else is decided about the pod)."""
        self.record.evicted[key] = uid
        await self.write("draining", f"evicted {key}")
