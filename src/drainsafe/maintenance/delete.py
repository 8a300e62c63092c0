"""`drainsafe maintenance delete NAME [--wait]`: end a NodeMaintenance and give back its nodes.

The DELETE only marks the object (metadata.deletionTimestamp): the controller's leader then
stops its node tasks, gives back each node it still holds (its surges restored, then its
cordon and record removed), and removes its finalizer (controller.maintenance_release;
docs/maintenance.md, Pause and delete). `--wait` follows that give-back until the object
is gone, as `kubectl delete --wait` waits for the finalizers, and says per node what is
still held: a line per change, read from watches of the object and of the nodes (no
polling). A node Drained under uncordon: Never stays cordoned on purpose and is said so.

This module is the pure part (what to print for one state of the object and the nodes);
the command's shell is maintenance.cli's run_delete.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drainsafe.controller.maintenance_release import FINALIZER
from drainsafe.drain.ownership import cordoned_for
from drainsafe.maintenance.progress import is_done, read_nodes, to_give_back
from drainsafe.maintenance.spec import UNCORDON, Uncordon


def release_lines(name: str, obj: Mapping[str, Any] | None,
                  nodes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What `delete --wait` shows for the object (None: gone) and the nodes by name."""
    if obj is None:
        return [f"{name}: gone (finalizer removed)"]
    meta = obj.get("metadata") or {}
    held = FINALIZER in (meta.get("finalizers") or [])
    lines = [f"{name}: {'deleting' if meta.get('deletionTimestamp') else 'not deleted yet'}, "
             f"finalizer {'held' if held else 'removed'}"]
    raw = (obj.get("spec") or {}).get("uncordon", "Immediately")
    mode: Uncordon = next((u for u in UNCORDON if u == raw), "Immediately")
    for node, p in read_nodes(obj.get("status") or {}).items():
        if p.state == "Drained" and is_done(p.state, mode):
            what = "left cordoned on purpose (uncordon: Never; drainsafe uncordon gives it back)"
        elif not to_give_back(p.state, mode):
            continue
        elif node not in nodes:
            what = "gone"
        elif cordoned_for(nodes[node]) == name:
            what = "held: cordoned and recorded, surges to restore"
        else:
            what = "given back"
        lines.append(f"  {node} {p.state}: {what}")
    return lines
