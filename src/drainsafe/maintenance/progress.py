"""A NodeMaintenance's progress: the per-node states, the phase, and the status written.

Per-node states, in order: Pending -> Cordoned -> Draining -> Drained -> (AwaitingMaintenance
->) Uncordoned; any of them -> Failed. As the NVIDIA GPU operator's upgrade states
(k8s-operator-libs pkg/upgrade: cordon-required ... uncordon-required, upgrade-done,
upgrade-failed), but kept in the resource's status with a reason each, not in a node label.

A node counts as *in progress* (against maxParallelNodes) from its cordon until it is done
or failed. It is *done* when Uncordoned, or Drained under uncordon: Never (it stays cordoned
on purpose). The phase follows (Kubernetes Job/Pod phases: terminal once Succeeded/Failed):
Paused while spec.paused and not finished, Pending before any node started, Running, then
Succeeded when every node is done, Failed when every node is done or failed and one failed.

Deleting a NodeMaintenance gives back what it still holds (controller.maintenance_release):
every node past Pending that is not done, and a Failed one, may carry its cordon or a surge
made for it; a node Uncordoned holds nothing, and one Drained under uncordon: Never was left
cordoned on purpose, the outcome its spec asked for, and stays so.

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from drainsafe.maintenance.maintained import Recorded
from drainsafe.maintenance.spec import Uncordon

NodeState = Literal["Pending", "Cordoned", "Draining", "Drained", "AwaitingMaintenance",
                    "Uncordoned", "Failed"]
Phase = Literal["Pending", "Running", "Paused", "Succeeded", "Failed"]
NODE_STATES: tuple[NodeState, ...] = ("Pending", "Cordoned", "Draining", "Drained",
                                      "AwaitingMaintenance", "Uncordoned", "Failed")


@dataclass(frozen=True)
class NodeProgress:
    name: str
    state: NodeState = "Pending"
    wave: int = 0
    reason: str = ""
    message: str = ""
    started: str | None = None  # RFC 3339 (kube.objects.rfc3339)
    finished: str | None = None
    # the node when its drain ended (uncordon: WhenMaintained): maintenance.maintained
    recorded: Recorded | None = None

    def to(self, state: NodeState, reason: str, message: str = "", *,
           started: str | None = None, finished: str | None = None,
           recorded: Recorded | None = None) -> NodeProgress:
        return replace(self, state=state, reason=reason, message=message,
                       started=started or self.started, finished=finished or self.finished,
                       recorded=recorded or self.recorded)

    def as_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "state": self.state, "wave": self.wave,
                               "reason": self.reason}
        if self.message:
            out["message"] = self.message
        if self.started:
            out["started"] = self.started
        if self.finished:
            out["finished"] = self.finished
        if self.recorded is not None and self.recorded.as_status():
            out["recorded"] = self.recorded.as_status()
        return out


def is_done(state: NodeState, uncordon: Uncordon) -> bool:
    return state == "Uncordoned" or (state == "Drained" and uncordon == "Never")


def in_progress(state: NodeState, uncordon: Uncordon) -> bool:
    return state not in ("Pending", "Failed") and not is_done(state, uncordon)


def to_give_back(state: NodeState, uncordon: Uncordon) -> bool:
    """On deletion: may the node hold this operation's cordon or a surge made for it?"""
    return state != "Pending" and not is_done(state, uncordon)


def read_nodes(status: Mapping[str, Any]) -> dict[str, NodeProgress]:
    out: dict[str, NodeProgress] = {}
    for n in status.get("nodes") or []:
        state = n.get("state", "Pending")
        out[n["name"]] = NodeProgress(
            name=n["name"], state=state if state in NODE_STATES else "Pending",
            wave=int(n.get("wave") or 0), reason=n.get("reason") or "",
            message=n.get("message") or "", started=n.get("started"),
            finished=n.get("finished"), recorded=Recorded.of_status(n.get("recorded")))
    return out


def phase_of(nodes: Iterable[NodeProgress], uncordon: Uncordon, paused: bool) -> Phase:
    states = [n.state for n in nodes]
    if states and all(is_done(s, uncordon) or s == "Failed" for s in states):
        return "Failed" if "Failed" in states else "Succeeded"
    if paused:
        return "Paused"
    if all(s == "Pending" for s in states):
        return "Pending"
    return "Running"


def status_of(nodes: Iterable[NodeProgress], uncordon: Uncordon, paused: bool,
              current_wave: int, generation: int) -> dict[str, Any]:
    """The whole status object the reconciler writes (status subresource)."""
    ordered = list(nodes)
    return {
        "phase": phase_of(ordered, uncordon, paused),
        "observedGeneration": generation,
        "total": len(ordered),
        "done": sum(is_done(n.state, uncordon) for n in ordered),
        "failed": sum(n.state == "Failed" for n in ordered),
        "currentWave": current_wave,
        "nodes": [n.as_status() for n in ordered],
    }
