"""Taint eviction: pods on a node with a NoExecute taint they do not tolerate are deleted.

After kubernetes/kubernetes pkg/controller/tainteviction/taint_eviction.go (read at the
stored commit 003e8629, the v1.32/v1.33 code: still behind the SeparateTaintEvictionController
gate, on by default, so it runs as its own controller "taint-eviction-controller"):

- only NoExecute taints count (getNoExecuteTaints);
- each taint is matched by the first toleration that tolerates it (v1helper.
  GetMatchingTolerations); a taint none tolerates means delete at once;
- otherwise the pod may stay the least tolerationSeconds of the matched tolerations
  (getMinTolerationTime: none set = forever, a value <= 0 = at once), counted from when
  the controller first scheduled the pod's deletion, i.e. when it saw the taint; a later
  update keeps the earlier start (processPodOnNode); all taints gone, the pod gone or
  tolerating forever cancels it;
- the deletion (addConditionAndDeletePod) first sets the pod's DisruptionTarget condition
  (reason DeletionByTaintManager, "Taint manager: deleting due to NoExecute taint") through
  the status subresource, then DELETEs it with empty DeleteOptions: the pod's own
  terminationGracePeriodSeconds, so its kubelet (when it can hear) stops it gracefully;
  an Event TaintManagerEviction "Marking for deletion Pod ns/name" is recorded.

`toleration_window` and `plan` are the rules, pure; the controller applies them.
Upstream's work queue fires at the exact time; here the controller asks for a timed
wake-up at the earliest due deletion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drainsafe.kube.objects import rfc3339
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Obj, Store
from drainsafe.lab.controllers import Controller
from drainsafe.lab.controllers.scheduler import record_event
from drainsafe.placement import tolerates

PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
COMPONENT = "taint-eviction-controller"
REASON = "DeletionByTaintManager"
MESSAGE = "Taint manager: deleting due to NoExecute taint"

FOREVER = None  # a toleration window without end (no tolerationSeconds)


def no_execute_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") == "NoExecute"]


def toleration_window(tolerations: Sequence[Mapping[str, Any]],
                      taints: Sequence[Mapping[str, Any]]) -> float | None:
    """Seconds the pod may stay on a node with these NoExecute taints: 0 (delete at once),
    a number, or FOREVER. Taints must be non-empty."""
    used = []
    for taint in taints:
        match = next((t for t in tolerations if tolerates([t], taint)), None)
        if match is None:
            return 0.0  # not all tolerated
        used.append(match)
    seconds = [float(t["tolerationSeconds"]) for t in used
               if t.get("tolerationSeconds") is not None]
    if any(s <= 0 for s in seconds):
        return 0.0
    return min(seconds) if seconds else FOREVER


@dataclass(frozen=True)
class Scheduled:
    """A pod's deletion as the controller's timed queue holds it."""

    created_at: float
    fire_at: float


def plan(pods: Iterable[Mapping[str, Any]], nodes: Mapping[str, Mapping[str, Any]],
         scheduled: Mapping[str, Scheduled], now: float) -> dict[str, Scheduled]:
    """The deletions to hold after seeing these pods and nodes (by pod UID). A pod already
    terminating is left alone: its deletion was made (ours or another's)."""
    out: dict[str, Scheduled] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        node = nodes.get(str((pod.get("spec") or {}).get("nodeName") or ""))
        if node is None or meta.get("deletionTimestamp"):
            continue
        taints = no_execute_taints(node)
        if not taints:
            continue
        window = toleration_window((pod.get("spec") or {}).get("tolerations") or [], taints)
        if window is FOREVER:
            continue
        uid = str(meta.get("uid", ""))
        before = scheduled.get(uid)
        created = before.created_at if before is not None else now
        out[uid] = Scheduled(created, created + window)
    return out


def due(scheduled: Mapping[str, Scheduled], now: float) -> tuple[list[str], float | None]:
    """UIDs whose deletion is due, and seconds until the next one (None: nothing waits)."""
    ready = sorted(uid for uid, s in scheduled.items() if s.fire_at <= now)
    later = [s.fire_at - now for s in scheduled.values() if s.fire_at > now]
    return ready, (min(later) if later else None)


def with_disruption_target(pod: Obj, now: str) -> Obj | None:
    """The pod's status with DisruptionTarget set as the taint manager sets it, or None if
    it already is (apipod.UpdatePodCondition reports no change)."""
    status = dict(pod.get("status") or {})
    conditions = [dict(c) for c in status.get("conditions") or []]
    wanted = {"type": "DisruptionTarget", "status": "True", "reason": REASON,
              "message": MESSAGE}
    for c in conditions:
        if c.get("type") == "DisruptionTarget":
            if all(c.get(k) == v for k, v in wanted.items()):
                return None
            if c.get("status") != "True":
                c["lastTransitionTime"] = now
            c.update(wanted)
            break
    else:
        conditions.append({**wanted, "lastProbeTime": None, "lastTransitionTime": now})
    status["conditions"] = conditions
    return {**pod, "status": status}


class TaintEvictionController(Controller):
    name = "tainteviction"
    watches = frozenset({"pods", "nodes"})

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.scheduled: dict[str, Scheduled] = {}

    def reconcile(self) -> float | None:
        now = self.store.clock()
        nodes = {n["metadata"]["name"]: n for n in self.store.items(NODES)}
        pods = {p["metadata"].get("uid", ""): p for p in self.store.items(PODS)}
        self.scheduled = plan(pods.values(), nodes, self.scheduled, now)
        ready, wait = due(self.scheduled, now)
        for uid in ready:
            self._delete(pods[uid], now)
            self.scheduled.pop(uid, None)
        return wait

    def _delete(self, pod: Obj, now: float) -> None:
        m = pod["metadata"]
        record_event(self.store, {**pod, "kind": "Pod", "apiVersion": "v1"},
                     reason="TaintManagerEviction",
                     message=f"Marking for deletion Pod {m['namespace']}/{m['name']}",
                     component=COMPONENT)
        try:
            updated = with_disruption_target(pod, rfc3339(now))
            if updated is not None:
                self.store.update(PODS, updated, subresource="status")
            # Empty DeleteOptions: the pod's own grace period, as upstream.
            self.store.delete(PODS, m["namespace"], m["name"])
        except st.StatusError:
            pass  # gone or replaced meanwhile: nothing to delete
