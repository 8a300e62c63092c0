"""core/v1 Events on the pod and the workload, so `kubectl describe` tells why a drain waits."""

from __future__ import annotations

import datetime as dt
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from drainsafe.controller.record import rfc3339
from drainsafe.kube import KubeClient, KubeError, api_path

log = logging.getLogger(__name__)
COMPONENT = "drainsafe-controller"


def event_manifest(obj: Mapping[str, Any], *, reason: str, message: str, kind: str,
                   api_version: str, event_type: str, now: dt.datetime, instance: str
                   ) -> dict[str, Any]:
    """An Event about `obj` (as client-go's record.EventRecorder writes it). Pure."""
    meta = obj.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace") or "default")
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": namespace},
        "involvedObject": {"kind": kind, "apiVersion": api_version, "name": name,
                           "namespace": namespace, "uid": meta.get("uid"),
                           "resourceVersion": meta.get("resourceVersion")},
        "reason": reason, "message": message[:1024], "type": event_type,
        "source": {"component": COMPONENT, "host": instance},
        "reportingComponent": COMPONENT, "reportingInstance": instance,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


async def record_event(client: KubeClient, obj: Mapping[str, Any], *, reason: str,
                       message: str, kind: str, api_version: str, instance: str,
                       event_type: str = "Normal") -> None:
    """Write an Event; a failure is logged, never raised (an Event is best effort)."""
    body = event_manifest(obj, reason=reason, message=message, kind=kind,
                          api_version=api_version, event_type=event_type,
                          now=dt.datetime.now(dt.UTC), instance=instance)
    try:
        await client.post(api_path("v1", "events", namespace=body["metadata"]["namespace"]),
                          body)
    except KubeError as exc:
        log.warning("could not write event %s on %s: %s", reason, body["involvedObject"], exc)
