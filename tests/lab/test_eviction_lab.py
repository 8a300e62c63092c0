"""Eviction subresource semantics (eviction.go), on the store with no controllers running,
so each PDB status is exactly what the test sets."""

from __future__ import annotations

from typing import Any

import pytest

from drainsafe.lab.apiserver import admission
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.eviction import MULTIPLE_PDBS, evict
from drainsafe.lab.apiserver.store import Store

PODS = BY_KEY["pods"]
PDBS = BY_KEY["policy/poddisruptionbudgets"]


@pytest.fixture
def store() -> Store:
    s = Store()
    admission.install(s)
    s.create(BY_KEY["namespaces"], {"metadata": {"name": "default"}})
    return s


def running_pod(store: Store, name: str, *, ready: bool = True, node: str | None = "n1",
                phase: str = "Running", labels: dict | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x:1"}]}
    if node:
        spec["nodeName"] = node
    store.create(PODS, {"metadata": {"name": name, "namespace": "default",
                                     "labels": labels or {"app": "web"}}, "spec": spec})
    obj = store.get(PODS, "default", name)
    obj["status"] = {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}
    return store.update(PODS, obj, subresource="status")


def budget(store: Store, name: str = "web", *, allowed: int = 1, current: int = 3,
           desired: int = 2, observed: int = 1, policy: str | None = None,
           selector: dict | None = None) -> None:
    spec: dict[str, Any] = {"maxUnavailable": 1,
                            "selector": selector if selector is not None
                            else {"matchLabels": {"app": "web"}}}
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    store.create(PDBS, {"metadata": {"name": name, "namespace": "default"}, "spec": spec})
    obj = store.get(PDBS, "default", name)
    obj["status"] = {"disruptionsAllowed": allowed, "currentHealthy": current,
                     "desiredHealthy": desired, "expectedPods": 3,
                     "observedGeneration": observed}
    store.update(PDBS, obj, subresource="status")


def eviction(name: str, **delete_options: Any) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": "default", "creationTimestamp": None},
            "deleteOptions": delete_options}


def test_allowed_eviction_decrements_budget_marks_pod_and_deletes_gracefully(
        store: Store) -> None:
    running_pod(store, "p1")
    budget(store, allowed=1)
    code, body = evict(store, "default", "p1", eviction("p1"))
    assert (code, body["status"], body["code"]) == (201, "Success", 201)
    pdb = store.get(PDBS, "default", "web")
    assert pdb["status"]["disruptionsAllowed"] == 0
    assert "p1" in pdb["status"]["disruptedPods"]
    assert pdb["status"]["conditions"][0]["reason"] == "InsufficientPods"
    pod = store.get(PODS, "default", "p1")
    assert pod["metadata"]["deletionTimestamp"]
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    target = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"], target["message"]) == (
        "True", "EvictionByEvictionAPI", "Eviction API: evicting")


def test_exhausted_budget_is_429_with_the_disruption_budget_cause(store: Store) -> None:
    running_pod(store, "p1")
    budget(store, allowed=0, current=4, desired=4)
    with pytest.raises(st.StatusError) as err:
        evict(store, "default", "p1", eviction("p1"))
    assert err.value.retry_after == 0
    assert err.value.body() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests",
        "details": {"causes": [{"reason": "DisruptionBudget",
                                "message": "The disruption budget web needs 4 healthy pods "
                                           "and has 4 currently"}]},
        "code": 429}
    assert not store.get(PODS, "default", "p1")["metadata"].get("deletionTimestamp")


def test_unobserved_budget_is_429_still_processing_with_retry_after(store: Store) -> None:
    running_pod(store, "p1")
    budget(store, allowed=1, observed=0)
    with pytest.raises(st.StatusError) as err:
        evict(store, "default", "p1", eviction("p1"))
    assert err.value.code == 429 and err.value.retry_after == 10
    assert err.value.body()["details"]["retryAfterSeconds"] == 10
    assert err.value.body()["details"]["causes"][0]["message"] == (
        "The disruption budget web is still being processed by the server.")


def test_negative_budget_is_forbidden(store: Store) -> None:
    running_pod(store, "p1")
    budget(store, allowed=-1)
    with pytest.raises(st.StatusError) as err:
        evict(store, "default", "p1", eviction("p1"))
    assert err.value.code == 403 and "negative" in err.value.message


def test_more_than_one_budget_is_a_500_failure_result(store: Store) -> None:
    running_pod(store, "p1")
    budget(store, "a")
    budget(store, "b")
    code, body = evict(store, "default", "p1", eviction("p1"))
    assert code == 201  # the Status is the result of a create, so HTTP 201 carries it
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "message": MULTIPLE_PDBS, "code": 500}
    assert not store.get(PODS, "default", "p1")["metadata"].get("deletionTimestamp")


@pytest.mark.parametrize("phase", ["Pending", "Succeeded", "Failed"])
def test_pending_and_finished_pods_bypass_the_budget(store: Store, phase: str) -> None:
    running_pod(store, "p1", phase=phase, node=None if phase == "Pending" else "n1")
    budget(store, allowed=0)
    code, _ = evict(store, "default", "p1", eviction("p1"))
    assert code == 201
    assert store.peek(PODS, "default", "p1") is None  # nothing to wait for: gone at once
    assert store.get(PDBS, "default", "web")["status"]["disruptionsAllowed"] == 0


def test_terminating_pod_bypasses_the_budget(store: Store) -> None:
    running_pod(store, "p1")
    store.delete(PODS, "default", "p1", grace_period=60)
    budget(store, allowed=0)
    code, _ = evict(store, "default", "p1", eviction("p1", gracePeriodSeconds=10))
    assert code == 201
    assert store.get(PODS, "default", "p1")["metadata"]["deletionGracePeriodSeconds"] == 10


def test_unready_pod_with_healthy_budget_goes_without_using_it(store: Store) -> None:
    running_pod(store, "sick", ready=False)
    budget(store, allowed=0, current=2, desired=2)  # IfHealthyBudget: 2 >= 2 > 0
    code, _ = evict(store, "default", "sick", eviction("sick"))
    assert code == 201
    pdb = store.get(PDBS, "default", "web")
    assert pdb["status"]["disruptionsAllowed"] == 0 and "disruptedPods" not in pdb["status"]


def test_unready_pod_with_unhealthy_budget_is_refused_unless_always_allow(
        store: Store) -> None:
    running_pod(store, "sick", ready=False)
    budget(store, allowed=0, current=1, desired=2)
    with pytest.raises(st.StatusError) as err:
        evict(store, "default", "sick", eviction("sick"))
    assert err.value.code == 429
    store.delete(PDBS, "default", "web")
    budget(store, allowed=0, current=1, desired=2, policy="AlwaysAllow")
    assert evict(store, "default", "sick", eviction("sick"))[0] == 201


def test_preconditions_dry_run_and_bad_requests(store: Store) -> None:
    running_pod(store, "p1")
    budget(store, allowed=1)
    code, _ = evict(store, "default", "p1", eviction("p1", dryRun=["All"]))
    assert code == 201
    assert not store.get(PODS, "default", "p1")["metadata"].get("deletionTimestamp")
    assert store.get(PDBS, "default", "web")["status"]["disruptionsAllowed"] == 1
    with pytest.raises(st.StatusError) as err:
        evict(store, "default", "p1", eviction("p2"))
    assert err.value.code == 400 and "does not match" in err.value.message
    with pytest.raises(st.StatusError) as err:
        evict(store, "default", "nope", eviction("nope"))
    assert err.value.code == 404
    with pytest.raises(st.StatusError) as err:
        evict(store, "default", "p1", eviction("p1", dryRun=["Other"]), query_dry_run=True)
    assert err.value.code == 400
    with pytest.raises(st.StatusError) as err:
        evict(store, "default", "p1", eviction("p1", preconditions={"uid": "other"}))
    assert err.value.code == 409
    # As upstream: the budget is decremented before the delete checks the precondition.
    assert store.get(PDBS, "default", "web")["status"]["disruptionsAllowed"] == 0
    assert not store.get(PODS, "default", "p1")["metadata"].get("deletionTimestamp")


def test_budget_with_empty_selector_matches_nothing(store: Store) -> None:
    running_pod(store, "p1")
    budget(store, allowed=0, selector={})
    assert evict(store, "default", "p1", eviction("p1"))[0] == 201
