"""Property tests: whatever the cluster looks like, the plan keeps its promises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from drainsafe.drain.plan import ClusterState, plan_drain
from drainsafe.pdb import PdbSpec, best_case_disruptions

from .factory import deployment, node, pdb, pod


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterState, int]:
    n_nodes = draw(st.integers(1, 4))
    nodes = [node(f"g{i}", gpus=draw(st.integers(0, 3)),
                  unschedulable=draw(st.booleans()) if i else False)
             for i in range(n_nodes)]
    pods = []
    controllers: dict[str, dict] = {}
    budgets = []
    for w in range(draw(st.integers(0, 3))):
        replicas = draw(st.integers(1, 4))
        gpus = draw(st.integers(0, 2))
        controllers.update(deployment(f"w{w}", replicas))
        for r in range(replicas):
            pods.append(pod(f"w{w}-{r}", f"g{draw(st.integers(0, n_nodes - 1))}",
                            owner=("ReplicaSet", f"w{w}-rs"), labels={"app": f"w{w}"},
                            gpus=gpus, grace=draw(st.integers(0, 200))))
        for b in range(draw(st.integers(0, 2))):
            kind = draw(st.sampled_from(["min", "max"]))
            value = draw(st.integers(0, 5) | st.sampled_from(["0%", "50%", "100%"]))
            budgets.append(pdb(f"w{w}-{b}", {"app": f"w{w}"},
                               **({"min_available": value} if kind == "min"
                                  else {"max_unavailable": value})))
    extras = draw(st.lists(st.sampled_from(["ds", "mirror", "naked", "done"]), max_size=3))
    for i, kind in enumerate(extras):
        if kind == "ds":
            pods.append(pod(f"ds-{i}", "g0", owner=("DaemonSet", "plugin")))
        elif kind == "mirror":
            pods.append(pod(f"m-{i}", "g0", mirror=True))
        elif kind == "naked":
            pods.append(pod(f"n-{i}", "g0"))
        else:
            pods.append(pod(f"d-{i}", "g0", owner=("Job", "j"), phase="Failed"))
    return ClusterState(nodes, pods, budgets, controllers), n_nodes


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_plan_invariants(case: tuple[ClusterState, int]) -> None:
    state, _ = case
    plan = plan_drain(state, ["g0"])
    on_node = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in state.pods
               if p["spec"]["nodeName"] == "g0"}
    # Every pod on the node gets exactly one verdict; nothing else is touched.
    assert {p.key for p in plan.pods} == on_node
    for p in plan.pods:
        # DaemonSet and mirror pods are never evicted.
        if "DaemonSet" in p.reason or "mirror" in p.reason:
            assert p.action == "skip"
    # Each evictable pod is in exactly one queue; a queue holds one workload only.
    queued = [k for q in plan.queues for k in q.pods]
    assert sorted(queued) == sorted(p.key for p in plan.to_evict)
    for q in plan.queues:
        assert {plan.pod(k).workload for k in q.pods} == {q.workload}
    # A plan without blockers has room for every replacement, on a node not drained, and
    # every budget involved can allow at least one disruption.
    if plan.ok:
        for p in plan.to_evict:
            if p.needs_replacement:
                assert p.replacement_on not in (None, "g0")
        for b in plan.budgets:
            # At the scale the drain runs at: the workload's, plus its surge when surged.
            assert best_case_disruptions(PdbSpec.from_manifest(dict(b.spec)),
                                         b.replicas + b.surge) > 0
            assert len(b.pods_on_node) >= 1
        # A surge is exactly the workload's pods on the node, and only for Deployments.
        for w in plan.workload_plans:
            assert w.surge == (len(w.pods) if w.strategy == "surge" else 0)
            assert w.strategy == "evict" or w.workload.startswith("Deployment/")
        assert all(len(p.pdbs) <= 1 for p in plan.pods)
    # Unmanaged pods always block: drainsafe has no --force.
    if any(p.reason.startswith("not managed") for p in plan.pods):
        assert not plan.ok


@settings(max_examples=100, deadline=None)
@given(clusters())
def test_placement_never_overcommits_gpus(case: tuple[ClusterState, int]) -> None:
    state, _ = case
    plan = plan_drain(state, ["g0"])
    used: dict[str, int] = {}
    for p in state.pods:
        if p["spec"]["nodeName"] != "g0":
            gpus = int(p["spec"]["containers"][0]["resources"].get("requests", {})
                       .get("nvidia.com/gpu", 0))
            used[p["spec"]["nodeName"]] = used.get(p["spec"]["nodeName"], 0) + gpus
    for p in plan.pods:
        if p.replacement_on:
            used[p.replacement_on] = used.get(p.replacement_on, 0) + int(
                p.gpus.get("nvidia.com/gpu", "0"))
    free = {n["metadata"]["name"]: int(n["status"]["allocatable"]["nvidia.com/gpu"])
            for n in state.nodes}
    for name, count in used.items():
        # Pre-existing overcommit is possible in generated data; only new placements count.
        placed = sum(int(p.gpus.get("nvidia.com/gpu", "0")) for p in plan.pods
                     if p.replacement_on == name)
        if placed:
            assert count <= free[name]
