"""kube/objects.py: the one home of Kubernetes object semantics, against the upstream rules
its docstring cites."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainsafe import budget
from drainsafe.kube.objects import (
    DEFAULT_GRACE_SECONDS,
    WorkloadRef,
    autoscaler_for,
    available_since,
    grace_seconds,
    is_available,
    is_node_ready,
    is_ready,
    key_of,
    parse_time,
    rfc3339,
    rfc3339_micro,
    rollout_in_progress,
    same_pod_template,
    scale_not_carried_out,
)

T0 = 1_800_000_000.0  # a whole second, 2027-01-15


def ready_pod(status: str = "True", since: float | None = T0) -> dict[str, Any]:
    cond: dict[str, Any] = {"type": "Ready", "status": status}
    if since is not None:
        cond["lastTransitionTime"] = rfc3339(since)
    return {"metadata": {"name": "p", "namespace": "ns"},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True"}, cond]}}


# -- WorkloadRef ------------------------------------------------------------------------

def test_workload_ref_reads_and_writes_kind_namespace_name() -> None:
    ref = WorkloadRef("Deployment", "ml", "llm")
    assert str(ref) == "Deployment/ml/llm"
    assert WorkloadRef.parse("Deployment/ml/llm") == ref
    assert (ref.kind, ref.namespace, ref.name) == ("Deployment", "ml", "llm")


def test_workload_ref_of_an_object() -> None:
    obj = {"kind": "StatefulSet", "metadata": {"namespace": "db", "name": "pg"}}
    assert WorkloadRef.of(obj) == WorkloadRef("StatefulSet", "db", "pg")


@pytest.mark.parametrize("text", ["", "Deployment/llm", "Deployment/ml/llm/x", "/ml/llm",
                                  "Deployment//llm", "Deployment/ml/", "ml/llm"])
def test_workload_ref_refuses_what_is_not_kind_namespace_name(text: str) -> None:
    with pytest.raises(ValueError, match="Kind/namespace/name") as err:
        WorkloadRef.parse(text)
    assert repr(text) in str(err.value)


_PART = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)),
                min_size=1, max_size=20)


@given(_PART, _PART, _PART)
def test_workload_ref_round_trips(kind: str, namespace: str, name: str) -> None:
    ref = WorkloadRef(kind, namespace, name)
    assert WorkloadRef.parse(str(ref)) == ref


# -- Ready ------------------------------------------------------------------------------

@pytest.mark.parametrize(("node", "ready"), [
    ({}, False),
    ({"status": {}}, False),
    ({"status": {"conditions": []}}, False),  # no Ready condition: not Ready (IsNodeReady)
    ({"status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}}, False),
    ({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}, False),
    ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, False),
    ({"status": {"conditions": [{"type": "Ready"}]}}, False),
    ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, True),
])
def test_node_ready_is_the_ready_condition_true(node: dict[str, Any], ready: bool) -> None:
    assert is_node_ready(node) is ready


def test_pod_ready_is_the_ready_condition_true() -> None:
    assert is_ready(ready_pod())
    assert not is_ready(ready_pod("False"))
    assert not is_ready({"status": {"conditions": [{"type": "ContainersReady",
                                                    "status": "True"}]}})
    assert not is_ready({})


# -- Available (IsPodAvailable) -----------------------------------------------------------

def test_available_at_once_without_min_ready_seconds() -> None:
    assert is_available(ready_pod(), 0, T0)
    assert is_available(ready_pod(since=None), 0, T0)  # no lastTransitionTime needed
    assert not is_available(ready_pod("False"), 0, T0 + 100)


def test_available_strictly_after_min_ready_seconds() -> None:
    pod = ready_pod(since=T0)
    assert available_since(pod, 10) == T0 + 10
    assert not is_available(pod, 10, T0 + 9.999)
    assert not is_available(pod, 10, T0 + 10)  # Before(now) is strict
    assert is_available(pod, 10, T0 + 10.001)


def test_not_available_without_last_transition_time() -> None:
    """Upstream: minReadySeconds > 0 needs a set lastTransitionTime. The lab's ReplicaSet
    once counted such a pod as Ready since 1970, so available."""
    pod = ready_pod(since=None)
    assert available_since(pod, 5) is None
    assert not is_available(pod, 5, T0)


@given(st.integers(1, 3600), st.floats(-7200, 7200, allow_nan=False))
def test_available_is_ready_for_min_ready_seconds(min_ready: int, offset: float) -> None:
    now = T0 + offset
    assert is_available(ready_pod(since=T0), min_ready, now) is (T0 + min_ready < now)
    assert not is_available(ready_pod("False", since=T0), min_ready, now)


# -- scale_not_carried_out ---------------------------------------------------------------

def scaled(*, generation: int = 4, observed: int | None = 4, replicas: int = 1,
           pods: int | None = 1) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if observed is not None:
        status["observedGeneration"] = observed
    if pods is not None:
        status["replicas"] = pods
    return {"kind": "Deployment", "metadata": {"generation": generation},
            "spec": {"replicas": replicas}, "status": status}


@pytest.mark.parametrize(("dep", "why"), [
    (scaled(), None),
    (scaled(replicas=0, pods=None), None),  # the API omits a zero count
    # The restore written, not yet seen: the ReplicaSet may still replace evicted pods.
    (scaled(observed=3, pods=2), "observedGeneration 3 is behind generation 4"),
    (scaled(observed=None, pods=None), "observedGeneration 0 is behind generation 4"),
    # Seen, but a surplus pod the ReplicaSet made before is not yet removed.
    (scaled(pods=2), "2 pods for 1 replicas"),
    (scaled(replicas=2, pods=1), "1 pods for 2 replicas"),
])
def test_a_scale_is_carried_out_once_seen_and_counted(dep: dict[str, Any],
                                                      why: str | None) -> None:
    assert scale_not_carried_out(dep) == why


# -- rollout_in_progress ------------------------------------------------------------------

def deployment(*, generation: int = 3, observed: int = 3, replicas: int = 2,
               updated: int | None = 2, reason: str | None = "NewReplicaSetAvailable"
               ) -> dict[str, Any]:
    status: dict[str, Any] = {"observedGeneration": observed}
    if updated is not None:
        status["updatedReplicas"] = updated
    if reason is not None:
        status["conditions"] = [{"type": "Available", "status": "True"},
                                {"type": "Progressing", "status": "True", "reason": reason}]
    return {"kind": "Deployment", "metadata": {"generation": generation},
            "spec": {"replicas": replicas}, "status": status}


def rs(replicas: int) -> dict[str, Any]:
    return {"kind": "ReplicaSet", "spec": {"replicas": replicas}}


def test_a_complete_rollout_is_not_in_progress() -> None:
    assert rollout_in_progress(deployment(), [rs(2), rs(0)]) is None
    assert rollout_in_progress(deployment(reason=None), [rs(2)]) is None  # no condition yet


@pytest.mark.parametrize(("dep", "sets", "why"), [
    (deployment(generation=4, observed=3), [rs(2)],
     "observedGeneration 3 is behind generation 4"),
    (deployment(reason="ReplicaSetUpdated"), [rs(2)], "Progressing: ReplicaSetUpdated"),
    (deployment(reason="ProgressDeadlineExceeded"), [rs(2)],
     "Progressing: ProgressDeadlineExceeded"),
    (deployment(), [rs(1), rs(1)], "2 ReplicaSets have replicas"),
    (deployment(updated=1), [rs(2)], "1/2 replicas updated"),
])
def test_mid_rollout_says_why(dep: dict[str, Any], sets: list[dict[str, Any]],
                              why: str) -> None:
    assert rollout_in_progress(dep, sets) == why


def test_generation_is_checked_first() -> None:
    dep = deployment(generation=5, observed=4, updated=0, reason="ReplicaSetUpdated")
    assert rollout_in_progress(dep, [rs(1), rs(1)]) == (
        "observedGeneration 4 is behind generation 5")


# A scale is not a rollout (sync.go isScalingEvent/scale; FindNewReplicaSet, EqualIgnoreHash)

def template(image: str = "llm:1", **labels: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "llm", **labels}},
            "spec": {"containers": [{"name": "c", "image": image}]}}


def carrying(replicas: int, image: str = "llm:1", hash_: str = "5d8f7c9b6"
             ) -> dict[str, Any]:
    """A ReplicaSet as the deployment controller writes it: the template plus its hash."""
    return {"kind": "ReplicaSet", "spec": {"replicas": replicas, "template": template(
        image, **{"pod-template-hash": hash_})}}


def scaled(dep: dict[str, Any]) -> dict[str, Any]:
    return {**dep, "spec": {**dep["spec"], "template": template()}}


labels = st.dictionaries(st.text("abc/.-", min_size=1, max_size=6),
                         st.text("xyz", max_size=3), max_size=3)


@given(labels, st.text("0123456789abcdef", min_size=1, max_size=10))
def test_the_template_hash_label_alone_makes_no_other_template(extra: dict[str, str],
                                                               hash_: str) -> None:
    plain = {"metadata": {"labels": extra}, "spec": {"containers": [{"image": "a"}]}}
    hashed = {"metadata": {"labels": {**extra, "pod-template-hash": hash_}},
              "spec": plain["spec"]}
    assert same_pod_template(hashed, plain) and same_pod_template(plain, hashed)
    other = {**hashed, "spec": {"containers": [{"image": "b"}]}}
    assert not same_pod_template(other, plain)
    relabelled = {**plain, "metadata": {"labels": {**extra, "pod-template-hash": hash_,
                                                   "tier": "x"}}}
    assert not same_pod_template(relabelled, plain)


@given(generation=st.integers(1, 50), behind=st.integers(0, 5), replicas=st.integers(1, 9),
       rs_replicas=st.integers(1, 12), updated=st.integers(0, 12),
       reason=st.sampled_from(["NewReplicaSetAvailable", None]))
def test_a_scale_of_the_one_new_replicaset_is_never_a_rollout(
        generation: int, behind: int, replicas: int, rs_replicas: int, updated: int,
        reason: str | None) -> None:
    # Any scale the controller has not caught up with yet (a surge, its restore, an HPA):
    # generation ahead, the ReplicaSet not yet resized, its pods not yet all created.
    dep = scaled(deployment(generation=generation, observed=max(generation - behind, 0),
                            replicas=replicas, updated=updated, reason=reason))
    assert rollout_in_progress(dep, [carrying(rs_replicas), carrying(0, "llm:0")]) is None


@given(generation=st.integers(2, 50), behind=st.integers(1, 5), replicas=st.integers(1, 9))
def test_a_template_not_yet_carried_is_a_rollout(generation: int, behind: int,
                                                 replicas: int) -> None:
    dep = scaled(deployment(generation=generation, observed=max(generation - behind, 0),
                            replicas=replicas, updated=replicas))
    observed = max(generation - behind, 0)
    why = f"observedGeneration {observed} is behind generation {generation}"
    assert rollout_in_progress(dep, [carrying(replicas, "llm:0")]) == why
    # Its new ReplicaSet created beside the old one, or the old one gone and none live yet.
    assert rollout_in_progress(dep, [carrying(replicas, "llm:0"), carrying(1)]) == why
    assert rollout_in_progress(dep, [carrying(0, "llm:0")]) == why


def test_a_scale_mid_rollout_is_still_a_rollout() -> None:
    # Two live ReplicaSets: a scale now is spread over both (proportional scaling).
    dep = scaled(deployment(replicas=3, updated=1, reason="ReplicaSetUpdated"))
    assert rollout_in_progress(dep, [carrying(1), carrying(2, "llm:0")]) == (
        "Progressing: ReplicaSetUpdated")
    done = scaled(deployment(replicas=3, updated=3))
    assert rollout_in_progress(done, [carrying(2), carrying(1, "llm:0")]) == (
        "2 ReplicaSets have replicas")
    # The new ReplicaSet alone but still becoming available: the rollout is not over.
    assert rollout_in_progress(scaled(deployment(reason="ReplicaSetUpdated")),
                               [carrying(2)]) == "Progressing: ReplicaSetUpdated"


def test_without_a_template_to_compare_a_lag_is_a_rollout() -> None:
    # What cannot be told apart is taken for a rollout, as before.
    behind = deployment(generation=4, observed=3)
    assert rollout_in_progress(behind, [carrying(2)]) == (
        "observedGeneration 3 is behind generation 4")
    assert rollout_in_progress(scaled(behind), [rs(2)]) == (
        "observedGeneration 3 is behind generation 4")


# -- autoscaler_for -----------------------------------------------------------------------

def hpa(name: str, ns: str, kind: str, target: str) -> dict[str, Any]:
    return {"kind": "HorizontalPodAutoscaler", "metadata": {"name": name, "namespace": ns},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind,
                                        "name": target}}}


def test_the_autoscaler_names_kind_and_name_in_the_namespace() -> None:
    mine = hpa("llm-hpa", "ml", "Deployment", "llm")
    others = [hpa("a", "other", "Deployment", "llm"), hpa("b", "ml", "StatefulSet", "llm"),
              hpa("c", "ml", "Deployment", "web"), {"metadata": {"namespace": "ml"}}]
    assert autoscaler_for(WorkloadRef("Deployment", "ml", "llm"), [*others, mine]) is mine
    assert autoscaler_for(WorkloadRef("Deployment", "ml", "llm"), others) is None
    assert autoscaler_for(WorkloadRef("Deployment", "ml", "llm"), []) is None


# -- keys, grace, times -------------------------------------------------------------------

def test_object_keys_as_meta_namespace_key_func() -> None:
    assert key_of({"metadata": {"namespace": "ml", "name": "llm-0"}}) == "ml/llm-0"
    assert key_of({"metadata": {"name": "node-1"}}) == "node-1"  # cluster-scoped


def test_grace_default() -> None:
    assert DEFAULT_GRACE_SECONDS == 30
    assert grace_seconds({"spec": {}}) == DEFAULT_GRACE_SECONDS
    assert grace_seconds({"spec": {"terminationGracePeriodSeconds": 0}}) == 0
    assert float(DEFAULT_GRACE_SECONDS) == budget.DEFAULT_GRACE_SECONDS


def test_time_formats() -> None:
    assert rfc3339(T0 + 0.999) == "2027-01-15T08:00:00Z"  # truncated, as metav1.Time
    assert rfc3339_micro(T0 + 0.25) == "2027-01-15T08:00:00.250000Z"
    assert parse_time("2027-01-15T08:00:00Z") == T0
    assert parse_time("2027-01-15T08:00:00.250000Z") == T0 + 0.25
    assert parse_time("2027-01-15T09:00:00+01:00") == T0
    for bad in (None, "", "yesterday", 5):
        assert parse_time(bad) is None


@given(st.floats(0, 4_000_000_000, allow_nan=False))
def test_times_round_trip(ts: float) -> None:
    assert parse_time(rfc3339(ts)) == math.floor(ts)
    back = parse_time(rfc3339_micro(ts))
    # truncated to the microsecond, up to a float's rounding of ts * 1e6
    assert back is not None and abs(ts - back) < 1e-6
