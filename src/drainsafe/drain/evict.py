"""The client side of an eviction: drainsafe evicting one pod through the Eviction API,
with typed outcomes and a per-UID rate-limited retry queue. (The server side that answers
it in the lab is drainsafe.lab.apiserver.eviction.)

Modelled on Karpenter's terminator and kubectl's pkg/drain (EvictPod, a typed status per
pod). Karpenter v1.0.0 pkg/controllers/node/termination/terminator/eviction.go keeps its
eviction queue keyed by pod UID (QueueKey: namespace, name and UID; a key is queued once)
and retries a failed eviction through client-go's ItemExponentialFailureRateLimiter
(util/workqueue/default_rate_limiters.go: the delay doubles with each failure of that item,
capped; Forget on success resets it). `RetryQueue` is that, small: per UID, one eviction
in flight, a failure count that sets the next delay (drainsafe's Backoff: capped
exponential with jitter, Retry-After as the floor) and the earliest next attempt on an
injected clock. Then, with the gaps closed:

- `classify(exc)` is a pure function from a typed API error (drainsafe.kube.errors) to a
  `Code`; nothing looks at message text. tests/drain/test_evict.py is its table.
- a budget 429 (cause DisruptionBudget), a hold by drainsafe's eviction guard (cause
  drainsafe.io/EvictionGuardHold) and a rate-limit 429 (API Priority and Fairness) are
  counted apart; all back off with jitter, Retry-After as the floor;
- 404 and 409 (the UID precondition failed: another pod has the name) mean the pod is gone;
- the multi-PDB 500 and an RBAC 403 stop, with the reason;
- after a 5xx, a timeout or a reset the outcome is unknown: the pod is read again before any
  retry, and a pod already terminating is never sent a second eviction (the registry skips
  the budget for a terminating pod: pkg/registry/core/pod/storage/eviction.go canIgnorePDB,
  so a second eviction would be a second disruption);
- the guards before a pod's first request (`guard`): a pod the node's record says an
  earlier run evicted is never evicted again, one gone from the watch is not sent a
  request, one terminating is waited for.

Never a DELETE, never a PDB bypass, never a shorter grace period.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from drainsafe.kube import (
    BudgetBlocked,
    Conflict,
    Forbidden,
    GuardHeld,
    KubeClient,
    KubeError,
    MultiplePdbs,
    NotFound,
    RateLimited,
    api_path,
)
from drainsafe.kube.objects import is_terminating, uid_of
from drainsafe.kube.retry import Backoff, retry_transient

Obj = Mapping[str, Any]
Clock = Callable[[], float]

Code = Literal[
    "accepted",  # the server took the eviction
    "gone",  # 404, or 409 on the UID precondition: the pod we meant no longer exists
    "budget",  # 429 DisruptionBudget: wait for the budget
    "guard-held",  # 429 EvictionGuardHold: drainsafe's eviction guard holds it for a stand-in
    "rate-limited",  # 429 without either cause: API Priority and Fairness
    "namespace-terminating",  # 403 while the namespace goes away: transient
    "unknown",  # 5xx, timeout, reset: it may or may not have happened; look first
    "multiple-pdbs",  # 500: the pod is under several budgets; stop
    "forbidden",  # 403 RBAC: stop
    "failed",  # anything else that will not get better by retrying
]
STOP_CODES: frozenset[Code] = frozenset({"multiple-pdbs", "forbidden", "failed"})
RETRY_CODES: frozenset[Code] = frozenset({"budget", "guard-held", "rate-limited",
                                          "namespace-terminating", "unknown"})


def classify(exc: KubeError | None) -> Code:
    """The outcome of one eviction request. Pure: a function of the error's type and code."""
    if exc is None:
        return "accepted"
    if isinstance(exc, NotFound | Conflict):
        return "gone"
    if isinstance(exc, BudgetBlocked):
        return "budget"
    if isinstance(exc, GuardHeld):
        return "guard-held"
    if isinstance(exc, RateLimited):
        return "rate-limited"
    if isinstance(exc, MultiplePdbs):
        return "multiple-pdbs"
    if isinstance(exc, Forbidden):
        return "namespace-terminating" if exc.namespace_terminating else "forbidden"
    if exc.retryable:
        return "unknown"
    return "failed"


# What the guards found before any request: evicted by an earlier run (the node's record),
# gone from the watch before its turn, or already terminating (something else deletes it).
Skip = Literal["evicted-before", "gone-before", "terminating"]
Result = Literal["evicted", "gone", "evicted-before", "gone-before", "terminating"]


def guard(uid: str, *, recorded: str | None, seen: Obj | None) -> Skip | None:
    """Whether the pod `uid` must not be sent an eviction now. Pure.

    `recorded` is the UID the node's record lists as evicted under this pod's key; `seen`
    is the pod as the watch has it now (None when the watch lists no such pod)."""
    if recorded == uid:
        return "evicted-before"  # never again; its state decides what is left
    if seen is None or uid_of(seen) != uid:
        # The namespace's pods were listed after the plan: a pod missing there left
        # meanwhile (say, evicted by a killed earlier run that had not recorded it).
        return "gone-before"
    if is_terminating(seen):
        # The plan saw it running, but by its turn something else is deleting it (a killed
        # earlier run whose eviction the server processed late, another tool). An eviction
        # now would be accepted without a budget check (canIgnorePDB): a second eviction.
        return "terminating"
    return None


@dataclass
class EvictCounts:
    budget_429s: int = 0
    guard_holds: int = 0
    rate_429s: int = 0
    transient_errors: int = 0
    detail: str = ""


class EvictionStopped(RuntimeError):
    """An eviction that retrying will not fix (multiple PDBs, RBAC, a bad request)."""


class RetryQueue:
    """Per pod UID: one eviction in flight, and the failures that set its next delay
    (Karpenter's UID-keyed eviction queue with client-go's per-item exponential rate
    limiter; see the module docstring). The clock is injected."""

    def __init__(self, backoff: Backoff, rng: random.Random, *,
                 clock: Clock = time.monotonic) -> None:
        self.backoff = backoff
        self.rng = rng
        self.clock = clock
        self._failures: dict[str, int] = {}
        self._not_before: dict[str, float] = {}
        self._holds: dict[str, asyncio.Lock] = {}

    def hold(self, uid: str) -> asyncio.Lock:
        """The UID's lock: a second eviction of the same pod waits for the first to end
        (and then finds it evicted or gone), never runs beside it."""
        return self._holds.setdefault(uid, asyncio.Lock())

    def when(self, uid: str, retry_after: float | None = None) -> float:
        """The delay before retrying `uid` after one more failure (client-go's When)."""
        failures = self._failures.get(uid, 0)
        delay = self.backoff.delay(failures, self.rng, retry_after)
        self._failures[uid] = failures + 1
        self._not_before[uid] = self.clock() + delay
        return delay

    def waits(self, uid: str) -> float:
        """How long until `uid` may be tried again (0 when it may now)."""
        return max(self._not_before.get(uid, 0.0) - self.clock(), 0.0)

    def requeues(self, uid: str) -> int:
        return self._failures.get(uid, 0)

    def forget(self, uid: str) -> None:
        """Done with `uid` (evicted or gone): its failures no longer count."""
        self._failures.pop(uid, None)
        self._not_before.pop(uid, None)


class PodView(Protocol):
    """Where the guards read a pod: the drain's watch of the namespace."""

    def pod(self, namespace: str, key: str) -> Obj | None: ...


class Evictor:
    """Evicts pods (by namespace, name and UID) until the server takes each or it is gone.

    `view` and `recorded` (the UID the node's record lists as evicted under a pod key)
    feed the guards; `sleep` waits and returns False when the drain was stopped meanwhile.
    """

    def __init__(self, client: KubeClient, *, backoff: Backoff, rng: random.Random,
                 sleep: Callable[[float], Awaitable[bool]], view: PodView,
                 recorded: Callable[[str], str | None], clock: Clock = time.monotonic,
                 say: Callable[[str], None] = lambda _m: None) -> None:
        self.client = client
        self.backoff = backoff
        self.rng = rng
        self.sleep = sleep
        self.view = view
        self.recorded = recorded
        self.say = say
        self.queue = RetryQueue(backoff, rng, clock=clock)

    async def current(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The pod read fresh; None when it is gone or another UID has its name."""
        path = api_path("v1", "pods", namespace=namespace, name=name)
        try:
            obj = await retry_transient(lambda: self.client.get(path), backoff=self.backoff,
                                        rng=self.rng, retries=7)
        except NotFound:
            return None
        return obj if uid_of(obj) == uid else None

    async def evict(self, namespace: str, name: str, uid: str, counts: EvictCounts,
                    *, deadline: Callable[[], float]) -> Result:
        key = f"{namespace}/{name}"
        async with self.queue.hold(uid):
            skip = guard(uid, recorded=self.recorded(key),
                         seen=self.view.pod(namespace, key))
            if skip is not None:
                return skip
            result = await self._evict(namespace, name, uid, counts, deadline=deadline)
            self.queue.forget(uid)
            return result

    async def _evict(self, namespace: str, name: str, uid: str, counts: EvictCounts,
                     *, deadline: Callable[[], float]) -> Result:
        key = f"{namespace}/{name}"
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
            elif code == "guard-held":
                counts.guard_holds += 1
                counts.detail = ("held by the eviction guard: "
                                 f"{getattr(error, 'hold_message', '')}")
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
            delay = self.queue.when(uid, error.retry_after)
            self.say(f"{key}: {counts.detail}; retry in {delay:.1f}s")
            if not await self.sleep(min(self.queue.waits(uid), max(deadline(), 0.0))):
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
