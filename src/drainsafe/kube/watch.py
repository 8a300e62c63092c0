"""Our own list+watch loop (an informer) with a local cache callers can wait on.

Why not a library's watch: the Python clients' watches miss parts of the protocol below
(relist on a 410 sent as an ERROR event, bookmarks, an idle timeout for a silent stream).
The protocol followed here
(https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):

- LIST (paginated), remember the list's resourceVersion, then WATCH from it with
  allowWatchBookmarks, so no change between list and watch is lost;
- each event carries the object's resourceVersion; BOOKMARK events only advance it;
- "too old resource version" arrives as HTTP 200 plus one ERROR event with code 410
  (apiserver pkg/storage/cacher/cacher.go newErrWatcher), or as an HTTP 410: relist, and
  report the difference as events (relist_events: the deletions missed in the gap marked
  DeletedFinalStateUnknown, as client-go's DeltaFIFO.Replace marks them);
- the server ends a watch after timeoutSeconds: reconnect from the last resourceVersion;
- a connection that goes quiet for longer than `idle_timeout` is treated as dead (a
  network partition never closes the socket) and reopened;
- errors back off with jitter; the cache keeps serving the last known state meanwhile.

Callers await conditions on the cache with a bound:
`await informer.wait_for(lambda cache: ..., timeout=60)`.

This is the project's one informer: drain, verify, the controller, and the lab's kubelets
and traffic paths (drainsafe.lab.node.kubelet, drainsafe.lab.netpath.paths) all watch
through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drainsafe.kube.client import KubeClient, Obj
from drainsafe.kube.errors import Expired, KubeError
from drainsafe.kube.objects import key_of
from drainsafe.kube.retry import Backoff

log = logging.getLogger(__name__)
T = TypeVar("T")
Cache = Mapping[str, Obj]
EventHook = Callable[[str, Obj], None]


class DeletedFinalStateUnknown(dict[str, Any]):
    """A deletion this informer missed (its watch was down or expired) and found on a
    relist: the last state it saw of the object, which may be stale.

    client-go's marker of the same name (tools/cache/delta_fifo.go at v0.33.0,
    DeletedFinalStateUnknown{Key, Obj}, queued by DeltaFIFO.Replace for keys the new list
    lacks) reaches a handler's OnDelete in place of the object. Here it is the object
    itself (a dict), so every hook reads it as any deleted object; a hook that cares tells
    it apart with isinstance.
    """

    def __init__(self, key: str, obj: Mapping[str, Any]) -> None:
        super().__init__(obj)
        self.key = key


def relist_events(old: Mapping[str, Obj], fresh: Mapping[str, Obj]) -> list[tuple[str, Obj]]:
    """What changed across a relist, as watch events, the way client-go's DeltaFIFO.Replace
    (tools/cache/delta_fifo.go at v0.33.0) reports it:

    - ADDED for new keys; MODIFIED for objects whose resourceVersion changed (a pod that
      turned terminating or unready during the gap);
    - DELETED for keys gone, the last state seen wrapped as DeletedFinalStateUnknown;
    - an object re-created under the same name (a new UID) as DELETED of the old one
      (marked, just before) and ADDED of the new. Here we differ from client-go, which
      passes a new UID under a known key to OnUpdate: they are two objects, and a consumer
      keyed by UID, as the kubelet's pod config is (pkg/kubelet/config/config.go merge), must
      stop the old one, whose deletion it never saw, as well as start the new.
    """
    events: list[tuple[str, Obj]] = []
    for key, obj in fresh.items():
        before = old.get(key)
        if before is None:
            events.append(("ADDED", obj))
        elif _uid(before) != _uid(obj):
            events.append(("DELETED", DeletedFinalStateUnknown(key, before)))
            events.append(("ADDED", obj))
        elif _rv(before) != _rv(obj):
            events.append(("MODIFIED", obj))
    events.extend(("DELETED", DeletedFinalStateUnknown(key, obj))
                  for key, obj in old.items() if key not in fresh)
    return events


def _rv(obj: Mapping[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("resourceVersion")


def _uid(obj: Mapping[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("uid")


class WaitTimeout(TimeoutError):
    """A condition did not hold within its bound."""


@dataclass
class WatchStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    expired: int = 0
    errors: int = 0
    idle_timeouts: int = 0
    missed_deletions: int = 0  # found on a relist (DeletedFinalStateUnknown)
    last_error: str = ""
    history: list[str] = field(default_factory=list)


class Informer:
    """List+watch of one collection (e.g. /api/v1/pods with a field selector)."""

    def __init__(
        self,
        client: KubeClient,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        idle_timeout: float = 60.0,
        server_timeout: int = 300,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        on_event: EventHook | None = None,
    ) -> None:
        self._client = client
        self.path = path
        self._params: dict[str, str] = {}
        if label_selector:
            self._params["labelSelector"] = label_selector
        if field_selector:
            self._params["fieldSelector"] = field_selector
        self._idle_timeout = idle_timeout
        self._server_timeout = server_timeout
        self._backoff = backoff or Backoff(base=0.2, cap=5.0)
        self._rng = rng or random.Random()
        self._on_event = on_event
        self._cache: dict[str, Obj] = {}
        self._rv = ""
        self._changed = asyncio.Condition()
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.stats = WatchStats()

    # -- lifecycle -----------------------------------------------------------------

    async def start(self, *, sync_timeout: float = 30.0) -> Informer:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"informer {self.path}")
        try:
            async with asyncio.timeout(sync_timeout):
                await self._synced.wait()
        except TimeoutError as exc:
            await self.stop()
            raise WaitTimeout(
                f"could not list {self.path} within {sync_timeout:.0f}s: "
                f"{self.stats.last_error or 'no answer'}"
            ) from exc
        return self

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        # Cancel until it is done: one cancel can be lost on Python 3.11, whose
        # asyncio.wait_for returns the result instead of raising when the cancel lands as
        # the awaited call completes (cpython gh-86296, fixed in 3.12), and a stop that
        # waits on a lost cancel waits forever.
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def __aenter__(self) -> Informer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- reading -------------------------------------------------------------------

    @property
    def cache(self) -> Cache:
        return self._cache

    @property
    def resource_version(self) -> str:
        return self._rv

    def get(self, key: str) -> Obj | None:
        return self._cache.get(key)

    async def wait_for(
        self, predicate: Callable[[Cache], T], *, timeout: float, what: str = ""
    ) -> T:
        """The first truthy value of predicate(cache), re-checked on every change.

        One bound covers the whole wait, the condition's lock included; asyncio.timeout
        rather than asyncio.wait_for, which on Python 3.11 can swallow a cancel
        (cpython gh-86296) and so outlive the drain that started it."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                while not (value := predicate(self._cache)):
                    await self._changed.wait()
                return value
        except TimeoutError:
            raise WaitTimeout(
                f"timed out after {timeout:.0f}s waiting for {what or 'a condition'}"
                f" on {self.path}"
            ) from None

    # -- the loop --------------------------------------------------------------------

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _relist(self) -> None:
        items, rv = await self._client.list(self.path, self._params)
        self.stats.lists += 1
        fresh = {key_of(o): o for o in items}
        old, self._cache = self._cache, fresh
        # The cache first, then the hooks, as client-go updates an informer's store before
        # it calls the handler (tools/cache/controller.go processDeltas): a hook that
        # reads the cache sees what the event says.
        events = relist_events(old, fresh)
        self.stats.missed_deletions += sum(
            isinstance(obj, DeletedFinalStateUnknown) for _, obj in events)
        if self._on_event is not None:
            for kind, obj in events:
                self._on_event(kind, obj)
        self._rv = rv
        self._synced.set()
        await self._notify()

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = str(event.get("type") or "")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            message = str(obj.get("message") or "")
            if code == 410:
                raise Expired(code=410, reason="Expired", message=message, path=self.path)
            raise KubeError(
                code=code, reason=str(obj.get("reason") or ""), message=message, path=self.path
            )
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self._rv = str(rv)
        if kind == "BOOKMARK":
            return
        key = key_of(obj)
        if kind == "DELETED":
            self._cache.pop(key, None)
        elif kind in ("ADDED", "MODIFIED"):
            self._cache[key] = obj
        else:
            return
        self.stats.events += 1
        if self._on_event is not None:
            self._on_event(kind, obj)

    async def _watch_once(self) -> None:
        params = {
            **self._params,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": self._rv,
            # Spread reconnects of many watchers (the server does the same, C.1).
            "timeoutSeconds": str(int(self._server_timeout * (1 + self._rng.random()))),
        }
        self.stats.watches += 1
        async with self._client.stream(self.path, params) as lines:
            iterator = lines.__aiter__()
            while True:
                try:
                    async with asyncio.timeout(self._idle_timeout):
                        line = await iterator.__anext__()
                except StopAsyncIteration:
                    return  # server-side timeout: reconnect from the last resourceVersion
                except TimeoutError:
                    self.stats.idle_timeouts += 1
                    return
                try:
                    event = json.loads(line)
                except ValueError:
                    raise KubeError(
                        code=0, reason="BadWatchLine", message=line[:200], path=self.path
                    ) from None
                self._apply(event)
                await self._notify()

    async def _run(self) -> None:
        attempt = 0
        expired_in_a_row = 0
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                await self._watch_once()
                attempt = 0
                expired_in_a_row = 0
            except asyncio.CancelledError:
                raise
            except Expired as exc:
                self.stats.expired += 1
                self.stats.history.append(f"expired: {exc.message}")
                need_list = True
                # The first 410 relists at once; repeated ones mean a server that keeps
                # compacting past us, so back off rather than spin.
                if expired_in_a_row:
                    await asyncio.sleep(self._backoff.delay(expired_in_a_row, self._rng))
                expired_in_a_row += 1
            except KubeError as exc:
                self.stats.errors += 1
                self.stats.last_error = str(exc)
                self.stats.history.append(f"error: {exc}")
                delay = self._backoff.delay(attempt, self._rng, exc.retry_after)
                attempt += 1
                log.debug("watch %s failed (%s); retry in %.2fs", self.path, exc, delay)
                await asyncio.sleep(delay)
