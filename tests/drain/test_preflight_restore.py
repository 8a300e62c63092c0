"""preflight.restoring: after the eviction guard's restore, the workloads whose scale-down
is not done yet (more pods holding room than they want), read from a plain ClusterState;
preflight.refusal_of: a guard wait that timed out is named in the refusal; preflight.surges:
--surge never grows the pool on top of a guard's restore not seen to finish."""

from __future__ import annotations

from typing import Any

from drainsafe.drain.blockers import Blocker
from drainsafe.drain.plan import DrainPlan
from drainsafe.drain.preflight import refusal_of, restoring, surges
from drainsafe.drain.workloads import ClusterState

LLM = "Deployment/default/llm"


def owned(kind: str, name: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "apps/v1", "kind": kind, "name": name, "controller": True}]


def pod(name: str, *, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default",
                            "ownerReferences": owned("ReplicaSet", "llm-abc")}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "node-0"}, "status": {"phase": phase}}


def state(*pods: dict[str, Any], replicas: int = 2) -> ClusterState:
    dep = {"metadata": {"name": "llm", "namespace": "default"}, "spec": {"replicas": replicas}}
    rs = {"metadata": {"name": "llm-abc", "namespace": "default",
                       "ownerReferences": owned("Deployment", "llm")},
          "spec": {"replicas": replicas}}
    return ClusterState(nodes=[], pods=list(pods),
                        controllers={LLM: dep, "ReplicaSet/default/llm-abc": rs})


def test_a_pod_beyond_the_restored_scale_holds_room_until_it_is_finished() -> None:
    # not yet deleted, or terminating: still holding its node's room
    assert restoring(state(pod("a"), pod("b"), pod("c")), [LLM]) == {LLM: 2}
    assert restoring(state(pod("a"), pod("b"), pod("c", deleting=True)), [LLM]) == {LLM: 2}
    # finished (its container exited), or gone: done
    assert restoring(state(pod("a"), pod("b"), pod("c", phase="Succeeded", deleting=True)),
                     [LLM]) == {}
    assert restoring(state(pod("a"), pod("b")), [LLM]) == {}


def test_only_the_restored_workloads_are_read() -> None:
    assert restoring(state(pod("a"), pod("b"), pod("c")), ["Deployment/default/other"]) == {}


def plan_blocked(*blockers: Blocker) -> DrainPlan:
    return DrainPlan(nodes=("node-0",), pods=(), budgets=(), workloads={}, queues=(),
                     blockers=blockers, warnings=())


def test_a_guard_wait_that_timed_out_is_said_before_the_room_it_was_to_give_back() -> None:
    room = Blocker("no-room", "Pod default/llm-1", "no other schedulable node has room",
                   "add a node first")
    guard = "the eviction guard has not restored Deployment/default/llm within --timeout 9s"
    assert refusal_of(plan_blocked(room), guard) == (
        f"{guard}; Pod default/llm-1: no other schedulable node has room")
    assert refusal_of(plan_blocked(room)) == (
        "Pod default/llm-1: no other schedulable node has room")
    # the plan found room after all (the restore came just after the wait): no refusal
    assert refusal_of(plan_blocked(), guard) == ""


def test_no_surge_on_top_of_a_guard_restore_not_seen_to_finish() -> None:
    room = Blocker("no-room", "Pod default/llm-1", "no other schedulable node has room",
                   "add a node first")
    budget = Blocker("wedged-budget", "PodDisruptionBudget default/llm", "allows 0", "")
    guard = "the eviction guard has not restored Deployment/default/llm within --timeout 9s"
    # the guard's restore came (or was never waited for): --surge grows the pool for room
    assert surges(plan_blocked(room), "", surge_asked=True)
    # it did not come: refused rather than surged, the wait named first, and why no surge
    assert not surges(plan_blocked(room), guard, surge_asked=True)
    assert refusal_of(plan_blocked(room), guard, surge_asked=True) == (
        f"{guard}; no --surge on top of a restore not seen to finish; "
        "Pod default/llm-1: no other schedulable node has room")
    # no --surge asked, or a blocker a surge cannot lift: nothing said of --surge
    assert not surges(plan_blocked(room), "", surge_asked=False)
    assert not surges(plan_blocked(room, budget), "", surge_asked=True)
    assert refusal_of(plan_blocked(room, budget), guard, surge_asked=True) == (
        f"{guard}; Pod default/llm-1: no other schedulable node has room; "
        "PodDisruptionBudget default/llm: allows 0")
    # room after all: neither a surge nor a refusal
    assert not surges(plan_blocked(), guard, surge_asked=True)
    assert refusal_of(plan_blocked(), guard, surge_asked=True) == ""
