"""What the NodeMaintenance lab tests read of the lab's store (issue 30): the operation's
status, a 0.1 s sampler of the budgets and the workload's capacity, the evictions from the
API server's request log, the external tool that marks nodes maintained, and the check that
the nodes and the workload are left as before. Shared by test_maintenance_phases_lab and
test_maintenance_kills_lab.

Every 0.1 s the sampler reads the store: nodes in progress (<= maxParallelNodes), selected
nodes unavailable (<= maxUnavailable), Ready pods of the workload (>= desired), the phase,
the workload's replicas. At every change (the store's listener, so that nothing brief is
missed): each selected node's drain record and its cordons, and each pod's UID and node.
Evictions are counted per pod UID."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from drainsafe.drain.ownership import OWNED_KEYS, PROGRESS, SURGE, Progress
from drainsafe.kube import KubeClient, api_path
from drainsafe.kube.objects import is_node_ready
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event
from drainsafe.lab.cluster import Lab
from drainsafe.maintenance.maintained import MAINTAINED
from drainsafe.maintenance.pending import pending_of
from drainsafe.maintenance.progress import NodeState, in_progress, read_nodes
from drainsafe.maintenance.spec import Uncordon

from .guardlab import ready_pods

PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
DEPLOYMENTS = BY_KEY["apps/deployments"]
MAINTENANCES = "drainsafe.io/nodemaintenances"
REPLICAS = 3  # the workload "llm" of both tests
WORKLOAD = "Deployment/default/llm"


def lab_store(lab: Lab) -> Any:
    assert lab.control_plane is not None
    return lab.control_plane.store


def maintenance_rt(lab: Lab) -> Any:
    rt = lab_store(lab).catalog.by_key(MAINTENANCES)
    assert rt is not None
    return rt


def nm_status(lab: Lab, name: str) -> dict[str, Any]:
    obj = lab_store(lab).peek(maintenance_rt(lab), "", name)
    return (obj or {}).get("status") or {}


def nm_states(lab: Lab, name: str) -> dict[str, NodeState]:
    return {n: p.state for n, p in read_nodes(nm_status(lab, name)).items()}


@dataclass
class Seen:
    most_in_progress: int = 0
    most_unavailable: int = 0
    lowest_ready: int = REPLICAS
    phases: list[str] = field(default_factory=list)
    cordoned: set[str] = field(default_factory=set)
    pods: dict[str, str] = field(default_factory=dict)  # name -> uid (every change)
    where: dict[str, str] = field(default_factory=dict)  # name -> node (every change)
    most_replicas: int = REPLICAS
    # Seen at every change of the nodes, not sampled: node -> its drain record's states,
    records: dict[str, set[str]] = field(default_factory=dict)
    # and node -> times it went from schedulable to cordoned (a second drain cordons again)
    cordons: collections.Counter[str] = field(default_factory=collections.Counter)


@asynccontextmanager
async def sampling(lab: Lab, name: str, nodes: list[str], uncordon: Uncordon
                   ) -> AsyncIterator[Seen]:
    """Samples every 0.1 s, every change of the nodes (the store's listener), and the API
    server's request log for evictions."""
    store = lab_store(lab)
    assert lab.control_plane is not None
    lab.control_plane.api.request_log = []
    seen, stop = Seen(), asyncio.Event()

    def pod(obj: dict[str, Any]) -> None:
        seen.pods[obj["metadata"]["name"]] = obj["metadata"]["uid"]
        if obj["spec"].get("nodeName"):
            seen.where[obj["metadata"]["name"]] = obj["spec"]["nodeName"]

    def changed(ev: Event) -> None:
        if ev.resource == PODS.key and ev.obj["metadata"].get("namespace") == "default":
            pod(ev.obj)
        node = ev.obj["metadata"]["name"]
        if ev.resource != NODES.key or node not in nodes or ev.type == "DELETED":
            return
        if PROGRESS in (ev.obj["metadata"].get("annotations") or {}):
            seen.records.setdefault(node, set()).add(Progress.of(ev.obj).state)
        was = ev.old is not None and bool(ev.old["spec"].get("unschedulable"))
        if ev.obj["spec"].get("unschedulable") and not was:
            seen.cordons[node] += 1

    async def sample() -> None:
        while not stop.is_set():
            states = nm_states(lab, name)
            seen.most_in_progress = max(seen.most_in_progress, sum(
                in_progress(s, uncordon) for s in states.values()))
            objs = [store.get(NODES, "", n) for n in nodes]
            down = [o["metadata"]["name"] for o in objs
                    if o["spec"].get("unschedulable") or not is_node_ready(o)]
            seen.cordoned.update(down)
            seen.most_replicas = max(seen.most_replicas, int(
                store.get(DEPLOYMENTS, "default", "llm")["spec"]["replicas"]))
            seen.most_unavailable = max(seen.most_unavailable, len(down))
            seen.lowest_ready = min(seen.lowest_ready, len(ready_pods(lab, "llm")))
            phase = nm_status(lab, name).get("phase")
            if phase and (not seen.phases or seen.phases[-1] != phase):
                seen.phases.append(phase)
            await asyncio.sleep(0.1)

    for obj in store.items(PODS, "default"):
        pod(obj)
    unlisten = store.listen(changed)
    task = asyncio.create_task(sample())
    try:
        yield seen
    finally:
        unlisten()
        stop.set()
        await task


def evictions(lab: Lab, seen: Seen) -> collections.Counter[tuple[str, str]]:
    """Eviction requests per (pod UID, its node) since sampling began."""
    assert lab.control_plane is not None
    log = lab.control_plane.api.request_log or []
    names = [path.split("/")[-2] for method, path in log
             if method == "POST" and path.endswith("/eviction")]
    return collections.Counter((seen.pods[n], seen.where[n]) for n in names)


async def eventually(what: str, done: Callable[[], bool], timeout: float = 90) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done():
        assert loop.time() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.1)


async def mark_awaiting(lab: Lab, name: str) -> None:
    """The external tool that finishes a node's maintenance: marks each node it waits for."""
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        while True:
            for node, state in nm_states(lab, name).items():
                ann = lab_store(lab).get(NODES, "", node)["metadata"].get("annotations") or {}
                if state == "AwaitingMaintenance" and ann.get(MAINTAINED) != name:
                    await client.patch(api_path("v1", "nodes", name=node),
                                       {"metadata": {"annotations": {MAINTAINED: name}}})
            await asyncio.sleep(0.2)


def left_as_before(lab: Lab, nodes: list[str]) -> None:
    store = lab_store(lab)
    for n in nodes:
        obj = store.get(NODES, "", n)
        assert not obj["spec"].get("unschedulable"), n
        ann = obj["metadata"].get("annotations") or {}
        assert not set(OWNED_KEYS) & set(ann), (n, ann)
        assert pending_of(obj) is None, (n, obj["spec"].get("taints"))  # taken off
    dep = store.get(DEPLOYMENTS, "default", "llm")
    assert dep["spec"]["replicas"] == REPLICAS
    assert SURGE not in (dep["metadata"].get("annotations") or {})

