"""Retries: backoff with jitter honouring Retry-After (pure: the caller passes the random
source), and read-decide-write on conflict, as client-go's retry.RetryOnConflict
(util/retry/util.go): a 409 means another writer won; read again and decide again; and
retrying an idempotent request after a transient failure (retry_transient)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from drainsafe.kube.errors import Conflict, KubeError

if TYPE_CHECKING:
    from drainsafe.kube.client import KubeClient

T = TypeVar("T")
R = TypeVar("R")


class KeptChanging(RuntimeError):
    """Every attempt met a concurrent writer (409)."""


async def retry_on_conflict(
    client: KubeClient, path: str, decide: Callable[[dict[str, Any]], Awaitable[T]],
    *, attempts: int = 5, pause: float = 0.1,
) -> T:
    """Read the object at `path` and pass it to `decide`, which writes (guarded by its
    resourceVersion) and returns; a Conflict means someone else wrote first: read again."""
    return await retry_write(lambda: client.get(path), decide, what=path,
                             attempts=attempts, pause=pause)


async def retry_write(
    read: Callable[[], Awaitable[R]], decide: Callable[[R], Awaitable[T]], *, what: str,
    attempts: int = 5, pause: float = 0.1,
) -> T:
    """The loop behind retry_on_conflict, for a read of its own (one that may find nothing,
    so `decide` creates; a 409 AlreadyExists then means another writer created it first)."""
    for attempt in range(attempts):
        current = await read()
        try:
            return await decide(current)
        except Conflict:
            await asyncio.sleep(pause * (attempt + 1))
    raise KeptChanging(f"{what}: the object kept changing (409 on every attempt)")


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff with "equal jitter".

    Half of each step is fixed and half random, so retries from many clients spread out
    (the thundering-herd reason for jitter) yet never retry immediately. A server's
    Retry-After is a floor: we never come back earlier than it asked.
    """

    base: float = 0.5
    cap: float = 10.0
    factor: float = 2.0

    def delay(
        self, attempt: int, rng: random.Random, retry_after: float | None = None
    ) -> float:
        step = min(self.cap, self.base * self.factor ** max(attempt, 0))
        jittered = step / 2 + rng.uniform(0, step / 2)
        if retry_after is not None and retry_after > 0:
            # Spread clients told the same Retry-After by up to 10 % of it.
            return max(jittered, retry_after + rng.uniform(0, retry_after * 0.1))
        return jittered


async def retry_transient(
    call: Callable[[], Awaitable[T]], *, backoff: Backoff, rng: random.Random,
    retries: int, sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> T:
    """`call` (an idempotent request) again after each retryable failure (5xx, timeout,
    reset, rate limit: KubeError.retryable), up to `retries` more times, waiting with
    `backoff` (Retry-After as its floor); a non-retryable error is raised at once."""
    attempt = 0
    while True:
        try:
            return await call()
        except KubeError as exc:
            if not exc.retryable or attempt >= retries:
                raise
            await sleep(backoff.delay(attempt, rng, exc.retry_after))
            attempt += 1
