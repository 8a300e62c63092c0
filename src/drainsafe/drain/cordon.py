"""Cordon and uncordon in one place, and `audit`: the I/O around drain.ownership.

Both go through `retry_on_conflict`: read, decide, write with the resourceVersion as a
compare-and-swap, and on a 409 read and decide again (client-go's
util/retry.RetryOnConflict, which kubectl's cordon helper uses: kubectl pkg/drain/cordon.go).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drainsafe.drain import ownership
from drainsafe.drain.scale import list_workloads, restore_all_for_node
from drainsafe.kube import KubeClient, api_path
from drainsafe.kube.objects import rfc3339
from drainsafe.kube.retry import KeptChanging, retry_on_conflict
from drainsafe.maintenance.facts import MaintenanceFacts, maintenance_facts


async def cordon(client: KubeClient, node: str, *, reason: str,
                 state: ownership.ProgressState = "draining", attempts: int = 8,
                 clock: Callable[[], float] = time.time, operation: str = ""
                 ) -> ownership.Progress:
    """Cordon with the ownership record and the drain state; returns the progress record
    (with the pods an earlier run evicted). `operation`: ownership.cordon_patch."""
    path = api_path("v1", "nodes", name=node)

    async def decide(obj: dict[str, Any]) -> ownership.Progress:
        progress = ownership.Progress.of(obj)
        progress.state = state
        now = clock()
        progress.updated = progress.updated or rfc3339(now)  # as to_json would write it
        await client.patch(path, ownership.cordon_patch(
            obj, actor=client.identity.actor(), reason=reason, progress=progress, now=now,
            operation=operation))
        return progress

    return await retry_on_conflict(client, path, decide, attempts=attempts)


@dataclass(frozen=True)
class UncordonResult:
    node: str
    changed: bool
    message: str


class NotOwned(RuntimeError):
    """The cordon was not set by drainsafe; refusing without --force."""


async def uncordon(client: KubeClient, node: str, *, force: bool = False) -> UncordonResult:
    """Remove drainsafe's cordon (or anyone's, with force). Giving a drain up also restores
    the scale of workloads an unfinished surge of this node left scaled up."""
    path = api_path("v1", "nodes", name=node)
    restored: list[str] | None = None

    async def _restore(done: list[str] | None) -> list[str]:
        # Once, whatever the attempt: a second restore would find nothing left to name.
        return done if done is not None else await restore_all_for_node(client, node)

    async def decide(obj: dict[str, Any]) -> UncordonResult:
        nonlocal restored
        if not ownership.is_cordoned(obj):
            restored = await _restore(restored)
            note = f"; restored the scale of {', '.join(restored)}" if restored else ""
            return UncordonResult(node, bool(restored), f"{node} is not cordoned{note}")
        if not ownership.owned_by_drainsafe(obj) and not force:
            ann = ownership.node_annotations(obj)
            why = (
                "it was already cordoned before drainsafe drained it"
                if ann.get(ownership.WAS_UNSCHEDULABLE) == "true"
                else "drainsafe did not cordon it"
            )
            raise NotOwned(
                f"{node}: refusing to uncordon: {why}; whoever cordoned it may still need "
                "it out of service. Pass --force to uncordon anyway."
            )
        restored = await _restore(restored)
        note = f"; restored the scale of {', '.join(restored)}" if restored else ""
        # Guarded by the resourceVersion read before the restore: a node that changed
        # meanwhile is a 409, and the node is read and decided again.
        await client.patch(path, ownership.uncordon_patch(obj))
        owner = ownership.node_annotations(obj).get(ownership.CORDONED_BY, "someone else")
        return UncordonResult(node, True, f"{node} uncordoned (was cordoned by {owner}){note}")

    try:
        return await retry_on_conflict(client, path, decide, attempts=5)
    except KeptChanging as exc:
        raise RuntimeError(f"{node}: the node kept changing; uncordon not applied") from exc


async def read_facts(client: KubeClient, *, all_nodes: bool = False) -> MaintenanceFacts:
    """What `drainsafe audit` reports (maintenance.facts): nodes, their pods, workloads.
    NodeMaintenances are not read: the node records say which one cordoned, and the
    drain's role (deploy/rbac.yaml) need not read them."""
    nodes, _ = await client.list(api_path("v1", "nodes"))
    pods, _ = await client.list(api_path("v1", "pods"))
    return maintenance_facts(nodes=nodes, pods=pods, workloads=await list_workloads(client),
                             all_nodes=all_nodes)


async def audit(client: KubeClient, *, all_nodes: bool = False) -> list[ownership.CordonRecord]:
    nodes, _ = await client.list(api_path("v1", "nodes"))
    pods, _ = await client.list(api_path("v1", "pods"))
    facts = maintenance_facts(nodes=nodes, pods=pods, all_nodes=all_nodes)
    return [n.record for n in facts.nodes]
