"""The plan for LeaderWorkerSet groups (pure): a group pod belongs to its LWS, capacity and
surge count whole groups, room is counted for whole stand-in groups plus the recreation of
the pods on the node, and a budget over the groups' pods is read in whole groups.

Objects as lws v0.10.0 makes them (the lab's controller follows it: drainsafe.lab.
controllers.leaderworkerset): the leader `<lws>-<g>` owned by the leader StatefulSet
`<lws>`, the workers `<lws>-<g>-<w>` owned by the worker StatefulSet `<lws>-<g>`, every pod
labelled with the set's name, its group index and its worker index.
"""

from __future__ import annotations

from typing import Any

from drainsafe.drain.plan import DrainOptions, plan_drain
from drainsafe.drain.workloads import ClusterState, resolve_workload, workload_selector
from drainsafe.kube.objects import (
    LWS_GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    LWS_WORKER_INDEX_LABEL,
    lws_group_of_name,
    lws_ready_groups,
    lws_recreates_group,
    lws_rollout_in_progress,
)

from .factory import node, pdb, pod

Obj = dict[str, Any]


def lws(name: str = "llm", *, replicas: int = 2, size: int = 2, restart: str | None = None,
        ns: str = "ml", status: Obj | None = None) -> Obj:
    lwt: Obj = {"size": size, "workerTemplate": {"spec": {"containers": [{"name": "c"}]}}}
    if restart is not None:
        lwt["restartPolicy"] = restart
    return {"kind": "LeaderWorkerSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt},
            "status": status or {"replicas": replicas, "readyReplicas": replicas,
                                 "updatedReplicas": replicas}}


def group_pods(name: str, group: int, nodes: list[str], *, ns: str = "ml") -> list[Obj]:
    out = []
    for w, n in enumerate(nodes):
        pname = f"{name}-{group}" if w == 0 else f"{name}-{group}-{w}"
        owner = ("StatefulSet", name if w == 0 else f"{name}-{group}")
        out.append(pod(pname, n, ns=ns, owner=owner, gpus=1, grace=60, labels={
            "app": name, LWS_NAME_LABEL: name, LWS_GROUP_INDEX_LABEL: str(group),
            LWS_WORKER_INDEX_LABEL: str(w)}))
    return out


def cluster(nodes: int, *, replicas: int = 2, restart: str | None = None,
            pdbs: list[Obj] | None = None, extra_pods: list[Obj] | None = None
            ) -> ClusterState:
    """`replicas` groups of 2 on n1..n{2 x replicas}, the rest of the nodes free."""
    pods = [p for g in range(replicas)
            for p in group_pods("llm", g, [f"n{2 * g + 1}", f"n{2 * g + 2}"])]
    return ClusterState(nodes=[node(f"n{i}") for i in range(1, nodes + 1)],
                        pods=pods + (extra_pods or []), pdbs=pdbs or [],
                        controllers={"LeaderWorkerSet/ml/llm": lws(replicas=replicas,
                                                                    restart=restart)})


def test_lws_objects_read_as_lws_does() -> None:
    assert lws_group_of_name("llm", "llm-1-1") == 1 and lws_group_of_name("llm", "llm-12") == 12
    assert lws_group_of_name("llm", "other-1") is None
    assert lws_recreates_group(lws())
    assert lws_recreates_group(lws(restart="RecreateGroupAfterStart"))
    assert not lws_recreates_group(lws(restart="None"))
    assert not lws_recreates_group(lws(restart="Default"))
    pods = group_pods("llm", 0, ["a", "b"]) + group_pods("llm", 1, ["c", "d"])
    pods[3]["status"]["conditions"][0]["status"] = "False"  # a worker of group 1
    assert sorted(lws_ready_groups(pods, 2)) == [0]
    assert lws_rollout_in_progress(lws()) is None
    assert lws_rollout_in_progress(lws(status={"updatedReplicas": 1})) == "1/2 groups updated"
    assert lws_rollout_in_progress(lws(status={"conditions": [
        {"type": "UpdateInProgress", "status": "True", "reason": "GroupsUpdating"}]}))


def test_a_worker_and_a_leader_belong_to_their_lws_counted_in_groups() -> None:
    state = cluster(6)
    worker = state.pods[1]
    w = resolve_workload(worker, state.controllers)
    assert w is not None and (w.kind, w.name, w.replicas, w.group_size) == (
        "LeaderWorkerSet", "llm", 2, 2)
    leader = resolve_workload(state.pods[0], state.controllers)
    assert leader == w
    selector = workload_selector(w.key, state.controllers[w.key], w.replicas)
    assert selector is not None and selector.group_size == 2 and selector.replicas == 2
    # Without the LWS object (no CRD read), the pod is its StatefulSet's, as before.
    assert resolve_workload(worker, {}).kind == "StatefulSet"  # type: ignore[union-attr]


def test_a_worker_node_surges_one_whole_group_with_room_for_its_recreation() -> None:
    # 7 nodes: 4 busy, 3 free: the stand-in group takes 2, the worker's recreation 1.
    plan = plan_drain(cluster(7), ["n2"])
    assert plan.ok, plan.blockers
    [w] = plan.workload_plans
    assert (w.workload, w.strategy, w.identity, w.surge, w.floor, w.replicas) == (
        "LeaderWorkerSet/ml/llm", "surge", "group", 1, 2, 2)
    assert w.groups == (0,) and w.group_size == 2 and w.recreates_group
    assert "1 more group(s) of 2 pods" in w.why and "recreates the whole group" in w.why
    placed = sorted(p.node for p in plan.placements if p.node)
    assert len(placed) == 3 and len(set(placed)) == 3  # one GPU each: distinct nodes
    assert not {"n1", "n2", "n3", "n4"} & set(placed)


def test_two_free_nodes_cannot_hold_a_stand_in_group_and_the_recreation() -> None:
    """4 busy, 2 free: the stand-in group fits, but not the worker's recreation beside it
    (the leader's node is freed only by the group's own deletion and refills with the
    recreated leader). The refusal names the group and its floor evict-first."""
    plan = plan_drain(cluster(6), ["n2"])
    assert [b.kind for b in plan.blockers] == ["no-room"]
    message = plan.blockers[0].message
    assert "stand-in group of 2 pods" in message and "group 0 cannot surge" in message
    assert "1/2 groups Ready" in message
    # Evict-first needs room for the recreation only, and says its floor: 1 of 2 groups.
    evict = plan_drain(cluster(6), ["n2"], DrainOptions(strategy="evict"))
    assert evict.ok, evict.blockers
    [w] = evict.workload_plans
    assert (w.strategy, w.floor, w.replicas) == ("evict", 1, 2)


def test_the_group_pod_on_another_node_being_drained_needs_room_too() -> None:
    """A NodeMaintenance drains n2 while n1 (the same group's leader) is drained beside it:
    the leader's recreation cannot use the room it frees (n1 is cordoned), so the plan
    counts it: 3 free nodes hold the stand-in group and one recreation, not both."""
    assert plan_drain(cluster(7), ["n2"]).ok  # alone: the leader's own node is reused
    plan = plan_drain(cluster(7), ["n2"], draining=["n1"])
    assert [b.kind for b in plan.blockers] == ["no-room"], plan.blockers
    assert plan_drain(cluster(8), ["n2"], draining=["n1"]).ok  # 4 free: it fits


def test_a_rerun_with_the_stand_in_group_up_needs_room_for_the_recreation_only() -> None:
    stand_in = group_pods("llm", 2, ["n5", "n6"])
    state = cluster(7, extra_pods=stand_in)
    state.controllers["LeaderWorkerSet/ml/llm"]["spec"]["replicas"] = 3  # type: ignore[index]
    state.controllers["LeaderWorkerSet/ml/llm"]["metadata"]["annotations"] = {  # type: ignore[index]
        "drainsafe.io/surge": '{"node": "n2", "replicas": 2, "pods": {}}'}
    plan = plan_drain(state, ["n2"])
    assert plan.ok, plan.blockers
    [w] = plan.workload_plans
    assert w.resumed and w.replicas == 2 and w.surge == 1
    assert [p.node for p in plan.placements] == ["n7"]


def test_restart_policy_none_evicts_each_pod_and_says_so() -> None:
    plan = plan_drain(cluster(7, restart="None"), ["n2"])
    [w] = plan.workload_plans
    assert not w.recreates_group and "restartPolicy None" in w.why
    # A leader on the node still takes its workers (their StatefulSet is the leader
    # pod's): its budget is read in whole groups.
    plan = plan_drain(cluster(7, restart="None",
                              pdbs=[pdb("llm", {"app": "llm"}, max_unavailable=1)]), ["n1"])
    assert [b.kind for b in plan.blockers] == ["wedged-budget"]


def test_a_budget_over_the_groups_pods_is_read_in_whole_groups() -> None:
    # minAvailable 4 over 2 groups of 2 pods: a wedge evict-first; with the stand-in group
    # (6 pods) it lets 2 pods, one whole group, go.
    plan = plan_drain(cluster(7, pdbs=[pdb("llm", {"app": "llm"}, min_available=4)]), ["n2"])
    assert plan.ok, plan.blockers
    [b] = plan.budgets
    assert (b.replicas, b.surge, b.group_size) == (4, 2, 2)
    assert (b.best_case_disruptions, b.best_case_with_surge) == (0, 1)
    assert any("allows 1 group(s) of 2 pods" in n for n in plan.notes), plan.notes
    # maxUnavailable 1 lets one pod go, but one eviction takes the whole group of 2.
    plan = plan_drain(cluster(7, pdbs=[pdb("llm", {"app": "llm"}, max_unavailable=1)]),
                      ["n2"])
    [blocker] = plan.blockers
    assert blocker.kind == "wedged-budget" and "whole groups of 2 pods" in blocker.message
    assert "maxUnavailable to 2" in blocker.fix
    # minAvailable 5 of 6 surged pods: 1 pod, no whole group.
    plan = plan_drain(cluster(7, pdbs=[pdb("llm", {"app": "llm"}, min_available=5)]), ["n2"])
    [blocker] = plan.blockers
    assert "minAvailable to at most 2" in blocker.fix
    # With restartPolicy None one eviction takes one pod: read in pods as before.
    plan = plan_drain(cluster(7, restart="None",
                              pdbs=[pdb("llm", {"app": "llm"}, max_unavailable=1)]), ["n2"])
    assert plan.ok, plan.blockers


def test_mid_update_stands_down_to_evict() -> None:
    state = cluster(7)
    state.controllers["LeaderWorkerSet/ml/llm"]["status"]["updatedReplicas"] = 1  # type: ignore[index]
    [w] = plan_drain(state, ["n2"]).workload_plans
    assert w.strategy == "evict" and "mid-update (1/2 groups updated)" in w.why


def test_evict_first_counts_room_for_the_recreation() -> None:
    # 4 nodes, all busy: evict-first has nowhere to recreate the worker.
    plan = plan_drain(cluster(4), ["n2"], DrainOptions(strategy="evict"))
    assert [b.kind for b in plan.blockers] == ["no-room"]


def test_the_dry_run_table_speaks_in_groups() -> None:
    import io

    from rich.console import Console

    from drainsafe.drain.report import render_plan

    plan = plan_drain(cluster(7, pdbs=[pdb("llm", {"app": "llm"}, min_available=4)]), ["n2"])
    out = io.StringIO()
    render_plan(Console(file=out, width=300), plan)
    text = out.getvalue()
    assert "+1 group(s) of 2" in text and "2/2 (100%) groups" in text, text
    assert "PDB ml/llm: 4 pods, allows 0 whole group(s) of 2 pods" in text, text
