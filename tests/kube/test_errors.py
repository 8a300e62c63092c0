"""The Status -> typed error mapping (pure; bodies shaped as the API server sends them)."""

from __future__ import annotations

import json

import pytest

from drainsafe.kube import errors as e


def status(code: int, reason: str, message: str, **details: object) -> bytes:
    body: dict[str, object] = {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    }
    if details:
        body["details"] = details
    return json.dumps(body).encode()


JSON = {"Content-Type": "application/json"}
BUDGET_MSG = "Cannot evict pod as it would violate the pod's disruption budget."


def test_budget_429_is_told_apart_by_its_cause() -> None:
    body = status(429, "TooManyRequests", BUDGET_MSG, causes=[
        {"reason": "DisruptionBudget",
         "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}])
    err = e.error_from_response(429, JSON, body)
    assert isinstance(err, e.BudgetBlocked)
    assert err.retry_after is None
    assert "needs 2 healthy pods" in err.budget_message
    assert err.retryable


def test_budget_not_yet_observed_carries_retry_after() -> None:
    body = status(429, "TooManyRequests", BUDGET_MSG, retryAfterSeconds=10, causes=[
        {"reason": "DisruptionBudget",
         "message": "The disruption budget web is still being processed by the server."}])
    err = e.error_from_response(429, {**JSON, "Retry-After": "10"}, body)
    assert isinstance(err, e.BudgetBlocked)
    assert err.retry_after == 10


def test_priority_and_fairness_429_is_rate_limited() -> None:
    err = e.error_from_response(
        429, {"Content-Type": "text/plain", "Retry-After": "3"},
        b"Too many requests, please try again later.\n")
    assert isinstance(err, e.RateLimited) and not isinstance(err, e.BudgetBlocked)
    assert err.retry_after == 3
    assert "Too many requests" in err.message


def test_retry_after_http_date_in_the_past_is_zero() -> None:
    assert e.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert e.parse_retry_after("garbage") is None


@pytest.mark.parametrize("code", [500, 201])
def test_multi_pdb_refusal_even_inside_a_2xx(code: int) -> None:
    body = status(500, "", "This pod has more than one PodDisruptionBudget, which the "
                  "eviction subresource does not support.")
    err = e.error_from_response(code, JSON, body)
    assert isinstance(err, e.MultiplePdbs)
    assert not err.retryable


def test_success_status_is_not_an_error() -> None:
    ok = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})
    assert e.error_from_response(201, JSON, ok.encode()) is None
    assert e.error_from_response(200, JSON, b'{"kind":"Pod"}') is None


@pytest.mark.parametrize(("code", "reason", "cls"), [
    (404, "NotFound", e.NotFound), (409, "Conflict", e.Conflict), (410, "Expired", e.Expired),
    (401, "Unauthorized", e.Unauthorized), (504, "Timeout", e.ServerTimeout),
    (500, "InternalError", e.ServerError), (503, "ServiceUnavailable", e.ServerError),
    (400, "BadRequest", e.BadRequest),
])
def test_codes(code: int, reason: str, cls: type[e.KubeError]) -> None:
    err = e.error_from_response(code, JSON, status(code, reason, "x"), method="GET", path="/p")
    assert type(err) is cls
    assert "GET /p" in str(err)


def test_forbidden_namespace_terminating() -> None:
    body = status(403, "Forbidden", "namespace ml is being terminated",
                  causes=[{"reason": "NamespaceTerminating", "message": "ns terminating"}])
    err = e.error_from_response(403, JSON, body)
    assert isinstance(err, e.Forbidden) and err.namespace_terminating
    rbac = e.error_from_response(403, JSON, status(403, "Forbidden", "cannot create"))
    assert isinstance(rbac, e.Forbidden) and not rbac.namespace_terminating
