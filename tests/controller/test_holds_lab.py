"""Two replicas holding the same pod at the same instant, against the lab's API server: the
start of the hold is written once and every replica reads that one value, at once, without
anything written into an informer cache that the server did not send."""

from __future__ import annotations

import asyncio
import copy
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from drainsafe.controller.clock import Clock
from drainsafe.controller.decision import Hold, Release, ReleaseReason
from drainsafe.controller.events import EventRecorder
from drainsafe.controller.holds import Holds
from drainsafe.controller.metrics import GuardMetrics
from drainsafe.controller.record import HOLD_ANNOTATION, RELEASED_ANNOTATION, held_since
from drainsafe.controller.view import ClusterView
from drainsafe.kube import KubeClient, api_path
from drainsafe.kube.objects import rfc3339
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.controlplane import ControlPlane

PODS = BY_KEY["pods"]
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "llm-a", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "x"}]}}


class Replica:
    def __init__(self, kubeconfig: pathlib.Path, wall: float) -> None:
        self.client = KubeClient.from_kubeconfig(str(kubeconfig))
        self.clock = Clock(wall=lambda: wall)
        self.metrics = GuardMetrics()
        self.view = ClusterView(self.client, self.clock)
        self.events = EventRecorder(self.client, instance=f"r-{wall}", wall=self.clock.wall)
        self.holds = Holds(self.client, self.view, self.events, self.metrics, self.clock)

    def count(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels or None)
        return value or 0.0

    async def close(self) -> None:
        await self.events.stop()
        await self.view.stop()
        await self.client.aclose()


@pytest.fixture
async def replicas(tmp_path: pathlib.Path) -> AsyncIterator[tuple[ControlPlane, list[Replica]]]:
    cp = ControlPlane(tmp_path / "state", bookmark_seconds=0.5)
    await cp.start()
    made: list[Replica] = []
    try:
        cp.write_kubeconfig(tmp_path / "kubeconfig")
        made = [Replica(tmp_path / "kubeconfig", wall) for wall in (1.8e9, 1.8e9 + 77)]
        await made[0].client.post(api_path("v1", "pods", namespace="default"), POD)
        for r in made:
            await r.view.start()
        yield cp, made
    finally:
        for r in made:
            await r.close()
        await cp.stop()


def _frozen(view: ClusterView) -> dict[str, tuple[Any, Any]]:
    return {k: (obj, copy.deepcopy(obj)) for k, obj in view.pod_informer.cache.items()}


def _untouched(view: ClusterView, before: dict[str, tuple[Any, Any]]) -> bool:
    """No cached object was changed in place (the informer replaces what the server
    changes; only a write into the cache would change an object it holds)."""
    return all(obj == snapshot for obj, snapshot in before.values())


async def test_two_replicas_agree_on_when_a_hold_began(
        replicas: tuple[ControlPlane, list[Replica]]) -> None:
    cp, (a, b) = replicas
    pod = a.view.pod_informer.get("default/llm-a")
    assert pod is not None and pod == b.view.pod_informer.get("default/llm-a")
    frozen = [_frozen(a.view), _frozen(b.view)]
    hold = Hold("drainsafe guard: holding", 3, "stand-in")
    await asyncio.gather(a.holds.begin(copy.deepcopy(pod), hold),
                         b.holds.begin(copy.deepcopy(pod), hold))
    stored = cp.store.get(PODS, "default", "llm-a")["metadata"]["annotations"][HOLD_ANNOTATION]
    assert stored in (rfc3339(a.clock.wall()), rfc3339(b.clock.wall()))
    # Written once: one first-hold metric between them (the Event goes with it).
    assert a.count("drainsafe_guard_holds_total") + b.count("drainsafe_guard_holds_total") == 1
    # Both read the stored start at once, whatever their own watch has delivered.
    for r in (a, b):
        seen = r.view.pods()["default/llm-a"]
        assert seen["metadata"]["annotations"][HOLD_ANNOTATION] == stored
        assert held_since(seen) == held_since(cp.store.get(PODS, "default", "llm-a"))
    assert all(_untouched(r.view, f) for r, f in zip((a, b), frozen, strict=True))

    # Released by both at once (the reviewer and the leader): once, with one reason.
    current = a.view.pods()["default/llm-a"]
    release = Release(ReleaseReason.NO_ROOM, "no room")
    await asyncio.gather(a.holds.release(copy.deepcopy(current), release, None),
                         b.holds.release(copy.deepcopy(current), release, None))
    notes = cp.store.get(PODS, "default", "llm-a")["metadata"]["annotations"]
    assert notes[RELEASED_ANNOTATION] == "no-room" and notes[HOLD_ANNOTATION] == stored
    assert sum(r.count("drainsafe_guard_releases_total", reason="no-room")
               for r in (a, b)) == 1
    for r in (a, b):
        assert RELEASED_ANNOTATION in r.view.pods()["default/llm-a"]["metadata"]["annotations"]
    assert all(_untouched(r.view, f) for r, f in zip((a, b), frozen, strict=True))
