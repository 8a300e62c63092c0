"""A lab node cut off from the API server, as a network partition or a hung kubelet is.

What the control plane sees of a lost node (kubernetes v1.33): its kubelet stops renewing
its Lease (kube-node-lease/<node>) and posting node status; after
--node-monitor-grace-period the node lifecycle controller marks it Ready=Unknown and
taints it node.kubernetes.io/unreachable (NoSchedule and NoExecute), and the taint
eviction controller deletes its pods when their tolerations run out (drainsafe.lab.
controllers.nodelifecycle, .tainteviction). The machine itself runs on: its containers
keep serving whoever can still reach them, and a pod deleted meanwhile stays Terminating
in the API, since no kubelet confirms its end, until the node is back.

The request travels through the API as a reboot's does (lab.node.reboot): `cut_off` sets
the annotation CUT_OFF on the Node, and the lab's node pool, playing the network between
node and API server, stops the node's kubelet from reaching the API: no lease renewals,
no node or pod status, no events, and the pod changes it would have watched are held.
`reconnect` removes the annotation: the kubelet renews its lease, posts Ready, and then
sees the pods as they are now (a relist), so it stops the pods deleted meanwhile.
`drainsafe lab node cut-off` / `reconnect` do the same from the command line.
"""

from __future__ import annotations

from typing import Any

from drainsafe.kube import KubeClient, api_path
from drainsafe.kube.objects import condition, meta

CUT_OFF = "lab.drainsafe.io/cut-off"


def is_cut_off(node: dict[str, Any]) -> bool:
    return CUT_OFF in (meta(node).get("annotations") or {})


async def cut_off(client: KubeClient, node: str) -> None:
    await client.patch(api_path("v1", "nodes", name=node),
                       {"metadata": {"annotations": {CUT_OFF: "true"}}})


async def reconnect(client: KubeClient, node: str) -> None:
    await client.patch(api_path("v1", "nodes", name=node),
                       {"metadata": {"annotations": {CUT_OFF: None}}})


def ready_status(node: dict[str, Any]) -> str:
    return str((condition(node, "Ready") or {}).get("status") or "")


async def wait_ready(client: KubeClient, node: str, status: str, *,
                     timeout: float) -> dict[str, Any]:
    """Until the node's Ready condition has this status ("Unknown", "True"); the Node."""
    from drainsafe.kube import Informer

    async with Informer(client, api_path("v1", "nodes"),
                        field_selector=f"metadata.name={node}") as nodes:
        def reached(cache: Any) -> dict[str, Any]:
            obj = cache.get(node)
            return dict(obj) if obj is not None and ready_status(obj) == status else {}

        return await nodes.wait_for(reached, timeout=timeout,
                                    what=f"{node} Ready={status}")
