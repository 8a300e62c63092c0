"""Pure parts of the controller's shell: the Lease rule, the review answer, the shared
certificate's Secret, Events, and the facts gathered from a cache snapshot."""

from __future__ import annotations

import copy
import datetime as dt
import json
import ssl
from collections.abc import Mapping
from typing import Any

import pytest
from cryptography import x509

from drainsafe.controller.certs import make_serving_cert, service_dns_names
from drainsafe.controller.config import ControllerConfig
from drainsafe.controller.decision import (
    Allow,
    AllowReason,
    Hold,
    Release,
    ReleaseReason,
    decide,
)
from drainsafe.controller.events import event_manifest
from drainsafe.controller.leader import may_take
from drainsafe.controller.reviewer import review_response
from drainsafe.controller.serving import cert_from_secret, secret_manifest
from drainsafe.controller.view import Confirmed, fresher, gather, recreations_pending
from drainsafe.kube.errors import GUARD_HOLD_CAUSE, GuardHeld, RateLimited, error_from_response
from drainsafe.kube.objects import rollout_in_progress
from drainsafe.lab.apiserver.admission_webhook import denial

NOW = dt.datetime(2026, 12, 3, 12, 0, 0, tzinfo=dt.UTC)


def _lease(holder: str | None, renewed: dt.datetime, seconds: int = 15) -> dict[str, Any]:
    return {"spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds,
                     "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


def test_lease_is_taken_when_absent_ours_free_or_expired() -> None:
    assert may_take(None, "a", NOW)
    assert may_take(_lease("a", NOW), "a", NOW)
    assert may_take(_lease(None, NOW), "a", NOW)
    assert not may_take(_lease("b", NOW - dt.timedelta(seconds=10)), "a", NOW)
    assert may_take(_lease("b", NOW - dt.timedelta(seconds=16)), "a", NOW)


def test_review_answers() -> None:
    held = review_response("u1", Hold("wait for it", 3, "stand-in"), retry_after=0)
    assert held == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": "u1", "allowed": False, "status": {
                        "code": 429, "reason": "TooManyRequests", "message": "wait for it",
                        "details": {"causes": [{"reason": "drainsafe.io/EvictionGuardHold",
                                                "message": "wait for it"}]}}}}
    with_retry = review_response("u1", Hold("w", 3, "stand-in"), retry_after=5)
    assert with_retry["response"]["status"]["details"] == {
        "causes": [{"reason": "drainsafe.io/EvictionGuardHold", "message": "w"}],
        "retryAfterSeconds": 5}
    allowed = review_response("u2", Allow(AllowReason.CAPACITY), retry_after=5)
    assert allowed["response"] == {"uid": "u2", "allowed": True}
    released = review_response("u3", Release(ReleaseReason.NO_ROOM, "no room"), retry_after=0)
    assert released["response"]["allowed"] is True
    assert released["response"]["warnings"] == [
        "drainsafe guard released the hold: no room"]


def test_serving_cert_names_the_service_and_round_trips_through_its_secret() -> None:
    cfg = ControllerConfig()
    cert = make_serving_cert(service_dns_names(cfg.service, cfg.namespace))
    leaf = x509.load_pem_x509_certificate(cert.cert_pem)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "drainsafe-controller.drainsafe-system.svc" in names.get_values_for_type(
        x509.DNSName)
    ssl.create_default_context(cadata=cert.ca_pem.decode())  # a loadable CA
    secret = secret_manifest(cfg, cert)
    assert secret["type"] == "kubernetes.io/tls"
    assert cert_from_secret(secret) == cert
    assert cert_from_secret({"data": {"tls.crt": "eA=="}}) is None


def test_event_names_the_object() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7"}}
    event = event_manifest(pod, reason="EvictionHeld", message="m" * 2000, kind="Pod",
                           api_version="v1", event_type="Normal", now=NOW.timestamp(),
                           instance="c-0")
    assert event["involvedObject"] == {"kind": "Pod", "apiVersion": "v1", "name": "p",
                                       "namespace": "ns", "uid": "u", "resourceVersion": "7"}
    assert event["metadata"]["namespace"] == "ns" and len(event["message"]) == 1024
    assert event["firstTimestamp"] == "2026-12-03T12:00:00Z"


# ---- gather: a cache snapshot -> the decision's facts ---------------------------------

def _pod(name: str, node: str, *, ready: bool = True, terminating: bool = False,
         labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name, "namespace": "ml", "uid": f"uid-{name}",
        "labels": {"app": "llm", **(labels or {})},
        "ownerReferences": [{"kind": "ReplicaSet", "name": "llm-1", "controller": True}]}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-03T11:59:00Z"
    return {"metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True" if ready else "False",
                 "lastTransitionTime": "2026-12-03T11:00:00Z"}]}}


def _node(name: str, gpus: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110",
                                       "nvidia.com/gpu": str(gpus)}}}


DEPLOYMENT = {"metadata": {"name": "llm", "namespace": "ml", "uid": "d1"},
              "spec": {"replicas": 2}}
RS = {"metadata": {"name": "llm-1", "namespace": "ml", "uid": "r1", "ownerReferences": [
    {"kind": "Deployment", "name": "llm", "uid": "d1", "controller": True}]},
    "spec": {"replicas": 2}, "status": {"replicas": 2}}


def _gather(pods: list[dict[str, Any]], nodes: list[dict[str, Any]], *,
            namespace_labels: Mapping[str, str] | None = None, **kw: Any) -> Any:
    return gather(pods[0], statefulsets={}, namespace={"metadata": {"name": "ml",
                                                   "labels": dict(namespace_labels or {})}},
                  deployments={"ml/llm": DEPLOYMENT}, replicasets={"ml/llm-1": RS},
                  pods={f"ml/{p['metadata']['name']}": p for p in pods},
                  nodes={n["metadata"]["name"]: n for n in nodes},
                  record_of=lambda _d: None, now=NOW.timestamp(), **kw)


def test_gather_counts_available_pods_from_the_cache_and_room_elsewhere() -> None:
    pods = [_pod("a", "n0", labels={"drainsafe.io/guard": "true"}), _pod("b", "n1")]
    facts = _gather(pods, [_node("n0"), _node("n1"), _node("n2")])
    assert facts.pod.opted_in and facts.pod.owner_kind == "Deployment"
    assert facts.workload.available == 2 and facts.workload.replicas == 2
    assert facts.room is True and facts.held_for is None
    # No free GPU on another node: no room. A pod just let go is counted as gone.
    facts = _gather(pods, [_node("n0"), _node("n1")], let_go=["ml/b"])
    assert facts.room is False and facts.workload.available == 1


def test_gather_opt_in_by_namespace_and_terminating_pods_do_not_count() -> None:
    pods = [_pod("a", "n0"), _pod("b", "n1", terminating=True), _pod("c", "n2", ready=False)]
    facts = _gather(pods, [_node("n0")], namespace_labels={"drainsafe.io/guard": "true"})
    assert facts.pod.opted_in
    assert facts.workload.available == 1
    assert not _gather(pods, [_node("n0")]).pod.opted_in


STATEFULSET = {"metadata": {"name": "llm", "namespace": "ml", "uid": "s1", "generation": 2},
               "spec": {"replicas": 2},
               "status": {"observedGeneration": 2, "currentRevision": "llm-r1",
                          "updateRevision": "llm-r1", "updatedReplicas": 2}}


def _sts_pod(ordinal: int, node: str, **kw: Any) -> dict[str, Any]:
    pod = _pod(f"llm-{ordinal}", node, **kw)
    pod["metadata"]["ownerReferences"] = [
        {"kind": "StatefulSet", "name": "llm", "uid": "s1", "controller": True}]
    return pod


def test_gather_reads_a_statefulset_pod_as_its_statefulset() -> None:
    pods = [_sts_pod(0, "n0"), _sts_pod(1, "n1")]
    facts = gather(pods[0], namespace=None, deployments={}, statefulsets={"ml/llm": STATEFULSET},
                   replicasets={}, pods={f"ml/{p['metadata']['name']}": p for p in pods},
                   nodes={n: _node(n) for n in ("n0", "n1", "n2")},
                   record_of=lambda _d: None, now=NOW.timestamp())
    assert facts.pod.owner_kind == "StatefulSet" and facts.workload is not None
    assert (facts.workload.kind, facts.workload.replicas, facts.workload.available,
            facts.workload.mid_rollout) == ("StatefulSet", 2, 2, False)
    assert facts.room is True
    rolling = copy.deepcopy(STATEFULSET)
    rolling["status"]["updateRevision"] = "llm-r2"
    facts = gather(pods[0], namespace=None, deployments={}, statefulsets={"ml/llm": rolling},
                   replicasets={}, pods={f"ml/{p['metadata']['name']}": p for p in pods},
                   nodes={}, record_of=lambda _d: None, now=NOW.timestamp())
    assert facts.workload is not None and facts.workload.mid_rollout


def test_a_statefulset_restore_waits_for_every_evicted_ordinal_back_ready() -> None:
    # Surged 2 -> 3 (llm-2 stands in); llm-1 was evicted.
    stand_in = _sts_pod(2, "n2")
    assert recreations_pending(STATEFULSET, [_sts_pod(0, "n0"), stand_in], 2) == ["llm-1"]
    assert recreations_pending(STATEFULSET, [
        _sts_pod(0, "n0"), _sts_pod(1, "n1", terminating=True), stand_in], 2) == ["llm-1"]
    assert recreations_pending(STATEFULSET, [
        _sts_pod(0, "n0"), _sts_pod(1, "n3", ready=False), stand_in], 2) == ["llm-1"]
    assert recreations_pending(STATEFULSET, [
        _sts_pod(0, "n0"), _sts_pod(1, "n3"), stand_in], 2) == []


# ---- the hold's 429 through the API server's denial, as a client reads it --------------

def test_a_hold_reaches_the_client_as_guard_held_and_throttling_does_not() -> None:
    status = review_response("u", Hold("drainsafe guard: holding", 3, "stand-in"),
                             retry_after=0)["response"]["status"]
    # The lab's API server returns a denying webhook's Status as ToStatusErr does.
    body = denial("guard.drainsafe.io", status).body()
    assert body["details"]["causes"][0]["reason"] == GUARD_HOLD_CAUSE
    err = error_from_response(429, {}, json.dumps(body), method="POST", path="/eviction")
    assert isinstance(err, GuardHeld)
    assert err.hold_message == "drainsafe guard: holding"
    assert err.message == ('admission webhook "guard.drainsafe.io" denied the request: '
                           "drainsafe guard: holding")
    # API Priority and Fairness: a 429 with no Status cause stays throttling.
    throttled = error_from_response(429, {"Retry-After": "1"}, "Too many requests")
    assert isinstance(throttled, RateLimited) and not isinstance(throttled, GuardHeld)


# ---- mid-rollout: the guard asks kube.objects.rollout_in_progress, as drain does ---------

def _rs(name: str, spec: int, status: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"r-{name}",
                         "ownerReferences": [{"kind": "Deployment", "name": "llm",
                                              "uid": "d1", "controller": True}]},
            "spec": {"replicas": spec}, "status": {"replicas": status}}


TEMPLATE = {"metadata": {"labels": {"app": "llm"}},
            "spec": {"containers": [{"name": "c", "image": "llm:1"}]}}
OLD = {**TEMPLATE, "spec": {"containers": [{"name": "c", "image": "llm:0"}]}}


def _templated(replicas: int, *, generation: int, observed: int) -> dict[str, Any]:
    return {"metadata": {**DEPLOYMENT["metadata"], "generation": generation},
            "spec": {"replicas": replicas, "template": TEMPLATE},
            "status": {"observedGeneration": observed, "updatedReplicas": 3}}


def _templated_rs(name: str, replicas: int, template: dict[str, Any]) -> dict[str, Any]:
    rs = _rs(name, replicas, replicas)
    rs["spec"]["template"] = {"metadata": {"labels": {"app": "llm",
                                                      "pod-template-hash": "7c9d"}},
                              "spec": template["spec"]}
    return rs


@pytest.mark.parametrize("deployment, replicasets, mid", [
    # The old ReplicaSet is scaled to 0 and its last pod is still terminating: the
    # guard's old rule (spec or status replicas on two sets) held the eviction for a
    # rollout; the deployment controller spreads a scale only over sets with spec.replicas
    # > 0, and drain surged. Now both surge.
    ({**DEPLOYMENT, "status": {"observedGeneration": 1, "updatedReplicas": 2}},
     [_rs("llm-1", 2, 2), _rs("llm-0", 0, 1)], False),
    # A new template the controller has not observed yet: drain stood down, the guard's
    # old rule (one live ReplicaSet) surged. Now both treat it as mid-rollout.
    ({"metadata": {**DEPLOYMENT["metadata"], "generation": 2},
      "spec": {"replicas": 2}, "status": {"observedGeneration": 1, "updatedReplicas": 2}},
     [_rs("llm-1", 2, 2)], True),
    # Not every replica runs the new template yet.
    ({**DEPLOYMENT, "status": {"updatedReplicas": 1}}, [_rs("llm-1", 2, 2)], True),
    # A drain's restore (3 -> 2) the controller has not synced yet, its one ReplicaSet
    # carrying the template: a scale, not a rollout; a stand-in is of this template.
    (_templated(2, generation=3, observed=2), [_templated_rs("llm-1", 3, TEMPLATE)], False),
    # The same lag after a change of image: a rollout.
    (_templated(2, generation=3, observed=2), [_templated_rs("llm-1", 2, OLD)], True),
])
def test_the_guard_and_drain_agree_on_mid_rollout(
        deployment: dict[str, Any], replicasets: list[dict[str, Any]], mid: bool) -> None:
    pods = [_pod("a", "n0", labels={"drainsafe.io/guard": "true"}), _pod("b", "n1")]
    facts = gather(pods[0], statefulsets={}, namespace=None, deployments={"ml/llm": deployment},
                   replicasets={f"ml/{rs['metadata']['name']}": rs for rs in replicasets},
                   pods={f"ml/{p['metadata']['name']}": p for p in pods},
                   nodes={n["metadata"]["name"]: n for n in (_node("n0"), _node("n1"),
                                                             _node("n2"))},
                   record_of=lambda _d: None, now=NOW.timestamp())
    drain_says = rollout_in_progress(deployment, replicasets)  # drain.plan asks this
    assert facts.workload is not None
    assert facts.workload.mid_rollout is mid is (drain_says is not None)
    verdict = decide(facts, hold_limit=600)
    assert isinstance(verdict, Hold)
    assert verdict.waiting_for == ("rollout" if mid else "stand-in")


# ---- the view: a confirmed write is laid over the cache until the cache shows it --------

def test_a_confirmed_write_applies_until_the_cache_catches_up() -> None:
    cached = _pod("a", "n0")
    written = {"drainsafe.io/eviction-held-since": "2026-12-03T12:00:00Z"}
    returned = copy.deepcopy(cached)
    returned["metadata"]["annotations"] = dict(written)
    confirmed = Confirmed(returned, written)
    assert fresher(cached, confirmed) is returned  # the cache is older than the write
    assert fresher(returned, confirmed) is None  # the watch delivered it
    assert fresher(None, confirmed) is None  # the pod is gone
    replaced = copy.deepcopy(cached)
    replaced["metadata"]["uid"] = "uid-other"
    assert fresher(replaced, confirmed) is None  # another pod of the same name


def test_a_pod_whose_statefulset_has_a_controller_is_released_not_surged() -> None:
    """A LeaderWorkerSet's worker StatefulSet is sized by the LWS (lws v0.10.0
    pod_controller.go): scaling it up would be undone, so the guard lets the eviction go with
    its own reason, and a StatefulSet with no controller is still held for a stand-in."""
    pods = [_sts_pod(0, "n0", labels={"drainsafe.io/guard": "true"}), _sts_pod(1, "n1")]
    owned = copy.deepcopy(STATEFULSET)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "g-0",
                                             "uid": "p0", "controller": True}]
    nodes = {n: _node(n) for n in ("n0", "n1", "n2")}

    def facts(sts: dict[str, Any]) -> Any:
        return gather(pods[0], namespace=None, deployments={}, statefulsets={"ml/llm": sts},
                      replicasets={}, pods={f"ml/{p['metadata']['name']}": p for p in pods},
                      nodes=nodes, record_of=lambda _d: None, now=NOW.timestamp())

    managed = facts(owned)
    assert managed.pod.managed_by == "Pod/g-0" and managed.workload is None
    verdict = decide(managed, hold_limit=600)
    assert isinstance(verdict, Release) and verdict.reason is ReleaseReason.MANAGED
    plain = facts(STATEFULSET)
    assert plain.pod.managed_by is None and isinstance(decide(plain, hold_limit=600), Hold)
