"""The Kubernetes client layer: kubeconfig client, typed errors, list+watch informer.

    from drainsafe.kube import KubeClient, Informer, api_path
    async with KubeClient.from_kubeconfig(kubeconfig, context) as client:
        pods = Informer(client, "/api/v1/pods", field_selector="spec.nodeName=n1")
        async with pods:
            await pods.wait_for(lambda cache: not cache, timeout=60, what="node empty")
"""

from drainsafe.kube.client import ClusterIdentity, KubeClient, KubeconfigError, Obj, api_path
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
from drainsafe.kube.watch import Informer, WaitTimeout, cache_key

__all__ = [
    "Backoff",
    "BudgetBlocked",
    "ClusterIdentity",
    "Conflict",
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
    "cache_key",
]
