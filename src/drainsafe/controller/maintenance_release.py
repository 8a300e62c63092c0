"""Deleting a NodeMaintenance: a finalizer holds the object until what it holds is given back.

The reconciler puts FINALIZER on every NodeMaintenance before its first node starts
(`hold`). A DELETE then only marks the object (metadata.deletionTimestamp set, the object
still served, the DELETE answered 200 with it: kubernetes apiserver
pkg/registry/generic/registry/store.go Delete and endpoints/handlers/delete.go, which
answers 202 only for orphanDependents=false), and the leader, seeing the mark, gives back
(`release`):

- no new node starts, and the node tasks of the operation are cancelled first (a drain
  cancelled so records "interrupted" on the node and leaves its surge recorded);
- each node that may hold something (maintenance.progress.to_give_back: past Pending and
  not done, or Failed) and whose cordon record names this NodeMaintenance
  (drain.ownership.cordoned_for) is uncordoned through drain.cordon.uncordon, which first
  restores every surge recorded for the node (scale.restore_all_for_node) and then removes
  the cordon with its record, as `drainsafe uncordon` does. So the cluster is as before the
  operation for those nodes, and `drainsafe audit` finds nothing left of it;
- a cordon that was not drainsafe's (the node was cordoned before the operation:
  ownership.WAS_UNSCHEDULABLE) is not removed (NotOwned) but the surges made for the node
  are restored; a node whose cordon another drain's record holds is left to that drain;
- a node Drained under uncordon: Never stays cordoned and recorded, as its spec asked;
- then the finalizer is removed and the API server deletes the object.

As medik8s node-maintenance-operator (README: "NodeMaintenance CR deleted: ... uncordon the
node"), deletion ends the maintenance and returns the nodes; unlike it, the surges made for
them are restored too. Every step is idempotent and read from the cluster, so a leader
killed half way through is followed by one that does the rest; an error leaves the
finalizer on for the next pass.

Adding or removing a finalizer of one's own object needs only `patch` on it: the
OwnerReferencesPermissionEnforcement admission plugin (plugin/pkg/admission/gc/
gc_admission.go) checks `<resource>/finalizers` only when ownerReferences change.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from drainsafe.drain.cordon import NotOwned, uncordon
from drainsafe.drain.ownership import cordoned_for
from drainsafe.drain.scale import restore_all_for_node
from drainsafe.failpoint import failpoint
from drainsafe.kube import KubeClient, NotFound, api_path
from drainsafe.kube.objects import meta
from drainsafe.kube.retry import retry_on_conflict
from drainsafe.maintenance.progress import read_nodes, to_give_back
from drainsafe.maintenance.spec import GROUP_VERSION, PLURAL, UNCORDON, Uncordon

log = logging.getLogger(__name__)
Obj = dict[str, Any]
FINALIZER = "drainsafe.io/nodemaintenance"


def finalizers(obj: Obj) -> list[str]:
    return list(meta(obj).get("finalizers") or [])


def deleting(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def _path(name: str) -> str:
    return api_path(GROUP_VERSION, PLURAL, name=name)


async def _set_finalizers(client: KubeClient, name: str, *, held: bool) -> None:
    """Add or remove FINALIZER with the resourceVersion read (a merge patch replaces the
    list, so the compare-and-swap keeps another controller's finalizer; 409: again)."""
    async def decide(obj: Obj) -> None:
        now = finalizers(obj)
        if (FINALIZER in now) == held or (held and deleting(obj)):
            return  # already so; a deleting object may not gain one (422)
        new = [*now, FINALIZER] if held else [f for f in now if f != FINALIZER]
        await client.patch(_path(name), {"metadata": {
            "resourceVersion": meta(obj).get("resourceVersion"), "finalizers": new}})

    with contextlib.suppress(NotFound):  # gone already: nothing to hold or release
        await retry_on_conflict(client, _path(name), decide)


async def hold(client: KubeClient, name: str) -> None:
    await _set_finalizers(client, name, held=True)


async def give_back(client: KubeClient, maintenance: str, node: str) -> str:
    """One node's cordon and surges, if this NodeMaintenance's; what was done, for the log."""
    try:
        obj = await client.get(api_path("v1", "nodes", name=node))
    except NotFound:
        return f"{node}: gone"
    if cordoned_for(obj) != maintenance:
        return f"{node}: not cordoned by NodeMaintenance {maintenance}; left as it is"
    try:
        return (await uncordon(client, node)).message
    except NotOwned:
        restored = await restore_all_for_node(client, node)
        return f"{node}: cordoned before the operation, left cordoned; restored {restored}"


async def release(client: KubeClient, name: str) -> None:
    """Give back every node the deleted NodeMaintenance may hold, then its finalizer.
    Call with its node tasks ended. Raises on an API error (the finalizer stays; the next
    pass tries again)."""
    try:
        # read now, not from a cache: the status the ended tasks last wrote
        obj = await client.get(_path(name))
    except NotFound:
        return
    raw = (obj.get("spec") or {}).get("uncordon", "Immediately")
    mode: Uncordon = next((u for u in UNCORDON if u == raw), "Immediately")
    for node, progress in read_nodes(obj.get("status") or {}).items():
        if to_give_back(progress.state, mode):
            log.info("NodeMaintenance %s deleted: %s", name, await give_back(client, name, node))
    failpoint("maintenance.release.given-back")
    await _set_finalizers(client, name, held=False)
