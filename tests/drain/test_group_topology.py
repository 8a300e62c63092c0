"""A LeaderWorkerSet with exclusive placement (lws v0.10.0's exclusive-topology annotation)
drained in the lab: room counted in whole topology domains (drain.domains).

8 nodes of one GPU in 4 racks of 2 (node label `rack`), an LWS of 2 groups of 2 (a leader
and a worker, one GPU each) with `leaderworkerset.sigs.k8s.io/exclusive-topology: rack`:
the lab's scheduler filters the leader's affinity terms (drainsafe.podaffinity) and the
lab's LWS controller pins the workers to the leader's rack, so each group takes a rack.

1. `drainsafe drain` of a worker's node alone is refused before anything changes: once its
   group is taken down, the rack-mate has room for the recreated leader but not for the
   worker, and lws would pin the worker to that rack (Pending); the refusal says to drain
   the rack's two nodes together.
2. `drainsafe drain` of the rack's two nodes: a stand-in group takes a free rack, the
   group is recreated in the other free rack, the stand-in goes; whole Ready groups never
   drop below 2 (every pod event), the LWS ends at 2 groups with no drainsafe annotation.
3. Group 1's rack next: the stand-in would take the last free rack and nothing is left for
   the recreation (rack a is cordoned): refused, naming group 1 and its floor evict-first.
4. The trap shown: group 1's worker node cordoned and its worker evicted (kubectl drain's
   way) strands the group: the recreated leader returns to the rack-mate and the worker,
   pinned to that rack, stays Unschedulable; 1 Ready group.

Real processes: the lab's API server, scheduler, StatefulSet and LWS controllers and
kubelets, the CLI as a child process for the drain (the refusals run its drain_fleet
in-process); virtual pods (no model processes), start-up 1 s.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from drainsafe.drain.fleet import drain_fleet
from drainsafe.drain.settings import DrainSettings
from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.kube.objects import LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION, LWS_WORKER_INDEX_LABEL
from drainsafe.lab.cluster import VIRTUAL

from .labkit import get_node, gpu_lab, pods_of
from .test_group_faults import ReadyGroups, group_index, lws_object, wait_groups

RACKS = {f"node-{i}": "abcd"[i // 2] for i in range(8)}


def exclusive_lws(name: str) -> dict[str, Any]:
    annotations = {**VIRTUAL, "lab.drainsafe.io/startup-seconds": "1",
                   "lab.drainsafe.io/exit-after-sigterm-seconds": "0.3"}
    gpu = {"requests": {"cpu": "10m", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    template = {"metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {"terminationGracePeriodSeconds": 5, "containers": [
                    {"name": "main", "image": "lab/virtual", "resources": gpu}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION: "rack"}},
            "spec": {"replicas": 2,
                     "leaderWorkerTemplate": {"size": 2, "workerTemplate": template}}}


async def refused(client: KubeClient, *nodes: str) -> list[dict[str, Any]]:
    """drain_fleet in-process (what the CLI runs; a child process costs ~2 s here): its
    refusal's blockers, as the JSON output has them."""
    fleet = await drain_fleet(client, nodes, DrainSettings(timeout=60))
    assert not fleet.ok and fleet.reports and fleet.reports[0].refused, fleet
    plan = fleet.reports[0].plan
    assert plan is not None
    return [dict(b) for b in plan.to_dict()["blockers"]]


async def drain(kubeconfig: Path, *nodes: str) -> tuple[int, dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", "drain", *nodes, "--kubeconfig", str(kubeconfig),
        "-o", "json", "--timeout", "90",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(150):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    assert out, err.decode()[-3000:]
    return proc.returncode, json.loads(out)


def racks_of(pods: list[dict[str, Any]]) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for p in pods:
        out.setdefault(group_index(p), set()).add(RACKS[p["spec"]["nodeName"]])
    return out


async def test_exclusive_groups_drain_rack_by_rack_into_free_racks(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=8, gpus=1) as lab, \
            KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        for node, rack in RACKS.items():
            await client.patch(api_path("v1", "nodes", name=node),
                               {"metadata": {"labels": {"rack": rack}}})
        await lab.install_leaderworkerset()
        await lab.apply(exclusive_lws("tg"))
        await wait_groups(client, "tg", 2)
        pods = await pods_of(client, "tg")
        placed = racks_of(pods)
        assert all(len(r) == 1 for r in placed.values()) and placed[0] != placed[1], placed
        by_name = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        leader, worker = by_name["tg-0"], by_name["tg-0-1"]
        assert RACKS[leader] == RACKS[worker]
        rack = sorted([leader, worker])

        # 1. The worker's node alone: refused up front, the rack's nodes named together.
        blockers = await refused(client, worker)
        assert [b["kind"] for b in blockers] == ["no-domain"], blockers
        assert "has room for the leader of group 0's recreation" in blockers[0]["message"]
        assert blockers[0]["fix"].endswith(f"drainsafe drain {' '.join(rack)}")
        assert not (await get_node(client, worker))["spec"].get("unschedulable")

        # 2. The rack together: a stand-in group in a free rack, the group recreated in
        # the other, never fewer than 2 whole Ready groups.
        watcher = ReadyGroups()
        informer = Informer(client, api_path("v1", "pods", namespace="default"),
                            on_event=watcher.on_event)
        await informer.start()
        watcher.armed = True
        watcher.observe()
        try:
            code, doc = await drain(lab.kubeconfig, *rack)
        finally:
            await informer.stop()
        assert code == 0, doc
        notes = doc["nodes"][0]["plan"]["notes"]
        assert any("its stand-in group in rack=" in n for n in notes), notes
        assert watcher.lowest is not None and watcher.lowest >= 2, watcher.lowest
        obj = await lws_object(client, "tg")
        assert obj["spec"]["replicas"] == 2
        assert not [a for a in obj["metadata"].get("annotations") or {}
                    if a.startswith("drainsafe.io/")]

        def settled(cache: dict[str, dict[str, Any]]) -> bool:
            # The stand-in group removed by lws after the restore (the highest index).
            return sorted({group_index(p) for p in cache.values()}) == [0, 1] and len(cache) == 4

        async with Informer(client, api_path("v1", "pods", namespace="default"),
                            label_selector="app=tg") as now:
            await now.wait_for(settled, timeout=30, what="the stand-in gone")
        await wait_groups(client, "tg", 2)
        after = racks_of(await pods_of(client, "tg"))
        assert all(len(r) == 1 for r in after.values()), after
        assert after[1] == placed[1] and after[0] not in (placed[0], placed[1]), after

        # 3. Group 1's rack: the stand-in would take the last free rack; nothing is left
        # for the recreation (rack a is drained). Refused, nothing changed.
        group1 = sorted(p["spec"]["nodeName"] for p in await pods_of(client, "tg")
                        if group_index(p) == 1)
        [blocker] = await refused(client, *group1)
        assert blocker["kind"] == "no-domain"
        assert "group 1 cannot surge" in blocker["message"]
        assert "evict-first would leave 1/2 groups Ready" in blocker["message"]
        assert (await lws_object(client, "tg"))["spec"]["replicas"] == 2
        for node in group1:
            assert not (await get_node(client, node))["spec"].get("unschedulable")
        assert {p["metadata"]["labels"][LWS_WORKER_INDEX_LABEL]
                for p in await pods_of(client, "tg")} == {"0", "1"}

        # 4. What the trap refusal prevents, done kubectl drain's way (cordon, then the
        # Eviction API) on group 1's worker node alone: lws takes the group down, the
        # recreated leader lands back on the rack-mate (first by name among the free
        # nodes), and lws pins the worker to that rack, whose other node is cordoned.
        by_name = {p["metadata"]["name"]: p for p in await pods_of(client, "tg")}
        worker1 = by_name["tg-1-1"]
        old_leader = by_name["tg-1"]["metadata"]["uid"]
        await client.patch(api_path("v1", "nodes", name=worker1["spec"]["nodeName"]),
                           {"spec": {"unschedulable": True}})
        await client.evict("default", "tg-1-1", uid=worker1["metadata"]["uid"])

        def stranded(cache: dict[str, dict[str, Any]]) -> bool:
            leader = cache.get("default/tg-1") or {}
            worker = cache.get("default/tg-1-1") or {}
            return leader.get("metadata", {}).get("uid") not in (None, old_leader) \
                and bool(leader.get("spec", {}).get("nodeName")) and any(
                    c.get("reason") == "Unschedulable"
                    for c in worker.get("status", {}).get("conditions") or [])

        async with Informer(client, api_path("v1", "pods", namespace="default"),
                            label_selector="app=tg") as now:
            cache = await now.wait_for(lambda c: stranded(c) and dict(c), timeout=30,
                                       what="group 1's worker Unschedulable")
        leader1, worker1 = cache["default/tg-1"], cache["default/tg-1-1"]
        assert RACKS[leader1["spec"]["nodeName"]] == RACKS[group1[0]]
        assert worker1["spec"]["nodeSelector"] == {"rack": RACKS[group1[0]]}
        [cond] = [c for c in worker1["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert "node(s) didn't match Pod's node affinity/selector" in cond["message"], cond
        assert (await lws_object(client, "tg")).get("status", {}).get("readyReplicas") == 1
