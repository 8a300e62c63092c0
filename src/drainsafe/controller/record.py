"""What the guard writes on pods, and how it recognises the surges it started.

The surge itself is recorded by the surge engine, on the Deployment, before any scale
change (drainsafe.controller.engine); the guard adds only (drainsafe.controller.holds
writes them, once each, first writer wins):

- `drainsafe.io/eviction-held-since` on a pod, when any replica first answers 429 for it:
  the shared start of the hold, so every replica applies the same hold limit and the leader
  knows which pods want a stand-in;
- `drainsafe.io/eviction-released` on a pod whose hold was given up (the reason), so the
  leader stops surging for it and the Event is written once.

What it reads on pods beside those: the opt-in label (`opted_in`).

Which tool owns a surge is in the record itself (SurgeRecord.guard), written in the same
resourceVersion-guarded patch, so the leader restores only surges it owns, never one a
`drainsafe drain` is running, and a drain waits for the guard's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drainsafe.controller.decision import GUARD_LABEL
from drainsafe.kube.objects import is_active, meta, parse_time

HOLD_ANNOTATION = "drainsafe.io/eviction-held-since"
RELEASED_ANNOTATION = "drainsafe.io/eviction-released"


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def held_since(pod: Mapping[str, Any]) -> float | None:
    """When the pod's hold began (as stored on it), or None if it was never held."""
    return parse_time(annotations_of(pod).get(HOLD_ANNOTATION))


def is_held(pod: Mapping[str, Any]) -> bool:
    """An active pod that asked for a stand-in and was not released."""
    notes = annotations_of(pod)
    return is_active(pod) and HOLD_ANNOTATION in notes and RELEASED_ANNOTATION not in notes


def opted_in(pod: Mapping[str, Any], namespace: Mapping[str, Any] | None) -> bool:
    """The pod label, or the same label on its namespace."""
    if (meta(pod).get("labels") or {}).get(GUARD_LABEL) == "true":
        return True
    return namespace is not None and (meta(namespace).get("labels") or {}).get(
        GUARD_LABEL) == "true"
