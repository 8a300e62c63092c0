"""The eviction outcome table: an API response (as the server sends it) to a typed code.

`error_from_response` turns the response into a typed error once, at the boundary; the
drain's behaviour then follows `classify`'s code only. Each row is a response the eviction
subresource or the API server's filters really send (pkg/registry/core/pod/storage/
eviction.go; apiserver pkg/server/filters/priority-and-fairness.go).
"""

from __future__ import annotations

import json
import random

import pytest

from drainsafe.drain.evict import RETRY_CODES, STOP_CODES, RetryQueue, classify, guard
from drainsafe.kube.errors import (
    GUARD_HOLD_CAUSE,
    KubeError,
    TransportError,
    error_from_response,
)
from drainsafe.kube.retry import Backoff


def status(code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None,
           ) -> bytes:
    doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
           "reason": reason, "message": message}
    if causes is not None:
        doc["details"] = {"causes": causes}
    return json.dumps(doc).encode()


JSON = {"content-type": "application/json"}
ROWS = [
    ("budget 429", 429, JSON, status(429, "TooManyRequests", "Cannot evict pod as it would "
     "violate the pod's disruption budget.", [{"reason": "DisruptionBudget", "message":
                                              "The disruption budget llm needs 2 healthy"}]),
     "budget"),
    # drainsafe's eviction guard holds the eviction until its stand-in is Ready: the
    # webhook's Status passes through the API server with its cause (apiserver
    # pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr).
    ("guard hold 429", 429, {**JSON, "retry-after": "2"},
     status(429, "TooManyRequests", 'admission webhook "evictions.drainsafe.io" denied the '
            "request: held until a stand-in of ml/llm is Ready",
            [{"reason": GUARD_HOLD_CAUSE, "message": "held until a stand-in is Ready"}]),
     "guard-held"),
    ("APF 429, plain text", 429, {"content-type": "text/plain", "retry-after": "1"},
     b"Too many requests, please try again later.\n", "rate-limited"),
    ("gone", 404, JSON, status(404, "NotFound", 'pods "llm-1" not found'), "gone"),
    ("UID precondition", 409, JSON, status(409, "Conflict", "Precondition failed: UID in "
                                           "precondition: a, UID in object meta: b"), "gone"),
    ("several PDBs", 500, JSON, status(500, "InternalError", "This pod has more than one "
                                       "PodDisruptionBudget, which the eviction subresource "
                                       "does not support."), "multiple-pdbs"),
    ("RBAC", 403, JSON, status(403, "Forbidden", 'pods "x" is forbidden: User "u" cannot '
                               'create resource "pods/eviction"'), "forbidden"),
    ("namespace terminating", 403, JSON, status(403, "Forbidden", "unable to create new "
     "content in namespace ml because it is being terminated",
     [{"reason": "NamespaceTerminating", "message": "namespace ml is being terminated"}]),
     "namespace-terminating"),
    ("etcd timeout", 500, JSON, status(500, "InternalError", "etcdserver: request timed out"),
     "unknown"),
    ("gateway", 503, {}, b"upstream connect error", "unknown"),
    ("server timeout", 504, JSON, status(504, "Timeout", "the server was unable to return a "
                                         "response in the time allotted"), "unknown"),
    ("bad request", 400, JSON, status(400, "BadRequest", "invalid eviction"), "failed"),
]


@pytest.mark.parametrize(("what", "code", "headers", "body", "expected"), ROWS,
                         ids=[r[0] for r in ROWS])
def test_classify(what: str, code: int, headers: dict[str, str], body: bytes,
                  expected: str) -> None:
    error = error_from_response(code, headers, body, method="POST",
                                path="/api/v1/namespaces/ml/pods/llm-1/eviction")
    assert error is not None, what
    assert classify(error) == expected


def test_accepted_and_transport_errors() -> None:
    assert classify(None) == "accepted"
    reset = TransportError(code=0, reason="ReadError", message="connection reset")
    assert classify(reset) == "unknown"


def test_codes_split_into_stop_and_retry() -> None:
    assert STOP_CODES.isdisjoint(RETRY_CODES)
    # Only a typed attribute decides: the same message under another type means nothing.
    odd = KubeError(code=418, reason="Teapot", message="disruption budget; not found; 409")
    assert classify(odd) == "failed"


def test_a_guard_hold_is_not_counted_as_throttling() -> None:
    held = error_from_response(429, JSON, status(
        429, "TooManyRequests", "held", [{"reason": GUARD_HOLD_CAUSE, "message": "held"}]))
    apf = error_from_response(429, {}, b"Too many requests")
    assert classify(held) == "guard-held" and classify(apf) == "rate-limited"
    assert "guard-held" in RETRY_CODES


def test_the_retry_queue_rate_limits_each_uid_on_its_own() -> None:
    now = [100.0]
    queue = RetryQueue(Backoff(base=1.0, cap=8.0), random.Random(7), clock=lambda: now[0])
    first = [queue.when("a") for _ in range(5)]
    # Equal jitter: each delay is between half and all of its capped exponential step.
    for delay, step in zip(first, (1, 2, 4, 8, 8), strict=True):
        assert step / 2 <= delay <= step
    assert queue.requeues("a") == 5 and queue.requeues("b") == 0
    assert 1.0 / 2 <= queue.when("b") <= 1.0  # another pod's failures do not count
    assert queue.waits("a") == pytest.approx(first[-1])
    now[0] += first[-1] / 2
    assert queue.waits("a") == pytest.approx(first[-1] / 2)
    now[0] += first[-1]
    assert queue.waits("a") == 0.0
    assert queue.when("a", retry_after=30.0) >= 30.0  # the server's Retry-After is a floor
    queue.forget("a")  # evicted: its failures no longer count
    assert queue.requeues("a") == 0 and queue.waits("a") == 0.0
    assert 1.0 / 2 <= queue.when("a") <= 1.0


def test_the_guards_before_a_pod_is_sent_an_eviction() -> None:
    running = {"metadata": {"name": "p", "namespace": "ml", "uid": "u1"}}
    deleting = {"metadata": {**running["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    other = {"metadata": {**running["metadata"], "uid": "u2"}}
    assert guard("u1", recorded=None, seen=running) is None
    assert guard("u1", recorded="u1", seen=running) == "evicted-before"
    assert guard("u1", recorded="u0", seen=None) == "gone-before"
    assert guard("u1", recorded=None, seen=other) == "gone-before"  # the name, another pod
    assert guard("u1", recorded=None, seen=deleting) == "terminating"
