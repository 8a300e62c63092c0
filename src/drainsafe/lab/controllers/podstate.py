"""What controllers read off pods and owner references (podutil equivalents)."""

from __future__ import annotations

from typing import Any

from drainsafe.lab.apiserver.store import Obj, parse_time


def controller_ref(obj: Obj) -> dict[str, Any] | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def owned_by(obj: Obj, owner: Obj) -> bool:
    ref = controller_ref(obj)
    return ref is not None and ref.get("uid") == owner["metadata"]["uid"]


def owner_reference(owner: Obj) -> dict[str, Any]:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def terminating(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def is_active(pod: Obj) -> bool:
    """controller.IsPodActive: not finished and not being deleted."""
    return not terminating(pod) and pod.get("status", {}).get("phase") not in (
        "Succeeded", "Failed")


def ready_condition(pod: Obj) -> dict[str, Any] | None:
    for c in pod.get("status", {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c  # type: ignore[no-any-return]
    return None


def is_ready(pod: Obj) -> bool:
    c = ready_condition(pod)
    return c is not None and c.get("status") == "True"


def available_at(pod: Obj, min_ready_seconds: int) -> float | None:
    """When the pod counts as available (Ready for minReadySeconds); None if not ready."""
    c = ready_condition(pod)
    if c is None or c.get("status") != "True":
        return None
    since = parse_time(c.get("lastTransitionTime")) or 0.0
    return since + min_ready_seconds


def set_condition(conditions: list[dict[str, Any]], cond: dict[str, Any], now: str,
                  *, update_time: bool = False) -> list[dict[str, Any]]:
    """Replace the condition of the same type, keeping lastTransitionTime (and
    lastUpdateTime) when nothing about it changed."""
    out = []
    found = False
    for c in conditions:
        if c.get("type") != cond["type"]:
            out.append(c)
            continue
        found = True
        same = all(c.get(k) == cond.get(k) for k in ("status", "reason", "message"))
        new = dict(cond)
        new["lastTransitionTime"] = (c.get("lastTransitionTime")
                                     if c.get("status") == cond["status"] else now)
        if update_time:
            new["lastUpdateTime"] = c.get("lastUpdateTime", now) if same else now
        out.append(new)
    if not found:
        new = dict(cond, lastTransitionTime=now)
        if update_time:
            new["lastUpdateTime"] = now
        out.append(new)
    return out
