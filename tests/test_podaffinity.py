"""Required inter-pod (anti-)affinity as kube-scheduler's InterPodAffinity filter decides it
(drainsafe.podaffinity, used by drainsafe.placement and the lab's scheduler). Pure."""

from __future__ import annotations

from typing import Any

from drainsafe import placement, podaffinity

Obj = dict[str, Any]
KEY = "leaderworkerset.sigs.k8s.io/group-key"


def node(name: str, rack: str | None) -> Obj:
    labels = {"kubernetes.io/hostname": name}
    if rack is not None:
        labels["rack"] = rack
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "1", "pods": "110"}}}


def exclusive(key: str) -> Obj:
    """The terms lws's pod webhook gives an exclusive-topology leader (SetExclusiveAffinities)."""
    return {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchExpressions": [
                {"key": KEY, "operator": "In", "values": [key]}]}, "topologyKey": "rack"}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchExpressions": [
                {"key": KEY, "operator": "Exists"},
                {"key": KEY, "operator": "NotIn", "values": [key]}]}, "topologyKey": "rack"}]},
    }


def pod(name: str, key: str | None, *, on: str | None = None, ns: str = "ml",
        affinity: Obj | None = None, labels: Obj | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "resources": {
        "requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}
    if on:
        spec["nodeName"] = on
    if affinity:
        spec["affinity"] = affinity
    all_labels = {**({KEY: key} if key else {}), **(labels or {})}
    return {"metadata": {"name": name, "namespace": ns, "labels": all_labels}, "spec": spec,
            "status": {"phase": "Running"}}


NODES = [node("a-1", "a"), node("a-2", "a"), node("b-1", "b"), node("b-2", "b"),
         node("x-1", None)]


def choose(p: Obj, pods: list[Obj]) -> tuple[str | None, dict[str, placement.Fit]]:
    state = podaffinity.prefilter(p, podaffinity.bound_pods(pods, NODES))
    by_node: dict[str, list[Obj]] = {}
    for q in pods:
        by_node.setdefault(q["spec"]["nodeName"], []).append(q)
    return placement.choose(NODES, p, by_node, pod_affinity=state)


def test_the_first_leader_of_a_group_schedules_on_its_own_terms() -> None:
    # Nothing matches its affinity anywhere, and it matches its own terms: it may go to
    # any node carrying the topology key, never to one without it.
    leader = pod("g0", "k0", affinity=exclusive("k0"))
    choice, verdicts = choose(leader, [])
    assert choice == "a-1"
    assert verdicts["x-1"].reasons == (podaffinity.AFFINITY_RULES,)


def test_a_group_stays_in_its_domain_and_another_group_is_kept_out() -> None:
    placed = [pod("g0", "k0", on="a-1", affinity=exclusive("k0")),
              pod("g0-1", "k0", on="a-2")]
    # The second group's leader: rack a holds another group's pods (anti-affinity).
    choice, verdicts = choose(pod("g1", "k1", affinity=exclusive("k1")), placed)
    assert choice == "b-1"
    assert verdicts["a-1"].why[0].code == "pod-affinity"
    assert podaffinity.ANTI_AFFINITY_RULES in verdicts["a-1"].reasons
    # A pod matching g0's affinity must go where g0's pods are (rack a), which is full.
    follower = pod("f", None, affinity={"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {KEY: "k0"}}, "topologyKey": "rack"}]}})
    choice, verdicts = choose(follower, placed)
    assert choice is None
    assert verdicts["b-1"].reasons == (podaffinity.AFFINITY_RULES,)
    assert "Insufficient nvidia.com/gpu" in verdicts["a-1"].reasons


def test_existing_pods_anti_affinity_is_honoured() -> None:
    # g0's leader forbids any other group's pod in rack a: a plain pod carrying a group key
    # is kept out of rack a by the EXISTING pod's term, though it has no terms itself.
    placed = [pod("g0", "k0", on="a-1", affinity=exclusive("k0"))]
    choice, verdicts = choose(pod("stray", "k9"), placed)
    assert verdicts["a-2"].reasons == (podaffinity.EXISTING_ANTI_AFFINITY,)
    assert choice == "b-1"
    # A pod without the group-key label is not selected by the term: rack a is fine.
    _, verdicts = choose(pod("plain", None), placed)
    assert verdicts["a-2"].fits


def test_terms_default_to_the_pods_namespace() -> None:
    placed = [pod("g0", "k0", on="a-1", ns="other")]
    # Anti-affinity to any group pod, but only in its own namespace "ml": other's is unseen.
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": KEY, "operator": "Exists"}]},
         "topologyKey": "rack"}]}}
    _, verdicts = choose(pod("p", None, affinity=anti), placed)
    assert verdicts["a-2"].fits
    # namespaceSelector {} means every namespace.
    anti["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "namespaceSelector"] = {}
    _, verdicts = choose(pod("p", None, affinity=anti), placed)
    assert not verdicts["a-2"].fits and verdicts["b-1"].fits


def test_the_unschedulable_message_reads_as_the_schedulers() -> None:
    placed = [pod("g0", "k0", on="a-1", affinity=exclusive("k0")), pod("g0-1", "k0", on="a-2"),
              pod("g1", "k1", on="b-1", affinity=exclusive("k1")), pod("g1-1", "k1", on="b-2")]
    _, verdicts = choose(pod("g2", "k2", affinity=exclusive("k2")), placed)
    text = placement.failure_message(len(NODES), verdicts.values())
    assert text.startswith("0/5 nodes are available: ")
    assert "1 node(s) didn't match pod affinity rules" in text  # x-1: no rack label
    assert "4 node(s) didn't match pod anti-affinity rules" in text
