"""`drainsafe maintenance delete NAME [--wait]`: end a NodeMaintenance and give back its nodes.

The DELETE only marks the object (metadata.deletionTimestamp): the controller's leader then
stops its node tasks, gives back each node it still holds (its surges restored, then its
cordon and record removed), and removes its finalizer (controller.maintenance_release;
docs/maintenance.md, Pause and delete). `--wait` follows that give-back until the object
is gone, as `kubectl delete --wait` waits for the finalizers, and says per node what is
still held: a line per change, read from watches of the object and of the nodes (no
polling). A node Drained under uncordon: Never stays cordoned on purpose and is said so.

`release_lines` is the pure part (what to print for one state of the object and nodes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from drainsafe.shell import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def release_lines(name: str, obj: Mapping[str, Any] | None,
                  nodes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What `delete --wait` shows for the object (None: gone) and the nodes by name."""
    # here, not at the top: `drainsafe --help` imports this module to register the command
    from drainsafe.controller.maintenance_release import FINALIZER
    from drainsafe.drain.ownership import cordoned_for
    from drainsafe.maintenance.progress import is_done, read_nodes, to_give_back
    from drainsafe.maintenance.spec import UNCORDON, Uncordon

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


def register(sub: Any) -> argparse.ArgumentParser:
    from drainsafe.maintenance import cli

    p: argparse.ArgumentParser = sub.add_parser(
        "delete", help="delete a NodeMaintenance; the controller gives back its nodes")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--wait", action="store_true",
                   help="follow the give-back until the object is gone")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="with --wait: exit 1 if still there after S seconds (default 300)")
    p.set_defaults(handler=lambda args: cli._run(args, lambda c: _delete(c, args)))
    return p


async def _delete(client: Any, args: argparse.Namespace) -> int:
    from drainsafe.kube import Informer, NotFound, api_path
    from drainsafe.maintenance import cli

    if await cli._get_or_none(client, args.name) is None:
        cli._err("delete", f"NodeMaintenance {args.name} not found")
        return EXIT_USAGE
    changed = asyncio.Event()
    maintenances = Informer(client, cli._path(), on_event=lambda *_: changed.set())
    nodes = Informer(client, api_path("v1", "nodes"), on_event=lambda *_: changed.set())
    if args.wait:  # watching first: no change between the DELETE and the watch is missed
        await maintenances.start()
        await nodes.start()
    try:
        with contextlib.suppress(NotFound):  # gone meanwhile
            await client.request("DELETE", cli._path(args.name))
        print(f"nodemaintenance.drainsafe.io/{args.name} deleted")
        if not args.wait:
            return EXIT_OK
        shown: list[str] = []
        try:
            async with asyncio.timeout(args.timeout):
                while True:
                    changed.clear()
                    obj = cli._find(maintenances.cache, args.name)
                    lines = release_lines(args.name, obj, {
                        str(n["metadata"]["name"]): n for n in nodes.cache.values()})
                    for line in lines:
                        if line not in shown:
                            print(line, flush=True)
                    shown = lines
                    if obj is None:
                        return EXIT_OK
                    await changed.wait()
        except TimeoutError:
            cli._err("delete", f"NodeMaintenance {args.name} still there after "
                     f"{args.timeout:g}s (is drainsafe controller running?)")
            return EXIT_FAILED
    finally:
        await maintenances.stop()
        await nodes.stop()
