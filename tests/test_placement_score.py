"""placement.score and choose: kube-scheduler's default score plugins, normalised and summed
with their weights (TaintToleration 3, NodeAffinity 2, NodeResourcesFit 1,
PodTopologySpread 2, InterPodAffinity 2, NodeResourcesBalancedAllocation 1). Each expected
figure is worked out by hand from the upstream formulas quoted in placement.score."""

from __future__ import annotations

from typing import Any

from drainsafe import placement, podaffinity
from drainsafe.placement import Plugin

SOFT = {"key": "soft", "effect": "PreferNoSchedule"}
RS = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs",
       "controller": True}]


def node(name: str, *, taints: list[Any] | None = None,
         labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name,
                         "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {"taints": taints or []},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


def pod(name: str = "p", *, on: str | None = None, owner: bool = False,
        requests: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": {"app": "web"}}
    if owner:
        meta["ownerReferences"] = RS
    container = {"name": "c", "resources": {"requests": requests or {}}}
    body: dict[str, Any] = {"containers": [container], **spec}
    if on:
        body["nodeName"] = on
    return {"metadata": meta, "spec": body, "status": {"phase": "Running"}}


def loads(nodes: list[dict[str, Any]], bound: list[dict[str, Any]]
          ) -> dict[str, placement.NodeLoad]:
    return {n["metadata"]["name"]: placement.NodeLoad.of(
        [p for p in bound if p["spec"].get("nodeName") == n["metadata"]["name"]])
        for n in nodes}


def test_intolerable_prefer_no_schedule_taints_are_counted_and_reversed() -> None:
    nodes = [node("n0"), node("n1", taints=[SOFT]),
             node("n2", taints=[SOFT, {"key": "other", "effect": "PreferNoSchedule"}])]
    scores = placement.score(nodes, pod(), loads=loads(nodes, []))
    # 100 - 100 * count / max; an empty node with a 100m/200Mi (non-zero default) pod:
    # cpu (8000 - 100) * 100 // 8000 = 98, memory (32768 - 200) Mi * 100 // 32768 Mi = 99
    assert scores["n1"].plugins == {Plugin.TAINT_TOLERATION: 50, Plugin.NODE_AFFINITY: 0,
                                    Plugin.NODE_RESOURCES_FIT: (98 + 99) // 2}
    assert [scores[n].plugins[Plugin.TAINT_TOLERATION] for n in ("n0", "n1", "n2")] == [
        100, 50, 0]
    assert scores["n0"].total == 3 * 100 + 98


def test_the_taint_is_weighed_with_the_other_scores_not_ranked_above_them() -> None:
    """A pod of a ReplicaSet with 4 replicas on n2 already: the taint steers it off n1,
    but a strong preferred node affinity for n1 outweighs the taint."""
    nodes = [node("n1", taints=[SOFT], labels={"pool": "a"}), node("n2")]
    bound = [pod(f"old{i}", on="n2", owner=True) for i in range(4)]
    held = loads(nodes, bound)
    plain = placement.score(nodes, pod(owner=True), loads=held)
    # PodTopologySpread: hostname weight ln(2 + 2); n1 0 * w + 2 = 2, n2 4 * w + 2 = 7.5
    # -> 8; then 100 * (8 + 2 - s) // 8: n1 100, n2 25.
    assert plain["n1"].plugins[Plugin.POD_TOPOLOGY_SPREAD] == 100
    assert plain["n2"].plugins[Plugin.POD_TOPOLOGY_SPREAD] == 25
    # NodeResourcesFit: n2 holds 5 x 100m and 5 x 200Mi with this pod: (93 + 96) // 2
    assert (plain["n1"].plugins[Plugin.NODE_RESOURCES_FIT],
            plain["n2"].plugins[Plugin.NODE_RESOURCES_FIT]) == (98, 94)
    assert (plain["n1"].total, plain["n2"].total) == (98 + 2 * 100, 3 * 100 + 94 + 2 * 25)
    assert placement.choose(nodes, pod(owner=True), loads=held)[0] == "n2"
    liking = pod(owner=True, affinity={"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [
                {"key": "pool", "operator": "In", "values": ["a"]}]}}]}})
    liked = placement.score(nodes, liking, loads=held)
    assert liked["n1"].total == 2 * 100 + 98 + 2 * 100 > liked["n2"].total == 444
    assert placement.choose(nodes, liking, loads=held)[0] == "n1"


def test_the_only_feasible_node_is_chosen_whatever_its_score() -> None:
    nodes = [node("n1", taints=[SOFT]),
             node("n2", taints=[{"key": "hard", "effect": "NoSchedule"}])]
    assert placement.choose(nodes, pod(), loads=loads(nodes, []))[0] == "n1"


def test_balanced_allocation_reads_actual_requests_and_skips_a_best_effort_pod() -> None:
    nodes = [node("n1")]
    asks = pod(requests={"cpu": "2"})
    [s] = placement.score(nodes, asks, loads=loads(nodes, [])).values()
    # fractions cpu 2/8, memory 0 (no request: BalancedAllocation counts none):
    # 100 * (1 - |0.25 - 0| / 2) = 87; NodeResourcesFit counts the missing memory request
    # as 200Mi: (75 + 99) // 2 = 87
    assert s.plugins[Plugin.NODE_RESOURCES_BALANCED_ALLOCATION] == 87
    assert s.plugins[Plugin.NODE_RESOURCES_FIT] == 87
    [best_effort] = placement.score(nodes, pod(), loads=loads(nodes, [])).values()
    assert Plugin.NODE_RESOURCES_BALANCED_ALLOCATION not in best_effort.plugins


def test_preferred_pod_anti_affinity_scores_nodes_with_matching_pods_lower() -> None:
    nodes = [node("n1"), node("n2")]
    bound = [pod("web-a", on="n1")]
    apart = pod(affinity={"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"app": "web"}},
                "topologyKey": "kubernetes.io/hostname"}}]}})
    state = podaffinity.prefilter(apart, podaffinity.bound_pods(bound, nodes))
    assert state.preferred == {("kubernetes.io/hostname", "n1"): -100}
    scores = placement.score(nodes, apart, loads=loads(nodes, bound), pod_affinity=state)
    assert (scores["n1"].plugins[Plugin.INTER_POD_AFFINITY],
            scores["n2"].plugins[Plugin.INTER_POD_AFFINITY]) == (0, 100)
    # an existing pod's required affinity draws a pod it selects (hardPodAffinityWeight 1)
    drawing = pod("web-b", on="n2", affinity={"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "web"}},
            "topologyKey": "kubernetes.io/hostname"}]}})
    state = podaffinity.prefilter(pod(), podaffinity.bound_pods([drawing], nodes))
    assert state.preferred == {("kubernetes.io/hostname", "n2"): 1}


def test_default_spreading_counts_zones_across_nodes_and_skips_terminating_pods() -> None:
    nodes = [node("a1", labels={"topology.kubernetes.io/zone": "a"}),
             node("a2", labels={"topology.kubernetes.io/zone": "a"}),
             node("b1", labels={"topology.kubernetes.io/zone": "b"})]
    gone = pod("gone", on="b1", owner=True)
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    bound = [pod("x", on="a1", owner=True), gone]
    scores = placement.score(nodes, pod(owner=True), loads=loads(nodes, bound))
    # hostname w = ln(5), zone w = ln(4): a1 1*ln5 + 2 + 1*ln4 + 4 = 9.0 -> 9;
    # a2 0 + 2 + 1*ln4 + 4 = 7.4 -> 7; b1 2 + 4 = 6 (the terminating pod not counted);
    # 100 * (9 + 6 - s) // 9
    assert [scores[n].plugins[Plugin.POD_TOPOLOGY_SPREAD] for n in ("a1", "a2", "b1")] == [
        66, 88, 100]
