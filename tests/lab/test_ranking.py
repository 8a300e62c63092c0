"""The ReplicaSet's scale-down ranking (ActivePodsWithRanks, getPodsToDelete at v1.31.0)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainsafe.lab.apiserver.store import rfc3339
from drainsafe.lab.controllers.ranking import (
    POD_DELETION_COST,
    RankedPod,
    deletion_cost,
    deletion_order,
    less,
    pods_to_delete,
)

NOW = 1_700_000_000.0
# A Ready, Running, assigned pod: the kind the ranking must keep longest.
SERVING = RankedPod(name="a", uid="u-a", node="n1", phase="Running", ready=True,
                    ready_since=NOW - 3600, cost=0, restarts=0, created=NOW - 7200, rank=1)


def other(**changes: Any) -> RankedPod:
    return replace(SERVING, name="b", uid="u-b", **changes)


# (why, changes to pod a, changes to pod b, a deleted before b?)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("1. unassigned before assigned", {"node": ""}, {}, True),
    ("1. ... whatever else the assigned pod has", {"node": "", "ready": True},
     {"phase": "Pending", "ready": False}, True),
    ("2. Pending before Running", {"phase": "Pending", "ready": False},
     {"ready": False}, True),
    ("2. Pending before Unknown", {"phase": "Pending"}, {"phase": "Unknown"}, True),
    ("2. Unknown before Running", {"phase": "Unknown"}, {}, True),
    ("2. a phase it does not know sorts with Pending", {"phase": ""}, {"phase": "Unknown"},
     True),
    ("3. not Ready before Ready", {"ready": False, "ready_since": None}, {}, True),
    ("3. ... even with a much higher cost", {"ready": False, "ready_since": None,
                                             "cost": 1000}, {"cost": -1000}, True),
    ("4. lower deletion cost first", {"cost": -5}, {}, True),
    ("4. cost beats related pods on the node", {"cost": -1, "rank": 1}, {"rank": 9}, True),
    ("4. cost beats a longer Ready time", {"cost": -1, "ready_since": NOW - 99_999},
     {"ready_since": NOW - 1}, True),
    ("5. more related pods on its node first", {"rank": 3}, {"rank": 2}, True),
    ("5. ... before a more recent Ready time", {"rank": 2, "ready_since": NOW - 99_999},
     {"rank": 1, "ready_since": NOW - 1}, True),
    ("6. Ready more recently first (other log2 bucket)", {"ready_since": NOW - 10},
     {"ready_since": NOW - 3600}, True),
    ("6. ... and not the other way round", {"ready_since": NOW - 3600},
     {"ready_since": NOW - 10}, False),
    ("6. same log2 bucket: pod UID decides (u-a < u-b)", {"ready_since": NOW - 3000},
     {"ready_since": NOW - 3100}, True),
    ("6. same bucket, UID decides even against fewer restarts",
     {"ready_since": NOW - 3100, "restarts": 0}, {"ready_since": NOW - 3000, "restarts": 9},
     True),
    ("7. more restarts first", {"restarts": 2}, {"restarts": 1}, True),
    ("7. restarts before creation time", {"restarts": 2, "created": NOW - 99_999},
     {"restarts": 1, "created": NOW - 1}, True),
    ("8. newer first", {"created": NOW - 5}, {"created": NOW - 86_400}, True),
    ("8. a missing creation time first", {"created": None}, {"created": NOW - 5}, True),
    ("identical pods: neither first", {"name": "b", "uid": "u-b"}, {}, False),
]


@pytest.mark.parametrize(("why", "a", "b", "expected"), CASES, ids=[c[0] for c in CASES])
def test_less_follows_active_pods_with_ranks(why: str, a: dict[str, Any], b: dict[str, Any],
                                             expected: bool) -> None:
    pod_a, pod_b = replace(SERVING, **a), other(**b)
    assert less(pod_a, pod_b, NOW) is expected, why
    if expected:
        assert less(pod_b, pod_a, NOW) is False, why


def test_without_now_times_compare_plainly() -> None:
    # Zero Now upstream: no log2 buckets, the later time first; the UID plays no part.
    a = replace(SERVING, uid="u-z", ready_since=NOW - 3000)
    b = other(ready_since=NOW - 3100)
    assert less(a, b, None) and not less(b, a, None)
    assert less(b, a, NOW)  # with buckets, the two are the same bucket and u-b < u-z


@pytest.mark.parametrize(("value", "cost"), [
    (None, 0), ("", 0), ("0", 0), ("-5", -5), ("100", 100), ("2147483647", 2147483647),
    ("-2147483648", -2147483648), ("2147483648", 0), ("+10", 0), ("008", 0), ("1_0", 0),
    (" 5", 0), ("5x", 0), ("-", 0), ("١", 0),
])
def test_deletion_cost_is_read_as_the_api_helper_does(value: str | None, cost: int) -> None:
    annotations = {} if value is None else {POD_DELETION_COST: value}
    assert deletion_cost(annotations) == cost


def pod(name: str, *, node: str = "n1", phase: str = "Running", ready: bool = True,
        ready_ago: float = 3600, created_ago: float = 7200, cost: str | None = None,
        terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}",
                            "creationTimestamp": rfc3339(NOW - created_ago)}
    if cost is not None:
        meta["annotations"] = {POD_DELETION_COST: cost}
    if terminating:
        meta["deletionTimestamp"] = rfc3339(NOW)
    conditions = [{"type": "Ready", "status": "True" if ready else "False",
                   "lastTransitionTime": rfc3339(NOW - ready_ago)}]
    return {"metadata": meta, "spec": {"nodeName": node},
            "status": {"phase": phase, "conditions": conditions}}


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_a_surge_pod_not_yet_ready_goes_before_the_old_ready_ones() -> None:
    old = [pod("old-1", node="n1", cost="-100"), pod("old-2", node="n2")]
    surge = pod("surge", node="n3", ready=False, ready_ago=1, created_ago=2)
    assert names(pods_to_delete([*old, surge], [*old, surge], 1, NOW)) == ["surge"]


def test_a_low_cost_old_pod_goes_before_a_ready_surge_pod() -> None:
    old = pod("old", node="n1", cost="-100")
    peer = pod("peer", node="n2")
    surge = pod("surge", node="n3", ready_ago=5, created_ago=30)
    assert names(pods_to_delete([old, peer, surge], [old, peer, surge], 1, NOW)) == ["old"]
    # Without the cost, the pod that became Ready most recently goes: the surge pod.
    old["metadata"].pop("annotations")
    assert names(pods_to_delete([old, peer, surge], [old, peer, surge], 1, NOW)) == ["surge"]


def test_related_pods_of_sibling_replicasets_count_on_each_node() -> None:
    # Same age, no cost: the pod sharing its node with an old ReplicaSet's pod goes first.
    mine = [pod("a", node="n1"), pod("b", node="n2")]
    sibling_on_n2 = pod("old-rs-pod", node="n2")
    order = deletion_order(mine, [*mine, sibling_on_n2], NOW)
    assert names(order) == ["b", "a"]
    # A terminating or finished related pod does not count.
    sibling_on_n2["metadata"]["deletionTimestamp"] = rfc3339(NOW)
    done = pod("done", node="n1", phase="Succeeded")
    order = deletion_order(mine, [*mine, sibling_on_n2, done], NOW)
    assert names(order) == ["a", "b"]  # equal in every rule: neither goes first


def test_all_pods_go_without_ranking() -> None:
    pods = [pod("a"), pod("b")]
    assert names(pods_to_delete(pods, pods, 2, NOW)) == ["a", "b"]
    assert names(pods_to_delete(pods, pods, 5, NOW)) == ["a", "b"]


ranked_pods = st.builds(
    RankedPod, name=st.just("p"), uid=st.sampled_from(["u1", "u2", "u3"]),
    node=st.sampled_from(["", "n1", "n2"]),
    phase=st.sampled_from(["Pending", "Unknown", "Running"]), ready=st.booleans(),
    ready_since=st.one_of(st.none(), st.sampled_from([NOW - 1, NOW - 60, NOW - 3600])),
    cost=st.integers(-2, 2), restarts=st.integers(0, 2),
    created=st.one_of(st.none(), st.sampled_from([NOW - 10, NOW - 100, NOW - 9000])),
    rank=st.integers(0, 3))


@given(ranked_pods, ranked_pods)
def test_less_is_a_strict_order(a: RankedPod, b: RankedPod) -> None:
    assert not less(a, a, NOW)
    assert not (less(a, b, NOW) and less(b, a, NOW))
