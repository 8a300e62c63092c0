"""`uncordon` and `audit`: the I/O around drain.ownership."""

from __future__ import annotations

from dataclasses import dataclass

from drainsafe.drain import ownership
from drainsafe.drain.plan import DrainOptions, classify
from drainsafe.kube import Conflict, KubeClient, api_path


@dataclass(frozen=True)
class UncordonResult:
    node: str
    changed: bool
    message: str


_OPTIONS = DrainOptions()


class NotOwned(RuntimeError):
    """The cordon was not set by drainsafe; refusing without --force."""


async def uncordon(client: KubeClient, node: str, *, force: bool = False) -> UncordonResult:
    path = api_path("v1", "nodes", name=node)
    for _ in range(5):
        obj = await client.get(path)
        if not ownership.is_cordoned(obj):
            return UncordonResult(node, False, f"{node} is not cordoned")
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
        try:
            await client.patch(path, ownership.uncordon_patch(obj))
        except Conflict:
            continue  # the node changed between read and write: decide again
        owner = ownership.node_annotations(obj).get(ownership.CORDONED_BY, "someone else")
        return UncordonResult(node, True, f"{node} uncordoned (was cordoned by {owner})")
    raise RuntimeError(f"{node}: the node kept changing; uncordon not applied")


async def audit(client: KubeClient, *, all_nodes: bool = False) -> list[ownership.CordonRecord]:
    nodes, _ = await client.list(api_path("v1", "nodes"))
    pods, _ = await client.list(api_path("v1", "pods"))
    records = []
    for node in nodes:
        if not all_nodes and not ownership.is_cordoned(node):
            continue
        name = (node.get("metadata") or {}).get("name")
        here = [p for p in pods if (p.get("spec") or {}).get("nodeName") == name]
        daemons = sum(1 for p in here if classify(p, _OPTIONS).action == "skip")
        records.append(ownership.audit_record(node, len(here), daemons))
    return records

