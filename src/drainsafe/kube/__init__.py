"""The Kubernetes client layer: kubeconfig client, typed errors, list+watch informer.

    from drainsafe.kube import KubeClient, Informer, api_path
    async with KubeClient.from_kubeconfig(kubeconfig, context) as client:
        pods = Informer(client, "/api/v1/pods", field_selector="spec.nodeName=n1")
        async with pods:
            await pods.wait_for(lambda cache: not cache, timeout=60, what="node empty")

The names below load on first use (PEP 562 module __getattr__): drainsafe.kube.objects, the
one home of object semantics, is read by modules that never talk to a cluster (the
termination budget, the manifest checker), and importing it must not load the HTTP client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drainsafe.kube.client import (
        ClusterIdentity,
        KubeClient,
        KubeconfigError,
        Obj,
        api_path,
    )
    from drainsafe.kube.errors import (
        BudgetBlocked,
        Conflict,
        Expired,
        Forbidden,
        GuardHeld,
        KubeError,
        MultiplePdbs,
        NotFound,
        RateLimited,
        ServerError,
        TooManyRequests,
        TransportError,
    )
    from drainsafe.kube.retry import Backoff
    from drainsafe.kube.watch import DeletedFinalStateUnknown, Informer, WaitTimeout

_HOMES = {
    **dict.fromkeys(("ClusterIdentity", "KubeClient", "KubeconfigError", "Obj", "api_path"),
                    "drainsafe.kube.client"),
    **dict.fromkeys(("BudgetBlocked", "Conflict", "Expired", "Forbidden", "GuardHeld",
                     "KubeError", "MultiplePdbs", "NotFound", "RateLimited", "ServerError",
                     "TooManyRequests", "TransportError"), "drainsafe.kube.errors"),
    "Backoff": "drainsafe.kube.retry",
    **dict.fromkeys(("DeletedFinalStateUnknown", "Informer", "WaitTimeout"),
                    "drainsafe.kube.watch"),
}

__all__ = [
    "Backoff",
    "BudgetBlocked",
    "ClusterIdentity",
    "Conflict",
    "DeletedFinalStateUnknown",
    "Expired",
    "Forbidden",
    "GuardHeld",
    "Informer",
    "KubeClient",
    "KubeError",
    "KubeconfigError",
    "MultiplePdbs",
    "NotFound",
    "Obj",
    "RateLimited",
    "ServerError",
    "TooManyRequests",
    "TransportError",
    "WaitTimeout",
    "api_path",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value
