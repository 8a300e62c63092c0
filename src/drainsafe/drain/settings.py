"""What a node's drain is told: the plan's options and the bounds of its waits.

Defaults are the CLI's (drain.cli): --timeout 3600 bounds one node's whole drain, where
kubectl drain's --timeout defaults to 0, "infinite" (kubectl pkg/cmd/drain/drain.go); a
drain that never ends is not offered here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drainsafe.drain.filters import DrainOptions
from drainsafe.drain.ownership import DEFAULT_REASON
from drainsafe.kube.retry import Backoff


@dataclass(frozen=True)
class DrainSettings:
    options: DrainOptions = field(default_factory=DrainOptions)
    timeout: float = 3600.0  # bound on one node's whole drain
    unschedulable_after: float = 20.0  # a new pod Unschedulable this long stops the drain
    gone_margin: float = 60.0  # beyond the pod's grace, before we call it stuck
    reason: str = DEFAULT_REASON
    backoff: Backoff = field(default_factory=lambda: Backoff(base=1.0, cap=15.0))
    request_retries: int = 8  # transient API errors in a row before giving up
    pod_selector: str | None = None
    surge: bool = False  # no room: placeholder pods for an autoscaler, wait for room
    surge_timeout: float = 900.0
    surge_priority_class: str | None = None
