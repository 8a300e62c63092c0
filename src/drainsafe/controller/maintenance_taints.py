"""Putting on and taking off a NodeMaintenance's pending taint (maintenance.pending).

A read, then a merge patch of spec.taints guarded by the resourceVersion read (a merge
patch replaces the list, so the compare-and-swap keeps a taint another writer added in
between; 409: read again, kube.retry.retry_on_conflict), as cluster-autoscaler's AddTaints
and CleanTaints update the node with a conflict retry (utils/taints/taints.go).
"""

from __future__ import annotations

import contextlib
from typing import Any

from drainsafe.kube import KubeClient, NotFound, api_path
from drainsafe.kube.objects import meta
from drainsafe.kube.retry import retry_on_conflict
from drainsafe.maintenance.pending import pending_taints


async def set_pending(client: KubeClient, node: str, maintenance: str, *,
                      pending: bool) -> bool:
    """Whether the node was changed (a node gone: nothing to do)."""
    path = api_path("v1", "nodes", name=node)

    async def decide(obj: dict[str, Any]) -> bool:
        taints = pending_taints(obj, maintenance, pending=pending)
        if taints is None:
            return False
        await client.patch(path, {"metadata": {"resourceVersion": meta(obj).get(
            "resourceVersion")}, "spec": {"taints": taints}})
        return True

    with contextlib.suppress(NotFound):
        return await retry_on_conflict(client, path, decide)
    return False
