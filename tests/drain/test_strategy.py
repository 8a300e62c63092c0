"""The per-workload strategy: surge or evict, its size, capacity floor and the surge record."""

from __future__ import annotations

from typing import Any

from drainsafe.drain.ownership import AutoscalerBounds, SurgeRecord
from drainsafe.drain.plan import ClusterState, DrainOptions, plan_drain
from drainsafe.kube.objects import rollout_in_progress, statefulset_rollout_in_progress

from .factory import node, pdb, pod, serving


def hpa(name: str, target: str, lo: int, hi: int, ns: str = "ml") -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": target},
                     "minReplicas": lo, "maxReplicas": hi}}


def three_nodes() -> list[dict[str, Any]]:
    return [node("g1", gpus=2), node("g2", gpus=2), node("g3", gpus=2)]


def test_deployment_surges_by_its_pods_on_the_node_in_one_step() -> None:
    pods, ctrl = serving("llm", ["g1", "g1", "g2"])
    plan = plan_drain(ClusterState(three_nodes(), pods, controllers=ctrl), ["g1"])
    assert plan.ok, plan.blockers
    [w] = plan.workload_plans
    assert (w.strategy, w.surge, w.replicas, w.floor) == ("surge", 2, 3, 3)
    assert w.pods == ("ml/llm-0", "ml/llm-1")
    # Room is checked for both surge pods, no GPU counted twice.
    assert {p.replacement_on for p in plan.pods} <= {"g2", "g3"}


def test_evict_strategy_and_its_capacity_floor() -> None:
    pods, ctrl = serving("llm", ["g1", "g2"])
    plan = plan_drain(ClusterState(three_nodes(), pods, controllers=ctrl), ["g1"],
                      DrainOptions(strategy="evict"))
    [w] = plan.workload_plans
    assert (w.strategy, w.surge, w.floor) == ("evict", 0, 1)
    assert w.why == "--strategy evict"


def statefulset(nodes: list[str], *, replicas: int | None = None, gpus: int = 1,
                **status: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    pods = [pod(f"db-{i}", n, owner=("StatefulSet", "db"), labels={"app": "db"}, gpus=gpus)
            for i, n in enumerate(nodes)]
    n = replicas if replicas is not None else len(nodes)
    ctrl = {"StatefulSet/ml/db": {
        "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "ml", "generation": 1},
        "spec": {"replicas": n, "selector": {"matchLabels": {"app": "db"}}},
        "status": {"observedGeneration": 1, "replicas": n, "readyReplicas": n,
                   "currentRevision": "db-1", "updateRevision": "db-1", **status}}}
    return pods, ctrl


def test_statefulset_surges_with_stand_ins_and_room_for_its_recreation_too() -> None:
    pods, ctrl = statefulset(["g1", "g2", "g3"])
    nodes = [node("g1"), node("g2"), node("g3"), node("g4"), node("g5")]
    plan = plan_drain(ClusterState(nodes, pods, controllers=ctrl), ["g1"])
    assert plan.ok, plan.blockers
    [w] = plan.workload_plans
    assert (w.strategy, w.surge, w.floor, w.replicas, w.identity) == (
        "surge", 1, 3, 3, "stable")
    assert "recreated under its name" in w.why
    # One GPU for the stand-in db-3, one for db-0 recreated while db-3 still runs.
    assert sorted(p.node for p in plan.placements) == ["g4", "g5"]
    # Room for only one of the two: refused, saying why, once.
    short = plan_drain(ClusterState(nodes[:4], pods, controllers=ctrl), ["g1"])
    [b] = short.blockers
    assert b.kind == "no-room" and "stand-in and for itself" in b.message


def test_statefulset_rerun_with_its_stand_in_running_needs_room_for_the_recreation() -> None:
    pods, ctrl = statefulset(["g1", "g2", "g3"], replicas=2)  # db-2 is the stand-in
    ctrl["StatefulSet/ml/db"]["metadata"]["annotations"] = {"drainsafe.io/surge": SurgeRecord(
        node="g1", replicas=2, pods={"ml/db-0": "uid-db-0"}).to_json()}
    nodes = [node("g1"), node("g2"), node("g3"), node("g4")]
    plan = plan_drain(ClusterState(nodes, pods, controllers=ctrl), ["g1"])
    assert plan.ok, plan.blockers
    [w] = plan.workload_plans
    assert (w.strategy, w.replicas, w.resumed) == ("surge", 2, True)
    assert [p.node for p in plan.placements] == ["g4"]


def test_statefulset_mid_update_is_evict_first_with_the_floor_stated() -> None:
    pods, ctrl = statefulset(["g1", "g2", "g3"], updateRevision="db-2")
    nodes = [node("g1"), node("g2"), node("g3"), node("g4"), node("g5")]
    plan = plan_drain(ClusterState(nodes, pods, controllers=ctrl), ["g1"])
    [w] = plan.workload_plans
    assert (w.strategy, w.floor, w.replicas) == ("evict", 2, 3)
    assert "mid-update (rolling update from revision db-1 to db-2)" in w.why


def test_statefulset_hpa_is_named() -> None:
    pods, ctrl = statefulset(["g1", "g2"])
    scaler = hpa("db", "db", 2, 4)
    scaler["spec"]["scaleTargetRef"]["kind"] = "StatefulSet"
    nodes = [node("g1"), node("g2"), node("g3"), node("g4")]
    plan = plan_drain(ClusterState(nodes, pods, controllers=ctrl, autoscalers=[scaler]),
                      ["g1"])
    [w] = plan.workload_plans
    assert w.strategy == "surge" and w.autoscaler == "ml/db" and "minReplicas" in w.why


def test_mid_rollout_stands_down_to_evict() -> None:
    pods, ctrl = serving("llm", ["g1", "g2"])
    dep = ctrl["Deployment/ml/llm"]
    dep["metadata"]["generation"] = 3
    dep["status"] = {"observedGeneration": 2}
    plan = plan_drain(ClusterState(three_nodes(), pods, controllers=ctrl), ["g1"])
    [w] = plan.workload_plans
    assert w.strategy == "evict" and "mid-rollout" in w.why
    assert rollout_in_progress(dep, []) == "observedGeneration 2 is behind generation 3"
    steady = {"metadata": {"generation": 3},
              "spec": {"replicas": 2},
              "status": {"observedGeneration": 3, "updatedReplicas": 2, "conditions": [
                  {"type": "Progressing", "status": "True",
                   "reason": "NewReplicaSetAvailable"}]}}
    assert rollout_in_progress(steady, []) is None
    rolling = {**steady, "status": {**steady["status"], "conditions": [
        {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]}}
    assert rollout_in_progress(rolling, []) == "Progressing: ReplicaSetUpdated"
    two = [{"spec": {"replicas": 1}}, {"spec": {"replicas": 1}}]
    assert rollout_in_progress(steady, two) == "2 ReplicaSets have replicas"


def test_hpa_owned_scale_is_named() -> None:
    pods, ctrl = serving("llm", ["g1", "g2"])
    plan = plan_drain(ClusterState(three_nodes(), pods, controllers=ctrl,
                                   autoscalers=[hpa("llm", "llm", 2, 4)]), ["g1"])
    [w] = plan.workload_plans
    assert w.strategy == "surge" and w.autoscaler == "ml/llm" and "minReplicas" in w.why


def test_no_room_for_the_surge_is_refused() -> None:
    pods, ctrl = serving("llm", ["g1", "g2"])
    nodes = [node("g1"), node("g2")]
    plan = plan_drain(ClusterState(nodes, pods, controllers=ctrl), ["g1"])
    assert [b.kind for b in plan.blockers] == ["no-room"]


def test_rerun_with_the_surge_running_needs_no_more_room() -> None:
    # An earlier run scaled 2 -> 3 and was killed: the surge pod runs on g3; no free GPU.
    pods, ctrl = serving("llm", ["g1", "g2", "g3"])
    record = SurgeRecord(node="g1", replicas=2, pods={"ml/llm-0": "uid-llm-0"})
    ctrl["Deployment/ml/llm"]["metadata"]["annotations"] = {
        "drainsafe.io/surge": record.to_json()}
    nodes = [node("g1"), node("g2"), node("g3")]
    plan = plan_drain(ClusterState(nodes, pods, controllers=ctrl), ["g1"])
    assert plan.ok, plan.blockers
    [w] = plan.workload_plans
    assert (w.strategy, w.replicas, w.resumed, w.surge) == ("surge", 2, True, 1)
    # The same record does not let a drain of another node surge it again.
    other = plan_drain(ClusterState(nodes, pods, controllers=ctrl), ["g2"])
    assert "surge-owned" in [b.kind for b in other.blockers]


def test_rerun_after_every_eviction_still_restores() -> None:
    pods, ctrl = serving("llm", ["g2", "g3"])
    record = SurgeRecord(node="g1", replicas=2)
    ctrl["Deployment/ml/llm"]["metadata"]["annotations"] = {
        "drainsafe.io/surge": record.to_json()}
    plan = plan_drain(ClusterState(three_nodes(), pods, controllers=ctrl), ["g1"])
    [w] = plan.workload_plans
    assert (w.pods, w.strategy, w.resumed, w.replicas) == ((), "surge", True, 2)


def test_surge_record_round_trip() -> None:
    record = SurgeRecord(node="g1", replicas=2, by="me", at="2026-01-01T00:00:00Z",
                         autoscaler=AutoscalerBounds("llm", None, 4), pods={"ml/a": "u1"})
    obj = {"metadata": {"annotations": {"drainsafe.io/surge": record.to_json()}}}
    assert SurgeRecord.of(obj) == record
    assert SurgeRecord.of({"metadata": {}}) is None


def test_budget_with_max_unavailable_paces_one_at_a_time() -> None:
    pods, ctrl = serving("llm", ["g1", "g1", "g2", "g3"])
    plan = plan_drain(ClusterState(three_nodes(), pods,
                                   [pdb("llm", {"app": "llm"}, max_unavailable=1)], ctrl),
                      ["g1"])
    [b] = plan.budgets
    assert (b.surge, b.best_case_disruptions, b.best_case_with_surge) == (2, 1, 1)


def test_statefulset_rollout_as_kubectl_rollout_status_reads_it() -> None:
    steady = {"metadata": {"generation": 2},
              "spec": {"replicas": 3},
              "status": {"observedGeneration": 2, "updatedReplicas": 3,
                         "currentRevision": "db-1", "updateRevision": "db-1"}}
    assert statefulset_rollout_in_progress(steady) is None
    behind = {**steady, "metadata": {"generation": 3}}
    assert statefulset_rollout_in_progress(behind) == \
        "observedGeneration 2 is behind generation 3"
    never = {**steady, "status": {}}
    assert statefulset_rollout_in_progress(never) == \
        "observedGeneration 0 is behind generation 2"
    rolling = {**steady, "status": {**steady["status"], "updatedReplicas": 1,
                                    "updateRevision": "db-2"}}
    assert statefulset_rollout_in_progress(rolling) == \
        "rolling update from revision db-1 to db-2"
    partitioned = {**rolling, "spec": {"replicas": 3, "updateStrategy": {
        "type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}}
    assert statefulset_rollout_in_progress(partitioned) == \
        "partitioned roll out: 1/2 new pods updated"
    # kubectl calls a partitioned update with its pods updated complete; a stand-in would
    # still start at the update revision.
    staged = {**partitioned, "status": {**rolling["status"], "updatedReplicas": 2}}
    assert statefulset_rollout_in_progress(staged) == \
        "rolling update from revision db-1 to db-2"


def test_statefulset_min_available_equal_to_replicas_does_not_wedge_the_surge() -> None:
    pods, ctrl = statefulset(["g1", "g2"])
    nodes = [node("g1"), node("g2"), node("g3"), node("g4")]
    plan = plan_drain(ClusterState(nodes, pods, [pdb("db", {"app": "db"}, min_available=2)],
                                   ctrl), ["g1"])
    assert plan.ok, plan.blockers
    [b] = plan.budgets
    assert (b.best_case_disruptions, b.best_case_with_surge) == (0, 1)
    assert any("the budget is respected, not bypassed" in n for n in plan.notes)


# -- a scale by a surge record is not a rollout ------------------------------------------

TEMPLATE: dict[str, Any] = {"metadata": {"labels": {"app": "llm"}},
                            "spec": {"containers": [{"name": "c", "image": "llm:1"}]}}


def surged(replicas: int, rs_replicas: int, *, generation: int, observed: int,
           updated: int, record: SurgeRecord | None,
           template: dict[str, Any] = TEMPLATE) -> tuple[list[dict[str, Any]],
                                                           dict[str, Any]]:
    """llm on g1 and g2 (base 2), its Deployment at `replicas` with the controller's last
    status at `observed`, and its one ReplicaSet (carrying `template`, as the controller
    writes it: with a pod-template-hash) at `rs_replicas`."""
    pods, ctrl = serving("llm", ["g1", "g2"])
    dep = ctrl["Deployment/ml/llm"]
    dep["metadata"].update(generation=generation, uid="uid-llm")
    if record is not None:
        dep["metadata"]["annotations"] = {"drainsafe.io/surge": record.to_json()}
    dep["spec"] = {"replicas": replicas, "template": TEMPLATE}
    dep["status"] = {"observedGeneration": observed, "replicas": rs_replicas,
                     "updatedReplicas": updated, "conditions": [
                         {"type": "Progressing", "status": "True",
                          "reason": "NewReplicaSetAvailable"}]}
    rs = ctrl["ReplicaSet/ml/llm-rs"]
    rs["spec"] = {"replicas": rs_replicas, "template": {
        "metadata": {"labels": {**template["metadata"]["labels"],
                                "pod-template-hash": "5d8f7c9b6"}},
        "spec": template["spec"]}}
    return pods, ctrl


def four_nodes() -> list[dict[str, Any]]:
    return [node("g1"), node("g2"), node("g3"), node("g4")]


def test_the_guards_scale_up_not_yet_seen_is_not_a_rollout() -> None:
    # The guard recorded its surge for another drainer and scaled 2 -> 3; the deployment
    # controller has not synced yet (generation ahead, 2 of 3 updated). The drain still
    # plans a surge (execute waits for the guard's restore first), never evict-first.
    guard = SurgeRecord(node="g2", replicas=2, pods={"ml/llm-1": "uid-llm-1"}, guard=True)
    for observed, rs_replicas, updated in ((4, 2, 2), (5, 2, 2), (5, 3, 2)):
        pods, ctrl = surged(3, rs_replicas, generation=5, observed=observed,
                            updated=updated, record=guard)
        plan = plan_drain(ClusterState(four_nodes(), pods, controllers=ctrl), ["g1"])
        [w] = plan.workload_plans
        assert (w.strategy, w.replicas, w.surge, w.resumed) == ("surge", 2, 1, False), w.why


def test_the_guards_restore_not_yet_seen_is_not_a_rollout() -> None:
    # The guard restored 3 -> 2 and removed its record; the controller has not scaled the
    # ReplicaSet down yet.
    pods, ctrl = surged(2, 3, generation=6, observed=5, updated=3, record=None)
    plan = plan_drain(ClusterState(four_nodes(), pods, controllers=ctrl), ["g1"])
    [w] = plan.workload_plans
    assert (w.strategy, w.replicas, w.surge) == ("surge", 2, 1), w.why


def test_a_template_change_not_yet_seen_is_still_a_rollout() -> None:
    # The same lag with a new image: the one ReplicaSet carries the old template, so a
    # scale now would start pods of a template the controller is about to replace.
    old = {**TEMPLATE, "spec": {"containers": [{"name": "c", "image": "llm:0"}]}}
    pods, ctrl = surged(2, 2, generation=6, observed=5, updated=2, record=None, template=old)
    plan = plan_drain(ClusterState(four_nodes(), pods, controllers=ctrl), ["g1"])
    [w] = plan.workload_plans
    assert w.strategy == "evict"
    assert "mid-rollout (observedGeneration 5 is behind generation 6)" in w.why
