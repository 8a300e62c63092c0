"""The eviction outcome table: an API response (as the server sends it) to a typed code.

`error_from_response` turns the response into a typed error once, at the boundary; the
drain's behaviour then follows `classify`'s code only. Each row is a response the eviction
subresource or the API server's filters really send (pkg/registry/core/pod/storage/
eviction.go; apiserver pkg/server/filters/priority-and-fairness.go).
"""

from __future__ import annotations

import json

import pytest

from drainsafe.drain.evict import RETRY_CODES, STOP_CODES, classify
from drainsafe.kube.errors import KubeError, TransportError, error_from_response


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
