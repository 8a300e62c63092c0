"""core/v1 Events on the pod and the workload, so `kubectl describe` tells why a drain waits,
and on a NodeMaintenance, so `kubectl describe nodemaintenance` tells what it did.

Written as client-go's record.EventRecorder writes them (tools/record/event.go): in the
background, best effort, never in the way of the answer the API server is waiting for. A
stop waits a bounded while (FLUSH_SECONDS) for those still being written. client-go's
Broadcaster.Shutdown blocks only until its queued events are handed to the watchers
(apimachinery pkg/watch/mux.go: "blocks until all events have been distributed through the
outbound channels"), not until the sink has written them; here the writes themselves are
awaited, since the Events of a NodeMaintenance's last steps are what a person reads. An
Event about a cluster-scoped object (a NodeMaintenance) lives in the namespace "default"
and its involvedObject has no namespace (makeEvent: `if namespace == "" { namespace =
metav1.NamespaceDefault }`), which is what `kubectl describe` looks for: it lists Events
with the field selector involvedObject.name, .namespace (empty here), .kind and .uid
(client-go typed/core/v1 event_expansion.go GetFieldSelector).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Literal

from drainsafe.kube import KubeClient, KubeError, api_path
from drainsafe.kube.objects import rfc3339

log = logging.getLogger(__name__)
COMPONENT = "drainsafe-controller"
FLUSH_SECONDS = 2.0
"""How long a graceful stop (SIGTERM, the Lease lost) waits for the Events still being
written: a few POSTs, milliseconds each on an API server that answers; one that does not
must not hold the stop past the pod's grace period (the client's own timeout is 30 s).
A SIGKILL loses them, and the next leader writes Events only for its own status writes."""
EventType = Literal["Normal", "Warning"]
EventKind = Literal["Pod", "Deployment", "StatefulSet", "LeaderWorkerSet", "NodeMaintenance"]
KIND_VERSIONS: dict[EventKind, str] = {"Pod": "v1", "Deployment": "apps/v1",
                                       "StatefulSet": "apps/v1",
                                       "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
                                       "NodeMaintenance": "drainsafe.io/v1alpha1"}


def event_manifest(obj: Mapping[str, Any], *, reason: str, message: str, kind: str,
                   api_version: str, event_type: EventType, now: float, instance: str
                   ) -> dict[str, Any]:
    """An Event about `obj` (as client-go's record.EventRecorder writes it). Pure."""
    meta = obj.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace") or "")
    stamp = rfc3339(now)
    involved = {"kind": kind, "apiVersion": api_version, "name": name, "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion")}
    if namespace:
        involved["namespace"] = namespace
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{name}.{secrets.token_hex(8)}",
                     "namespace": namespace or "default"},
        "involvedObject": involved,
        "reason": reason, "message": message[:1024], "type": event_type,
        "source": {"component": COMPONENT, "host": instance},
        "reportingComponent": COMPONENT, "reportingInstance": instance,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


async def record_event(client: KubeClient, body: Mapping[str, Any]) -> None:
    """Write an Event; a failure is logged, never raised (an Event is best effort)."""
    try:
        await client.post(api_path("v1", "events", namespace=body["metadata"]["namespace"]),
                          body)
    except KubeError as exc:
        log.warning("could not write event %s on %s: %s", body["reason"],
                    body["involvedObject"], exc)


class EventRecorder:
    """Events about pods, workloads and NodeMaintenances, written in the background by one
    replica."""

    def __init__(self, client: KubeClient, *, instance: str, wall: Callable[[], float]
                 ) -> None:
        self._client, self._instance, self._wall = client, instance, wall
        self._tasks: set[asyncio.Task[None]] = set()

    def emit(self, obj: Mapping[str, Any], kind: EventKind, reason: str,
             message: str, event_type: EventType = "Normal") -> None:
        body = event_manifest(obj, reason=reason, message=message, kind=kind,
                              api_version=KIND_VERSIONS[kind], event_type=event_type,
                              now=self._wall(), instance=self._instance)
        self._background(record_event(self._client, body))

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self, bound: float = FLUSH_SECONDS) -> None:
        """Wait up to `bound` seconds for the Events emitted so far to be written (those
        still on their way afterwards go on in the background)."""
        pending = list(self._tasks)
        if pending:
            await asyncio.wait(pending, timeout=bound)

    async def stop(self, bound: float = FLUSH_SECONDS) -> None:
        """Write what was emitted (up to `bound` seconds), then cancel the rest. Without
        the wait, a stop right after a status write cancelled its Events before they left."""
        await self.flush(bound)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
