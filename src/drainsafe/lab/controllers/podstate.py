"""What the lab's controllers write: owner references and status conditions.

What they read off a pod (Ready, Available, active, the controller reference) is
drainsafe.kube.objects', the one home drain and the guard read too. Available there follows
upstream IsPodAvailable (k8s.io/kubernetes pkg/api/v1/pod/util.go, v1.33): with
minReadySeconds > 0 a Ready pod with no lastTransitionTime is not available, and one whose
lastTransitionTime + minReadySeconds equals now is not yet (Before is strict). The lab's
copy here used to count the first as available since 1970 and the second as available.
"""

from __future__ import annotations

from typing import Any

from drainsafe.kube.objects import controller_ref
from drainsafe.lab.apiserver.store import Obj


def owned_by(obj: Obj, owner: Obj) -> bool:
    ref = controller_ref(obj)
    return ref is not None and ref.get("uid") == owner["metadata"]["uid"]


def owner_reference(owner: Obj) -> dict[str, Any]:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


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
