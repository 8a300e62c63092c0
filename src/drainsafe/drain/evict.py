"""The client side of an eviction: drainsafe evicting one pod through the Eviction API,
with typed outcomes and retries from a rate limiter. (The server side that answers it in
the lab is drainsafe.lab.apiserver.eviction.)

Modelled on Karpenter's terminator (pkg/controllers/node/termination/terminator/eviction.go:
a queue keyed by pod UID, retries from a rate limiter, "what to evict" apart from "how") and
kubectl's pkg/drain (EvictPod, a typed status per pod), with the gaps closed:

- `classify(exc)` is a pure function from a typed API error (drainsafe.kube.errors) to an
  `EvictOutcome` code; nothing looks at message text. tests/drain/test_evict.py is its table.
- a budget 429 (cause DisruptionBudget) and a rate-limit 429 (API Priority and Fairness) are
  counted apart; both back off with jitter, Retry-After as the floor;
- 404 and 409 (the UID precondition failed: another pod has the name) mean the pod is gone;
- the multi-PDB 500 and an RBAC 403 stop, with the reason;
- after a 5xx, a timeout or a reset the outcome is unknown: the pod is read again before any
  retry, and a pod already terminating is never sent a second eviction (the registry skips
  the budget for a terminating pod: pkg/registry/core/pod/storage/eviction.go canIgnorePDB,
  so a second eviction would be a second disruption).

Never a DELETE, never a PDB bypass, never a shorter grace period.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from drainsafe.kube import (
    BudgetBlocked,
    Conflict,
    Forbidden,
    KubeClient,
    KubeError,
    MultiplePdbs,
    NotFound,
    RateLimited,
    api_path,
)
from drainsafe.kube.objects import is_terminating, uid_of
from drainsafe.kube.retry import Backoff

Code = Literal[
    "accepted",  # the server took the eviction
    "gone",  # 404, or 409 on the UID precondition: the pod we meant no longer exists
    "budget",  # 429 DisruptionBudget: wait for the budget
    "rate-limited",  # 429 without the cause: API Priority and Fairness
    "namespace-terminating",  # 403 while the namespace goes away: transient
    "unknown",  # 5xx, timeout, reset: it may or may not have happened; look first
    "multiple-pdbs",  # 500: the pod is under several budgets; stop
    "forbidden",  # 403 RBAC: stop
    "failed",  # anything else that will not get better by retrying
]
STOP_CODES: frozenset[Code] = frozenset({"multiple-pdbs", "forbidden", "failed"})
RETRY_CODES: frozenset[Code] = frozenset({"budget", "rate-limited", "namespace-terminating",
                                          "unknown"})


def classify(exc: KubeError | None) -> Code:
    """The outcome of one eviction request. Pure: a function of the error's type and code."""
    if exc is None:
        return "accepted"
    if isinstance(exc, NotFound | Conflict):
        return "gone"
    if isinstance(exc, BudgetBlocked):
        return "budget"
    if isinstance(exc, RateLimited):
        return "rate-limited"
    if isinstance(exc, MultiplePdbs):
        return "multiple-pdbs"
    if isinstance(exc, Forbidden):
        return "namespace-terminating" if exc.namespace_terminating else "forbidden"
    if exc.retryable:
        return "unknown"
    return "failed"


@dataclass
class EvictCounts:
    budget_429s: int = 0
    rate_429s: int = 0
    transient_errors: int = 0
    detail: str = ""


class EvictionStopped(RuntimeError):
    """An eviction that retrying will not fix (multiple PDBs, RBAC, a bad request)."""


Result = Literal["evicted", "gone"]


class Evictor:
    """Evicts one pod (by namespace, name and UID) until the server takes it or it is gone.

    `current` reads the pod fresh (None when gone or replaced by another UID); `sleep`
    waits and returns False when the drain was stopped meanwhile.
    """

    def __init__(self, client: KubeClient, *, backoff: Backoff, rng: random.Random,
                 sleep: Callable[[float], Awaitable[bool]],
                 say: Callable[[str], None] = lambda _m: None) -> None:
        self.client = client
        self.backoff = backoff
        self.rng = rng
        self.sleep = sleep
        self.say = say

    async def current(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        path = api_path("v1", "pods", namespace=namespace, name=name)
        for attempt in range(8):
            try:
                obj = await self.client.get(path)
            except NotFound:
                return None
            except KubeError as exc:
                if not exc.retryable or attempt == 7:
                    raise
                await asyncio.sleep(self.backoff.delay(attempt, self.rng, exc.retry_after))
                continue
            return obj if uid_of(obj) == uid else None
        return None  # pragma: no cover - the loop returns or raises

    async def evict(self, namespace: str, name: str, uid: str, counts: EvictCounts,
                    *, deadline: Callable[[], float]) -> Result:
        key = f"{namespace}/{name}"
        attempt = 0
        while True:
            if deadline() <= 0:
                raise TimeoutError(f"timed out before {key} could be evicted ({counts.detail})")
            error: KubeError | None = None
            try:
                await self.client.evict(namespace, name, uid=uid)
            except KubeError as exc:
                error = exc
            code = classify(error)
            if code == "accepted":
                return "evicted"
            if code == "gone":
                counts.detail = type(error).__name__
                return "gone"
            if code in STOP_CODES:
                raise EvictionStopped(_stop_message(code, key, error))
            assert error is not None
            if code == "budget":
                counts.budget_429s += 1
                counts.detail = f"budget: {getattr(error, 'budget_message', '')}"
            elif code == "rate-limited":
                counts.rate_429s += 1
                counts.detail = f"rate limited: {error.message[:100]}"
            else:
                counts.transient_errors += 1
                counts.detail = f"transient: {error}"
                if code == "unknown":
                    # It may have happened: look before trying again.
                    found = await self.current(namespace, name, uid)
                    if found is None or is_terminating(found):
                        return "evicted"
            delay = self.backoff.delay(attempt, self.rng, error.retry_after)
            attempt += 1
            self.say(f"{key}: {counts.detail}; retry in {delay:.1f}s")
            if not await self.sleep(min(delay, max(deadline(), 0.0))):
                raise EvictionStopped(f"stopped before evicting {key}")
            # Before retrying, make sure the pod still needs evicting (no double eviction).
            found = await self.current(namespace, name, uid)
            if found is None:
                return "gone"
            if is_terminating(found):
                return "evicted"  # the earlier request did go through


def _stop_message(code: Code, key: str, error: KubeError | None) -> str:
    message = "" if error is None else error.message
    if code == "multiple-pdbs":
        return (f"the eviction API refuses {key}: it is under several PodDisruptionBudgets "
                f"({message}); make their selectors disjoint")
    if code == "forbidden":
        return f"eviction of {key} forbidden: {message}"
    return f"eviction of {key} failed: {error}"
