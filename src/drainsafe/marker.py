"""The explicit marker a drain-aware server sends when it ends a stream on purpose.

A stream still open when the shutdown deadline comes is not cut silently: for Server-Sent
Events the server sends one `event: error` whose data names the reason, and no `[DONE]`;
for other chunked bodies it ends the body without the terminating zero-length chunk, so
every HTTP client reports an incomplete body instead of a finished answer. The same marker
is written by `drainsafe serve` and `drainsafe run`, and recognised by `drainsafe verify`.
"""

from __future__ import annotations

import json

DRAIN_ERROR_TYPE = "drainsafe_shutdown_deadline"
"""The `error.type` field of the SSE error event."""

CUT_HEADER = "x-drainsafe-cut"
"""Trailer-like response header name reserved for tooling; not relied on by clients."""


def sse_error_event(message: str = "stream ended by the server's shutdown deadline") -> bytes:
    payload = json.dumps({"error": {"type": DRAIN_ERROR_TYPE, "message": message}})
    return f"event: error\ndata: {payload}\n\n".encode()


def is_drain_error_event(chunk: bytes) -> bool:
    """Whether a received SSE chunk carries drainsafe's shutdown-deadline error."""
    return b"event: error" in chunk and DRAIN_ERROR_TYPE.encode() in chunk
