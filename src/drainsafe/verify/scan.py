"""Watching a response body go by for the end marker and the drain error event.

Markers can be split across network chunks, so the scanner keeps a short tail of what it has
seen and searches the tail plus each new chunk; memory stays bounded however long the stream.
"""

from __future__ import annotations

from drainsafe.marker import DRAIN_ERROR_TYPE, is_drain_error_event

# Longer than drainsafe's whole SSE error event, so it is always seen in one window.
_TAIL_BYTES = 1024


class MarkerScanner:
    def __init__(self, end_marker: str | None) -> None:
        self._end = end_marker.encode() if end_marker else b""
        self._tail = b""
        self.bytes = 0
        self.end_marker_seen = False
        self.drain_marker_seen = False

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.bytes += len(chunk)
        window = self._tail + chunk
        if self._end and not self.end_marker_seen and self._end in window:
            self.end_marker_seen = True
        if (not self.drain_marker_seen and DRAIN_ERROR_TYPE.encode() in window
                and is_drain_error_event(window)):
            self.drain_marker_seen = True
        self._tail = window[-_TAIL_BYTES:]
