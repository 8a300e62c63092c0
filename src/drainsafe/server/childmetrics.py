"""The child server's in-flight work, read from its Prometheus text (`drainsafe run --mode
signal`, which holds SIGTERM until the child is idle).

The text comes from another program over HTTP, so anything can arrive: whatever the
prometheus_client parser (the reference implementation of the text format) cannot read is a
MetricsTextError, and samples that are not finite numbers >= 0 (NaN, +Inf, negative gauges)
count as nothing, never as a crash of the drain.
"""

from __future__ import annotations

import math
from collections.abc import Collection

MAX_IN_FLIGHT = 1_000_000_000
"""Larger sums are capped here (a gauge reading 1e300 is a broken exporter, not load)."""


class MetricsTextError(ValueError):
    """The text is not in the Prometheus text exposition format."""


def in_flight(text: str, wanted: Collection[str]) -> int:
    """The sum of the samples (or families) named in `wanted`."""
    from prometheus_client.parser import text_string_to_metric_families

    names = set(wanted)
    total = 0.0
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in names or family.name in names:
                    value = float(sample.value)
                    if math.isfinite(value) and value > 0:
                        total += value
    except Exception as exc:  # the parser raises ValueError, IndexError, KeyError, ...
        raise MetricsTextError(f"not Prometheus text format: {type(exc).__name__}: {exc}") \
            from exc
    return int(min(total, MAX_IN_FLIGHT))
