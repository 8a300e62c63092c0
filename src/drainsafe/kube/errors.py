"""Typed errors for Kubernetes API responses.

The API server answers failures with a `metav1.Status` object (kubernetes/apimachinery
pkg/apis/meta/v1/types.go, Status/StatusDetails/StatusCause; a cause's type is serialised
as the JSON key "reason"). The eviction subresource adds cases that callers must tell apart
(kubernetes/kubernetes pkg/registry/core/pod/storage/eviction.go;
https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/):

- 429 with a cause of type DisruptionBudget: the PDB allows no disruption now (or its
  status is not yet observed, then with retryAfterSeconds). -> BudgetBlocked
- 429 with a cause of type drainsafe.io/EvictionGuardHold: drainsafe's eviction guard
  (an admission webhook) holds the eviction until a stand-in is Ready. The API server
  passes a denying webhook's Status through with its details (apiserver
  pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr). -> GuardHeld
- 429 without either cause: API Priority and Fairness throttling, a plain-text body with a
  Retry-After header (apiserver pkg/server/filters/priority-and-fairness.go). -> RateLimited
- 500 (possibly a 2xx with status Failure) "more than one PodDisruptionBudget". -> MultiplePdbs
- 403 Forbidden (RBAC, negative budget, namespace terminating), 404, 409 precondition.

`error_from_response` is a pure function of (HTTP code, headers, body) so it is tested
without a server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
MULTIPLE_PDBS_MESSAGE = "more than one PodDisruptionBudget"
NAMESPACE_TERMINATING_CAUSE = "NamespaceTerminating"
GUARD_HOLD_CAUSE = "drainsafe.io/EvictionGuardHold"
"""The cause type the eviction guard's 429 carries, so clients tell a hold from throttling."""


@dataclass(frozen=True)
class Cause:
    reason: str
    message: str
    field: str = ""


@dataclass
class KubeError(Exception):
    """A failed API call. `code` is the HTTP status (0 when no response arrived)."""

    code: int
    reason: str
    message: str
    causes: tuple[Cause, ...] = ()
    retry_after: float | None = None
    method: str = ""
    path: str = ""
    status: Mapping[str, Any] | None = field(default=None, repr=False)

    def __str__(self) -> str:
        where = f"{self.method} {self.path}: " if self.path else ""
        extra = "; ".join(c.message for c in self.causes if c.message)
        text = f"{where}{self.code} {self.reason}: {self.message}"
        return f"{text} ({extra})" if extra else text

    @property
    def retryable(self) -> bool:
        """Whether repeating the same request later may succeed."""
        return False


class BadRequest(KubeError):
    pass


class Unauthorized(KubeError):
    pass


class Forbidden(KubeError):
    @property
    def namespace_terminating(self) -> bool:
        return any(c.reason == NAMESPACE_TERMINATING_CAUSE for c in self.causes)


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    """409: a precondition (UID, resourceVersion) did not match, or an update raced."""


class Expired(KubeError):
    """410: the resourceVersion is too old; a watcher must relist."""


class TooManyRequests(KubeError):
    @property
    def retryable(self) -> bool:
        return True


class BudgetBlocked(TooManyRequests):
    """429 with a DisruptionBudget cause: the eviction would violate a PDB right now."""

    @property
    def budget_message(self) -> str:
        for cause in self.causes:
            if cause.reason == DISRUPTION_BUDGET_CAUSE and cause.message:
                return cause.message
        return self.message


class GuardHeld(TooManyRequests):
    """429 from drainsafe's eviction guard: held until a stand-in is Ready; retry later."""

    @property
    def hold_message(self) -> str:
        for cause in self.causes:
            if cause.reason == GUARD_HOLD_CAUSE and cause.message:
                return cause.message
        return self.message


class RateLimited(TooManyRequests):
    """429 without a budget cause: API Priority and Fairness (or another limiter)."""


class ServerError(KubeError):
    @property
    def retryable(self) -> bool:
        return True


class MultiplePdbs(ServerError):
    """The pod matches more than one PDB; the eviction subresource refuses it (HTTP 500).

    Not retryable: it stays so until someone deletes or narrows one of the budgets.
    """

    @property
    def retryable(self) -> bool:
        return False


class ServerTimeout(ServerError):
    """504, e.g. "couldn't update PodDisruptionBudget due to conflicts"."""


class TransportError(KubeError):
    """No HTTP response: connection refused or reset, or a client-side timeout.

    For a POST the outcome is unknown; the caller must re-read state before retrying.
    """

    @property
    def retryable(self) -> bool:
        return True


def _causes(status: Mapping[str, Any]) -> tuple[Cause, ...]:
    details = status.get("details") or {}
    raw = details.get("causes") or [] if isinstance(details, Mapping) else []
    out = []
    for item in raw:
        if isinstance(item, Mapping):
            out.append(
                Cause(
                    reason=str(item.get("reason") or ""),
                    message=str(item.get("message") or ""),
                    field=str(item.get("field") or ""),
                )
            )
    return tuple(out)


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After is delta-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    from datetime import UTC, datetime

    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def decode_status(body: bytes | str) -> Mapping[str, Any] | None:
    """The body as a Status object, or None when it is not one (plain text, other JSON)."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(obj, dict) and obj.get("kind") == "Status":
        return obj
    return None


def error_from_response(
    code: int,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    method: str = "",
    path: str = "",
) -> KubeError | None:
    """The typed error for a response, or None when the call succeeded.

    A 2xx whose body is a Status with status "Failure" is an error too: the eviction
    handler returns the multi-PDB refusal as a result object, and the HTTP code it ends up
    with is not something to rely on (pkg/registry/core/pod/storage/eviction.go returns
    it through the REST result, not as an error).
    """
    status = decode_status(body)
    if 200 <= code < 300:
        if status is None or status.get("status") != "Failure":
            return None
        code = int(status.get("code") or 500)
    lowered = {k.lower(): v for k, v in headers.items()}
    retry_after = parse_retry_after(lowered.get("retry-after"))
    if status is not None:
        details = status.get("details") or {}
        if retry_after is None and isinstance(details, Mapping):
            seconds = details.get("retryAfterSeconds")
            if isinstance(seconds, int | float) and seconds > 0:
                retry_after = float(seconds)
        reason = str(status.get("reason") or "")
        message = str(status.get("message") or "")
        causes = _causes(status)
    else:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        reason, message, causes = "", text.strip()[:500], ()
    kwargs: dict[str, Any] = {
        "code": code,
        "reason": reason,
        "message": message,
        "causes": causes,
        "retry_after": retry_after,
        "method": method,
        "path": path,
        "status": status,
    }
    return _classify(code, message, causes)(**kwargs)


def _classify(code: int, message: str, causes: tuple[Cause, ...]) -> type[KubeError]:
    if MULTIPLE_PDBS_MESSAGE in message:
        return MultiplePdbs
    if code == 429:
        if any(c.reason == DISRUPTION_BUDGET_CAUSE for c in causes):
            return BudgetBlocked
        if any(c.reason == GUARD_HOLD_CAUSE for c in causes):
            return GuardHeld
        return RateLimited
    by_code: dict[int, type[KubeError]] = {
        400: BadRequest,
        401: Unauthorized,
        403: Forbidden,
        404: NotFound,
        409: Conflict,
        410: Expired,
        422: BadRequest,
        504: ServerTimeout,
    }
    if code in by_code:
        return by_code[code]
    if code >= 500:
        return ServerError
    return KubeError
