"""Which pod a ReplicaSet removes when a Deployment scales down by one, with real kubelets and
processes: the unassigned one, then the not-Ready one, then the one with the lowest
pod-deletion-cost, and never a Ready pod that serves while one that does not exists."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from conftest import wait_until
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event
from drainsafe.lab.cluster import Lab
from drainsafe.lab.controllers.ranking import POD_DELETION_COST

PODS = BY_KEY["pods"]
SERVER = [sys.executable, "-c", "import signal, sys, time\n"
          "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
          "while True: time.sleep(0.1)"]


def web(replicas: int, gates: Path) -> dict[str, Any]:
    """A Deployment whose pod P is Ready only while the file gates/P exists."""
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                     "terminationGracePeriodSeconds": 5,
                     "containers": [{
                         "name": "c", "command": SERVER,
                         "env": [{"name": "POD_NAME", "valueFrom": {
                             "fieldRef": {"fieldPath": "metadata.name"}}}],
                         "readinessProbe": {
                             "exec": {"command": ["sh", "-c", f'test -e "{gates}/$POD_NAME"']},
                             "periodSeconds": 1}}]}}}}


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


class Removals:
    """Every pod of the app the ReplicaSet starts deleting, and whether it was Ready then."""

    def __init__(self, lab: Lab) -> None:
        self.cp = lab.control_plane
        self.removed: dict[str, bool] = {}
        self.unlisten = self.cp.store.listen(self.observe)

    def observe(self, ev: Event) -> None:
        if ev.resource != "pods" or ev.obj is None:
            return
        meta = ev.obj["metadata"]
        if (meta.get("labels") or {}).get("app") != "web":
            return
        if (meta.get("deletionTimestamp") or ev.type == "DELETED") \
                and meta["name"] not in self.removed:
            self.removed[meta["name"]] = is_ready(ev.old if ev.old is not None else ev.obj)


def active(lab: Lab) -> list[dict[str, Any]]:
    return [p for p in lab.control_plane.store.items(PODS, "default")
            if (p["metadata"].get("labels") or {}).get("app") == "web"
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


async def scale(lab: Lab, replicas: int) -> None:
    assert lab.client is not None
    await lab.client.patch(Deployment, "web", {"spec": {"replicas": replicas}},
                           namespace="default", patch_type=PatchType.MERGE)


async def wait_active(lab: Lab, count: int, test: Any = lambda pods: True) -> list[str]:
    await wait_until(lab.control_plane, lambda: len(active(lab)) == count and test(active(lab)),
                     what=f"{count} active pods")
    return sorted(p["metadata"]["name"] for p in active(lab))


async def serving(lab: Lab, gates: Path, names: list[str]) -> None:
    for name in names:
        (gates / name).touch()
    await lab.wait_available("default", "web", timeout=60)


async def test_scale_down_by_one_removes_the_pod_that_does_not_serve(
        lab: Lab, tmp_path: Path) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    assert lab.client is not None
    await lab.apply(web(2, gates))
    old = await wait_active(lab, 2)
    await serving(lab, gates, old)
    removals = Removals(lab)
    try:
        # A third pod that runs but never turns Ready: it is the one removed.
        await scale(lab, 3)
        names = await wait_active(lab, 3, lambda pods: all(
            (p.get("status") or {}).get("phase") == "Running" for p in pods))
        (unready,) = set(names) - set(old)
        await scale(lab, 2)
        await wait_active(lab, 2)
        assert removals.removed == {unready: False}

        # Both nodes cordoned: the surge pod stays unscheduled (Pending) and goes first,
        # although it is the newest and the others are Ready and serving.
        for node in ("node-0", "node-1"):
            await lab.client.patch(Node, node, {"spec": {"unschedulable": True}})
        await scale(lab, 3)
        names = await wait_active(lab, 3)
        (pending,) = set(names) - set(old)
        await scale(lab, 2)
        await wait_active(lab, 2)
        assert removals.removed[pending] is False
        assert set(removals.removed) == {unready, pending}
        for node in ("node-0", "node-1"):
            await lab.client.patch(Node, node, {"spec": {"unschedulable": False}})

        # All three Ready: the pod with the lowest pod-deletion-cost goes, here an old one
        # (without the cost it would be the surge pod, Ready most recently).
        await scale(lab, 3)
        names = await wait_active(lab, 3)
        (surge,) = set(names) - set(old)
        await serving(lab, gates, [surge])
        await lab.client.patch(Pod, old[0], {"metadata": {"annotations": {
            POD_DELETION_COST: "-100"}}}, namespace="default")
        await scale(lab, 2)
        remaining = await wait_active(lab, 2)
        assert sorted(remaining) == sorted([old[1], surge])
        assert removals.removed[old[0]] is True  # Ready, chosen for its cost
        # No Ready pod was removed while a pod that did not serve existed.
        assert [name for name, ready in removals.removed.items() if ready] == [old[0]]
    finally:
        removals.unlisten()
