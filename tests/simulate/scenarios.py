"""Small scenarios for the simulate tests, as plain mappings (what YAML would load)."""

from __future__ import annotations

import copy
from typing import Any

SMALL: dict[str, Any] = {
    "name": "small",
    "seed": 3,
    "fleet": {"nodes": 6, "gpus_per_node": 2},
    "traffic": {"duration": 60},
    "consumers": [
        {"name": "kube-proxy", "share": 0.6, "propagation": {"p50": 1, "p99": 4}},
        {"name": "ingress", "share": 0.4, "propagation": {"p50": 3, "p99": 10}},
    ],
    "workloads": [{
        "name": "llm",
        "replicas": 8,
        "gpus": 1,
        "rate": 40,
        "durations": {"p50": 2, "p99": 20, "max": 40},
        "startup": 10,
        "pdb": {"maxUnavailable": 1},
        "termination": {"grace": 30, "drain_delay": 0, "shutdown_deadline": 10},
    }],
    "upgrade": {"strategy": "kubectl", "parallelism": 1, "node_upgrade": 20, "start": 5},
}


def small(**changes: Any) -> dict[str, Any]:
    """A deep copy of SMALL with dotted-path changes, e.g. small(**{"upgrade.surge_nodes": 1})."""
    data = copy.deepcopy(SMALL)
    for dotted, value in changes.items():
        target: Any = data
        *parents, last = dotted.split(".")
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return data
