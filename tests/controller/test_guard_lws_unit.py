"""The guard's facts and answers for LeaderWorkerSet group pods (issue 29), on plain data.

A group pod resolves to its LWS by lws's labels (never to the leader or worker StatefulSet
lws sizes), is counted in whole Ready groups, and is held until a stand-in group is whole
Ready; the record names every pod of the group (drain.groups, drain's rules too)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from drainsafe.controller.decision import (
    Allow,
    AllowReason,
    Hold,
    Release,
    ReleaseReason,
    decide,
)
from drainsafe.controller.view import gather
from drainsafe.drain import groups
from drainsafe.drain.ownership import SurgeRecord
from drainsafe.kube.objects import lws_ready_groups

NOW = 1_796_000_000.0
LWS = {"metadata": {"name": "llm", "namespace": "ml", "uid": "l1"},
       "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2}},
       "status": {"replicas": 2, "updatedReplicas": 2}}


def _pod(group: int, worker: int, node: str, *, ready: bool = True) -> dict[str, Any]:
    name = f"llm-{group}" if worker == 0 else f"llm-{group}-{worker}"
    sts = "llm" if worker == 0 else f"llm-{group}"
    return {"metadata": {
        "name": name, "namespace": "ml", "uid": f"u-{name}",
        "labels": {"drainsafe.io/guard": "true", "leaderworkerset.sigs.k8s.io/name": "llm",
                   "leaderworkerset.sigs.k8s.io/group-index": str(group),
                   "leaderworkerset.sigs.k8s.io/worker-index": str(worker)},
        "ownerReferences": [{"kind": "StatefulSet", "name": sts, "controller": True}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
            "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True" if ready else "False",
             "lastTransitionTime": "2026-12-03T11:00:00Z"}]}}


def _node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110",
                                       "nvidia.com/gpu": "1"}}}


GROUPS = [_pod(0, 0, "n0"), _pod(0, 1, "n1"), _pod(1, 0, "n2"), _pod(1, 1, "n3")]
WORKER = GROUPS[1]


def _budget(allowed: int, *, generation: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": "llm", "namespace": "ml", "generation": generation},
            "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {
                "leaderworkerset.sigs.k8s.io/name": "llm"}}},
            "status": {"observedGeneration": 1, "disruptionsAllowed": allowed}}


def _facts(pod: dict[str, Any], pods: list[dict[str, Any]], *, nodes: int = 7,
           record: SurgeRecord | None = None, lws: dict[str, Any] | None = LWS,
           let_go: tuple[str, ...] = (), budgets: tuple[dict[str, Any], ...] = ()) -> Any:
    owner = {"metadata": {"name": "llm", "namespace": "ml", "ownerReferences": [
        {"kind": "LeaderWorkerSet", "name": "llm", "controller": True}]},
        "spec": {"replicas": 2}}
    return gather(pod, namespace=None, deployments={},
                  statefulsets={"ml/llm": owner, "ml/llm-0": owner}, replicasets={},
                  pods={f"ml/{p['metadata']['name']}": p for p in pods},
                  nodes={f"n{i}": _node(f"n{i}") for i in range(nodes)},
                  record_of=lambda _o: record, now=NOW, let_go=let_go,
                  leaderworkersets=None if lws is None else {"ml/llm": lws},
                  budgets=budgets)


def _record(*, guard: bool = True, pods: dict[str, str] | None = None) -> SurgeRecord:
    return SurgeRecord(node="n1", replicas=2, by="t", at="2026-12-03T12:00:00Z",
                       autoscaler=None, pods=pods or {}, guard=guard)


def test_a_worker_resolves_to_its_lws_in_groups_and_is_held_for_a_stand_in_group() -> None:
    facts = _facts(WORKER, GROUPS)
    assert facts.pod.owner_kind == "LeaderWorkerSet" and facts.pod.unit == "ml/llm-0"
    assert facts.workload is not None and facts.workload.kind == "LeaderWorkerSet"
    assert (facts.workload.replicas, facts.workload.available) == (2, 2)
    assert facts.room
    verdict = decide(facts, hold_limit=600)
    assert isinstance(verdict, Hold) and verdict.surge_to == 3, verdict
    assert "stand-in group is entirely Ready" in verdict.message
    assert "ml/llm-0-1" in verdict.message


def test_the_eviction_is_allowed_only_once_the_stand_in_group_is_whole_ready() -> None:
    record = _record(pods={"ml/llm-0": "u-llm-0", "ml/llm-0-1": "u-llm-0-1"})
    half = [*GROUPS, _pod(2, 0, "n4"), _pod(2, 1, "n5", ready=False)]
    verdict = decide(_facts(WORKER, half, record=record), hold_limit=600)
    assert isinstance(verdict, Hold) and verdict.surge_to == 3  # one group, not one pod
    whole = [*GROUPS, _pod(2, 0, "n4"), _pod(2, 1, "n5")]
    verdict = decide(_facts(WORKER, whole, record=record), hold_limit=600)
    assert verdict == Allow(AllowReason.STAND_IN_READY)
    # The leader of the same group: the same unit, the same stand-in.
    assert decide(_facts(GROUPS[0], whole, record=record), hold_limit=600) == \
        Allow(AllowReason.STAND_IN_READY)
    # The other group's pod is not let go on group 0's stand-in.
    other = decide(_facts(GROUPS[3], whole, record=record), hold_limit=600)
    assert isinstance(other, Hold) and other.surge_to == 4


def test_the_budget_is_read_in_whole_groups() -> None:
    """A budget counts pods; one eviction takes the group's 2: the stand-in Ready is not
    enough while the budget lets only 1 pod go (or its status is stale)."""
    record = _record(pods={"ml/llm-0": "u-llm-0", "ml/llm-0-1": "u-llm-0-1"})
    whole = [*GROUPS, _pod(2, 0, "n4"), _pod(2, 1, "n5")]
    for budget in (_budget(1), _budget(2, generation=2)):
        facts = _facts(WORKER, whole, record=record, budgets=(budget,))
        verdict = decide(facts, hold_limit=600)
        assert isinstance(verdict, Hold) and verdict.waiting_for == "budget", verdict
        assert verdict.surge_to is None
        late = decide(replace(facts, held_for=600.0), hold_limit=600)
        assert isinstance(late, Release) and late.reason is ReleaseReason.BUDGET
    verdict = decide(_facts(WORKER, whole, record=record, budgets=(_budget(2),)),
                     hold_limit=600)
    assert verdict == Allow(AllowReason.STAND_IN_READY)


def test_a_pod_of_a_group_not_whole_ready_or_just_let_go_costs_no_capacity() -> None:
    broken = [GROUPS[0], _pod(0, 1, "n1", ready=False), *GROUPS[2:]]
    assert decide(_facts(GROUPS[0], broken), hold_limit=600) == Allow(AllowReason.NOT_READY)
    # Its worker was let go a moment ago: lws takes the group down, the leader goes too.
    facts = _facts(GROUPS[0], GROUPS, let_go=("ml/llm-0-1",))
    assert decide(facts, hold_limit=600) == Allow(AllowReason.NOT_READY)


def test_no_room_for_a_whole_group_holds_without_surging() -> None:
    # 5 nodes: 4 busy, one free, a group needs 2.
    verdict = decide(_facts(WORKER, GROUPS, nodes=5), hold_limit=600)
    assert isinstance(verdict, Hold) and verdict.waiting_for == "room"
    assert verdict.surge_to is None
    verdict = decide(_facts(WORKER, GROUPS, nodes=6), hold_limit=600)
    assert isinstance(verdict, Hold) and verdict.surge_to == 3


def test_a_drainsafe_drain_surge_for_the_group_lets_its_pod_go() -> None:
    record = _record(guard=False, pods={"ml/llm-0": "u-llm-0", "ml/llm-0-1": "u-llm-0-1"})
    assert decide(_facts(GROUPS[0], GROUPS, record=record), hold_limit=600) == \
        Allow(AllowReason.DRAIN_SURGED)
    held = decide(_facts(GROUPS[2], GROUPS, record=record), hold_limit=600)
    assert isinstance(held, Hold) and held.waiting_for == "surge"


def test_without_the_lws_in_view_its_statefulset_is_never_surged() -> None:
    facts = _facts(WORKER, GROUPS, lws=None)
    assert facts.workload is None and facts.pod.managed_by == "LeaderWorkerSet/llm"
    verdict = decide(facts, hold_limit=600)
    assert isinstance(verdict, Release) and verdict.reason is ReleaseReason.MANAGED


def test_the_group_rules_drain_and_the_guard_share() -> None:
    recorded = groups.record_pods("llm", {"ml/llm-0-1": "u-llm-0-1"}, GROUPS,
                                  recreates_group=True)
    assert recorded == {"ml/llm-0-1": "u-llm-0-1", "ml/llm-0": "u-llm-0"}
    assert groups.record_pods("llm", {"ml/llm-0-1": "u"}, GROUPS, recreates_group=False) == \
        {"ml/llm-0-1": "u"}
    assert groups.affected_groups("llm", ["ml/llm-1-1", "ml/llm-0", "ml/llm-1"]) == [0, 1]
    assert groups.surge_target(2, [0, 0, 1]) == 4
    # The restore waits for every group below the recorded scale to be whole Ready.
    ready = lws_ready_groups([*GROUPS[2:], _pod(2, 0, "n4"), _pod(2, 1, "n5")], 2)
    assert groups.groups_pending(ready, 2) == [0]
    assert groups.groups_pending(lws_ready_groups(GROUPS, 2), 2) == []
