"""metav1.Status error bodies, exactly as the API server writes them.

Field order and constructors follow kubernetes/apimachinery pkg/apis/meta/v1/types.go
(Status, StatusDetails, StatusCause, whose Type serialises as "reason") and
pkg/api/errors/errors.go (NewNotFound, NewConflict, NewTooManyRequests, ...).
"""

from __future__ import annotations

from typing import Any


class StatusError(Exception):
    """An API error carried to the HTTP edge as a Status body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: int = 0,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details or {})
        if retry_after:
            self.details["retryAfterSeconds"] = retry_after
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return failure(self.code, self.reason, self.message, self.details)


def failure(code: int, reason: str, message: str, details: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    body["code"] = code
    return body


def success(code: int = 200, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Success"}
    if details:
        body["details"] = details
    body["code"] = code
    return body


def _resource(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> StatusError:
    return StatusError(404, "NotFound", f'{_resource(group, plural)} "{name}" not found',
                       details={"name": name, "group": group, "kind": plural}
                       if group else {"name": name, "kind": plural})


def already_exists(group: str, plural: str, name: str) -> StatusError:
    details = {"name": name, "kind": plural, **({"group": group} if group else {})}
    return StatusError(409, "AlreadyExists",
                       f'{_resource(group, plural)} "{name}" already exists', details=details)


def conflict(group: str, plural: str, name: str, why: str) -> StatusError:
    details = {"name": name, "kind": plural, **({"group": group} if group else {})}
    return StatusError(
        409, "Conflict",
        f'Operation cannot be fulfilled on {_resource(group, plural)} "{name}": {why}',
        details=details,
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> StatusError:
    """422 Invalid with one cause per (field, message)."""
    text = "; ".join(f"{f}: {m}" for f, m in causes)
    return StatusError(
        422, "Invalid", f'{kind} "{name}" is invalid: {text}',
        details={"name": name, "kind": kind,
                 "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f}
                            for f, m in causes]},
    )


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def expired(message: str) -> StatusError:
    return StatusError(410, "Expired", message)


def method_not_allowed(message: str) -> StatusError:
    return StatusError(405, "MethodNotAllowed", message)


def unauthorized() -> StatusError:
    return StatusError(401, "Unauthorized", "Unauthorized")
