"""The child server's in-flight work, read from its Prometheus text (`drainsafe run --mode
signal`, which holds SIGTERM until the child is idle).

The text comes from another program over HTTP, so anything can arrive. Whatever does not give
a usable figure is UnreadableMetrics: text the prometheus_client parser (the reference
implementation of the text format) cannot read, none of the wanted names present, or a sum
that is not a finite number >= 0 (NaN, +Inf, a negative gauge). The supervisor then falls back
to the drain delay and the deadline (issue 12): an unknown figure never reads as "idle".
"""

from __future__ import annotations

import math
from collections.abc import Collection


class UnreadableMetrics(ValueError):
    """The child's metrics page does not give a usable in-flight figure."""


def in_flight(text: str, wanted: Collection[str]) -> int:
    """The sum of the samples (or families) named in `wanted`, rounded up."""
    from prometheus_client.parser import text_string_to_metric_families

    names = set(wanted)
    total = 0.0
    found = False
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in names or family.name in names:
                    found = True
                    total += float(sample.value)
    except Exception as exc:  # the parser raises ValueError, IndexError, KeyError, ...
        raise UnreadableMetrics(f"not Prometheus text: {type(exc).__name__}: {exc}") from None
    if not found:
        raise UnreadableMetrics(f"none of {', '.join(sorted(names))} in the metrics")
    if not math.isfinite(total) or total < 0:
        raise UnreadableMetrics(f"{' + '.join(sorted(names))} = {total}")
    return math.ceil(total)
