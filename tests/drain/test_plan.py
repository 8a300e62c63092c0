"""The pure drain plan: classification, budgets, room, order."""

from __future__ import annotations

from drainsafe.drain.plan import ClusterState, DrainOptions, plan_drain

from .factory import deployment, node, pdb, pod, serving


def kinds(plan: object) -> list[str]:
    return sorted(b.kind for b in plan.blockers)  # type: ignore[attr-defined]


def test_classification_the_kubectl_way() -> None:
    nodes = [node("g1"), node("g2", gpus=2)]
    pods = [
        pod("plugin", "g1", ns="gpu", owner=("DaemonSet", "device-plugin")),
        pod("static", "g1", ns="kube-system", mirror=True),
        pod("done", "g1", owner=("Job", "j"), phase="Succeeded"),
        pod("web-0", "g1", owner=("ReplicaSet", "web-rs"), gpus=1),
        pod("elsewhere", "g2", owner=("ReplicaSet", "web-rs"), gpus=1),
    ]
    plan = plan_drain(ClusterState(nodes, pods, controllers=deployment("web", 2)), ["g1"])
    actions = {p.name: (p.action, p.reason) for p in plan.pods}
    assert actions["plugin"][0] == "skip" and "DaemonSet" in actions["plugin"][1]
    assert actions["static"][0] == "skip" and "mirror" in actions["static"][1]
    assert actions["done"][0] == "evict" and "finished" in actions["done"][1]
    assert actions["web-0"][0] == "evict"
    assert "elsewhere" not in actions
    assert plan.ok, plan.blockers
    assert plan.pod("ml/web-0").workload == "Deployment/ml/web"
    assert plan.pod("ml/web-0").replacement_on == "g2"


def test_unmanaged_and_emptydir_block_until_flag() -> None:
    nodes = [node("g1"), node("g2")]
    pods = [pod("naked", "g1"), pod("cache", "g1", owner=("ReplicaSet", "web-rs"),
                                    empty_dir=True)]
    state = ClusterState(nodes, pods, controllers=deployment("web", 1))
    plan = plan_drain(state, ["g1"])
    assert kinds(plan) == ["local-data", "unmanaged"]
    assert any("--delete-emptydir-data" in b.message for b in plan.blockers)
    plan2 = plan_drain(state, ["g1"], DrainOptions(delete_emptydir_data=True))
    assert kinds(plan2) == ["unmanaged"]
    assert any("1 replica" in w for w in plan2.warnings)


def test_min_available_equal_to_replicas_is_a_wedge_named_with_fix() -> None:
    pods, ctrl = serving("llm", ["g1", "g2"])
    nodes = [node("g1"), node("g2"), node("g3")]
    state = ClusterState(nodes, pods, [pdb("llm", {"app": "llm"}, min_available=2)], ctrl)
    # Surge-first is not held by it: with 3 Ready the same budget allows 1 (a note).
    surged = plan_drain(state, ["g1"])
    assert surged.ok and surged.budgets[0].best_case_with_surge == 1
    assert any("wedge" in n and "allows 1" in n for n in surged.notes)
    plan = plan_drain(state, ["g1"], DrainOptions(strategy="evict"))
    [b] = plan.blockers
    assert b.kind == "wedged-budget" and b.object == "PodDisruptionBudget ml/llm"
    assert "minAvailable 2 with 2 replicas" in b.message
    assert "maxUnavailable: 1" in b.fix
    ok = plan_drain(ClusterState(nodes, pods, [pdb("llm", {"app": "llm"}, max_unavailable=1)],
                                 ctrl), ["g1"])
    assert ok.ok and ok.budgets[0].best_case_disruptions == 1


def test_percent_budgets_and_zero_max_unavailable() -> None:
    pods, ctrl = serving("llm", ["g1", "g2"])
    nodes = [node("g1"), node("g2"), node("g3")]
    for spec in ({"min_available": "100%"}, {"max_unavailable": 0},
                 {"max_unavailable": "0%"}):
        # These wedge surge-first too: the disruption controller counts the surged scale
        # (maxUnavailable 0 of 3 is still 0).
        for strategy in ("surge", "evict"):
            plan = plan_drain(ClusterState(nodes, pods, [pdb("llm", {"app": "llm"}, **spec)],
                                           ctrl), ["g1"], DrainOptions(strategy=strategy))
            assert kinds(plan) == ["wedged-budget"], (spec, strategy)
    plan = plan_drain(ClusterState(nodes, pods, [pdb("llm", {"app": "llm"},
                                                     min_available="50%")], ctrl), ["g1"])
    assert plan.ok


def test_pod_under_two_budgets_is_refused_with_the_500_explained() -> None:
    pods, ctrl = serving("llm", ["g1", "g2"], replicas=2)
    budgets = [pdb("a", {"app": "llm"}, max_unavailable=1),
               pdb("b", {"app": "llm"}, max_unavailable=1)]
    plan = plan_drain(ClusterState([node("g1"), node("g2"), node("g3")], pods, budgets, ctrl),
                      ["g1"])
    [b] = plan.blockers
    assert b.kind == "multiple-pdbs" and b.object == "Pod ml/llm-0"
    assert "ml/a, ml/b" in b.message and "500" in b.message


def test_no_free_gpu_refuses_and_says_where_it_looked() -> None:
    pods, ctrl = serving("llm", ["g1", "g2"])
    nodes = [node("g1"), node("g2"), node("g3", unschedulable=True)]
    plan = plan_drain(ClusterState(nodes, pods, [], ctrl), ["g1"])
    [b] = plan.blockers
    assert b.kind == "no-room"
    assert "g2: Insufficient nvidia.com/gpu (0 free, 1 needed)" in b.message
    assert "g3: cordoned" in b.message
    assert "nvidia.com/gpu: 1" in b.message


def test_room_honours_selector_and_taints() -> None:
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    nodes = [node("g1"), node("g2", taints=[gpu_taint], labels={"pool": "a100"}),
             node("g3", labels={"pool": "h100"})]
    p = pod("x-0", "g1", owner=("ReplicaSet", "x-rs"), gpus=1, node_selector={"pool": "a100"})
    state = ClusterState(nodes, [p], controllers=deployment("x", 1))
    plan = plan_drain(state, ["g1"])
    assert kinds(plan) == ["no-room"]
    assert "g2: had untolerated taint {nvidia.com/gpu: present}" in plan.blockers[0].message
    assert "g3: didn't match Pod's node affinity/selector" in plan.blockers[0].message
    p["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    plan = plan_drain(state, ["g1"])
    assert plan.ok and plan.pod("ml/x-0").replacement_on == "g2"


def test_two_replacements_never_count_one_free_gpu_twice() -> None:
    a_pods, a_ctrl = serving("a", ["g1"], replicas=2)
    b_pods, b_ctrl = serving("b", ["g1"], replicas=2)
    nodes = [node("g1", gpus=2), node("g2", gpus=1)]
    plan = plan_drain(ClusterState(nodes, a_pods + b_pods, [], {**a_ctrl, **b_ctrl}), ["g1"])
    assert kinds(plan) == ["no-room"]


def test_order_one_workload_in_sequence_workloads_in_parallel() -> None:
    a_pods, a_ctrl = serving("a", ["g1", "g1", "g2"])
    b_pods, b_ctrl = serving("b", ["g1"], replicas=2)
    nodes = [node("g1", gpus=3), node("g2", gpus=1), node("g3", gpus=4)]
    plan = plan_drain(ClusterState(nodes, a_pods + b_pods, [], {**a_ctrl, **b_ctrl}), ["g1"])
    assert plan.ok, plan.blockers
    queues = {q.workload: q.pods for q in plan.queues}
    assert queues["Deployment/ml/a"] == ("ml/a-0", "ml/a-1")
    assert queues["Deployment/ml/b"] == ("ml/b-0",)
    assert plan.longest_grace == 150
    assert plan.longest_queue_grace == 300


def test_fleet_nodes_are_no_room_for_each_other() -> None:
    pods, ctrl = serving("llm", ["g1", "g2"], replicas=2)
    nodes = [node("g1", gpus=2), node("g2", gpus=2)]
    assert plan_drain(ClusterState(nodes, pods, [], ctrl), ["g1"]).ok
    plan = plan_drain(ClusterState(nodes, pods, [], ctrl), ["g1"], draining=["g2"])
    assert kinds(plan) == ["no-room"]
    assert "g2: being drained" in plan.blockers[0].message


def test_unknown_node_and_json_shape() -> None:
    plan = plan_drain(ClusterState([node("g1")], []), ["nope"])
    assert kinds(plan) == ["no-node"]
    d = plan.to_dict()
    assert d["ok"] is False and d["blockers"][0]["object"] == "Node nope"


def test_workload_not_fully_ready_is_warned_about() -> None:
    pods, ctrl = serving("llm", ["g1", "g2"])
    ctrl["Deployment/ml/llm"]["status"] = {"readyReplicas": 1}
    plan = plan_drain(ClusterState([node("g1"), node("g2"), node("g3")], pods, [], ctrl),
                      ["g1"])
    assert plan.ok
    assert any("1/2 Ready replicas now" in w for w in plan.warnings)


def test_a_finished_pod_that_is_terminating_is_waited_for_not_evicted() -> None:
    # An evicted pod whose process exited: Succeeded and terminating at once.
    done = pod("w-0", "g1", owner=("ReplicaSet", "web-rs"), phase="Succeeded")
    done["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    plan = plan_drain(ClusterState([node("g1"), node("g2")], [done],
                                   controllers=deployment("web", 1)), ["g1"])
    [p] = plan.pods
    assert (p.action, p.code) == ("wait", "terminating")
    assert plan.to_evict == ()


def test_the_plan_resolves_each_workloads_selector_once() -> None:
    nodes = [node("g1"), node("g2", gpus=2)]
    pods, ctrl = serving("llm", ["g1", "g2"], replicas=3)
    ctrl["Deployment/ml/llm"]["spec"].update(
        {"selector": {"matchLabels": {"app": "llm"}}, "minReadySeconds": 5})
    plan = plan_drain(ClusterState(nodes, pods, controllers=ctrl), ["g1"])
    [selector] = plan.selectors.values()
    assert (selector.key, selector.namespace, selector.replicas,
            selector.min_ready_seconds) == ("Deployment/ml/llm", "ml", 3, 5.0)
    assert selector.selector.matches({"app": "llm"}) and not selector.selector.matches({})
    assert plan.namespaces == ["ml"]
    assert "selectors" not in plan.to_dict()  # the JSON plan is what it was


def test_a_workload_without_a_selector_has_none_to_watch() -> None:
    nodes = [node("g1"), node("g2", gpus=2)]
    pods, ctrl = serving("llm", ["g1"])  # the factory's Deployment has no spec.selector
    assert plan_drain(ClusterState(nodes, pods, controllers=ctrl), ["g1"]).selectors == {}
