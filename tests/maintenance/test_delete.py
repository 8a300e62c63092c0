"""`drainsafe maintenance delete --wait`'s lines: per node still held, given back, or left
cordoned on purpose, until the object is gone."""

from __future__ import annotations

from typing import Any

from drainsafe.maintenance.delete import release_lines


def _obj(uncordon: str, *nodes: tuple[str, str], finalizer: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": "m", "deletionTimestamp": "2026-12-06T03:00:00Z",
                         "finalizers": ["drainsafe.io/nodemaintenance"] if finalizer else []},
            "spec": {"uncordon": uncordon},
            "status": {"nodes": [{"name": n, "state": s} for n, s in nodes]}}


def _node(name: str, held_by: str = "") -> dict[str, Any]:
    ann = {"drainsafe.io/cordoned-for": f"NodeMaintenance/{held_by}"} if held_by else {}
    return {"metadata": {"name": name, "annotations": ann}}


def test_release_lines_per_node() -> None:
    obj = _obj("Immediately", ("a", "Draining"), ("b", "Uncordoned"), ("c", "Pending"),
               ("d", "Failed"), ("e", "AwaitingMaintenance"))
    nodes = {"a": _node("a", "m"), "d": _node("d", "other"), "e": _node("e")}
    assert release_lines("m", obj, nodes) == [
        "m: deleting, finalizer held",
        "  a Draining: held: cordoned and recorded, surges to restore",
        "  d Failed: given back",  # another operation's record: not ours to hold
        "  e AwaitingMaintenance: given back"]
    never = _obj("Never", ("a", "Drained"), finalizer=False)
    assert release_lines("m", never, {"a": _node("a", "m")}) == [
        "m: deleting, finalizer removed",
        "  a Drained: left cordoned on purpose (uncordon: Never; drainsafe uncordon gives "
        "it back)"]
    assert release_lines("m", _obj("Immediately", ("z", "Cordoned")), {}) == [
        "m: deleting, finalizer held", "  z Cordoned: gone"]
    assert release_lines("m", None, {}) == ["m: gone (finalizer removed)"]
