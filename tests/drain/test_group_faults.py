"""A LeaderWorkerSet's group surge under faults: the CLI stopped after the scale-up
(SIGINT), after the first eviction (SIGKILL) and once every group's eviction was accepted,
while the groups are recreated (SIGKILL, before the restore), then run again.

Each rerun continues from the records (the surge on the LWS, the evictions on the node):
the record is never rewritten, one pod of each affected group is evicted exactly once
through the Eviction API (judged by what the API server accepted, behind a proxy),
drainsafe sends no DELETE (lws's own deletion of the rest of each group does not pass the
proxy), the count of whole Ready groups never drops below the recorded replicas, and at the
end the LWS is back at exactly the recorded scale with no drainsafe annotation, its groups
recreated off the node under their indices. Virtual pods (no processes), start-up 2 s.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from drainsafe.drain import ownership
from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.kube.objects import (
    LWS_WORKER_INDEX_LABEL,
    is_ready,
    is_terminating,
    lws_group_of,
)
from drainsafe.lab.cluster import VIRTUAL

from .faultproxy import FaultProxy, in_front_of
from .labkit import get_node, gpu_lab, pdb, pods_of
from .test_faults import assert_each_evicted_once, on_node
from .test_surge_faults import drain_argv, rerun, run_until

GROUPS, SIZE = 3, 2
LWS_PATH = ("leaderworkerset.x-k8s.io/v1", "leaderworkersets")


def virtual_lws(name: str) -> dict[str, Any]:
    annotations = {**VIRTUAL, "lab.drainsafe.io/startup-seconds": "2",
                   "lab.drainsafe.io/exit-after-sigterm-seconds": "0.5"}
    template = {"metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {"terminationGracePeriodSeconds": 5,
                         "containers": [{"name": "main", "image": "lab/virtual"}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": GROUPS,
                     "leaderWorkerTemplate": {"size": SIZE, "workerTemplate": template}}}


def group_index(pod: dict[str, Any]) -> int:
    group = lws_group_of(pod)
    assert group is not None, pod["metadata"]["name"]
    return group[1]


async def lws_object(client: KubeClient, name: str) -> dict[str, Any]:
    return await client.get(api_path(*LWS_PATH, namespace="default", name=name))


class ReadyGroups:
    """The lowest count of whole Ready groups seen (every pod event)."""

    def __init__(self) -> None:
        self.pods: dict[str, tuple[int, bool]] = {}
        self.lowest: int | None = None
        self.armed = False

    def on_event(self, kind: str, pod: dict[str, Any]) -> None:
        group = lws_group_of(pod)
        name = str((pod.get("metadata") or {}).get("name"))
        if group is None:
            return
        if kind == "DELETED":
            self.pods.pop(name, None)
        else:
            self.pods[name] = (group[1], is_ready(pod) and not is_terminating(pod))
        self.observe()

    def observe(self) -> None:
        per: dict[int, int] = {}
        for g, ready in self.pods.values():
            per[g] = per.get(g, 0) + ready
        count = sum(1 for n in per.values() if n >= SIZE)
        if self.armed and (self.lowest is None or count < self.lowest):
            self.lowest = count


async def wait_groups(client: KubeClient, name: str, groups: int) -> None:
    def ready(cache: dict[str, dict[str, Any]]) -> bool:
        st = (cache.get(f"default/{name}") or {}).get("status") or {}
        return st.get("readyReplicas") == groups == st.get("replicas")

    async with Informer(client, api_path(*LWS_PATH, namespace="default")) as informer:
        await informer.wait_for(ready, timeout=90, what=f"{name}: {groups} Ready groups")


async def test_stopped_after_scale_up_and_after_an_eviction_then_rerun(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=0) as lab:
        await lab.install_leaderworkerset()
        await lab.apply(virtual_lws("vg"), pdb("vg", "vg", maxUnavailable=SIZE))
        proxy: FaultProxy = in_front_of(lab.kubeconfig)
        watcher = ReadyGroups()
        async with proxy.running(), KubeClient.from_kubeconfig(str(lab.kubeconfig)) as direct:
            await wait_groups(direct, "vg", GROUPS)
            informer = Informer(direct, api_path("v1", "pods", namespace="default"),
                                on_event=watcher.on_event)
            await informer.start()
            watcher.armed = True
            watcher.observe()
            try:
                cfg = proxy.kubeconfig(lab.kubeconfig, tmp_path / "proxy.kubeconfig")
                pods = await pods_of(direct, "vg")
                node = sorted(p["spec"]["nodeName"] for p in pods
                              if p["metadata"]["labels"][LWS_WORKER_INDEX_LABEL] != "0")[0]
                here = on_node(pods, node)
                groups = sorted({group_index(p) for p in here})
                # One pod per affected group: its first by name (the leader when here).
                expected = {"default/" + min(p["metadata"]["name"] for p in here
                                             if group_index(p) == g) for g in groups}
                argv = drain_argv(node, cfg)

                async def surged() -> bool:
                    return (await lws_object(direct, "vg"))["spec"]["replicas"] == \
                        GROUPS + len(groups)

                # 1. Ctrl-C right after the scale-up: the surge stays, recorded.
                code = await run_until(argv, surged, signal.SIGINT)
                assert code == 130
                record = ownership.SurgeRecord.of(await lws_object(direct, "vg"))
                assert record is not None and record.replicas == GROUPS and record.node == node
                # Every pod of the affected groups is recorded (all get new UIDs).
                assert {k.split("/")[1] for k in record.pods} == {
                    p["metadata"]["name"] for p in pods if group_index(p) in groups}
                assert proxy.evictions_accepted() == {}

                # 2. SIGKILL after the first eviction.
                async def one_evicted() -> bool:
                    n = await get_node(direct, node)
                    return len(ownership.Progress.of(n).evicted) >= 1

                await run_until(argv, one_evicted, signal.SIGKILL)
                assert ownership.SurgeRecord.of(await lws_object(direct, "vg")) == record

                # 3. SIGKILL once every group's eviction was accepted, while the groups are
                # recreated: the rerun must not restore (and so remove a stand-in group)
                # before they are whole and Ready.
                async def all_evicted() -> bool:
                    return len(proxy.evictions_accepted()) >= len(expected)

                await run_until(argv, all_evicted, signal.SIGKILL)
                obj = await lws_object(direct, "vg")
                assert ownership.SurgeRecord.of(obj) == record
                assert obj["spec"]["replicas"] == GROUPS + len(groups)

                doc = await rerun(argv)
                assert doc["ok"] is True
                obj = await lws_object(direct, "vg")
                assert obj["spec"]["replicas"] == GROUPS
                assert not [a for a in obj["metadata"].get("annotations") or {}
                            if a.startswith("drainsafe.io/")]
                await wait_groups(direct, "vg", GROUPS)

                def settled(cache: dict[str, dict[str, Any]]) -> bool:
                    # The stand-in group removed by lws after the restore (highest index).
                    return sorted({group_index(p) for p in cache.values()}) == \
                        list(range(GROUPS))

                async with Informer(direct, api_path("v1", "pods", namespace="default"),
                                    label_selector="app=vg") as pods_now:
                    await pods_now.wait_for(settled, timeout=30, what="the stand-in gone")
                now = await pods_of(direct, "vg")
                assert not on_node(now, node)
                # The affected groups were recreated whole: every recorded pod has a new UID.
                uids = {f"default/{p['metadata']['name']}": p["metadata"]["uid"] for p in now}
                assert all(uids.get(k) not in (None, uid) for k, uid in record.pods.items())
            finally:
                await informer.stop()
        assert_each_evicted_once(proxy, expected)
        assert watcher.lowest is not None and watcher.lowest >= GROUPS, watcher.lowest


async def test_restart_policy_none_evicts_each_pod_here_and_keeps_the_rest_of_the_group(
        tmp_path: Path) -> None:
    """restartPolicy None (lws v0.10.0: "only the failed pod will be restarted"): every pod
    of the group on the node is evicted and recreated alone under its name, but a leader
    here is evicted alone for its group (its deletion takes its workers: their StatefulSet
    is owned by the leader pod); the group's other pods keep their UIDs; whole Ready groups
    never drop below the recorded replicas."""
    async with gpu_lab(tmp_path, nodes=3, gpus=0) as lab:
        await lab.install_leaderworkerset()
        manifest = virtual_lws("vn")
        manifest["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "None"
        await lab.apply(manifest, pdb("vn", "vn", maxUnavailable=SIZE))
        watcher = ReadyGroups()
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            await wait_groups(client, "vn", GROUPS)
            informer = Informer(client, api_path("v1", "pods", namespace="default"),
                                on_event=watcher.on_event)
            await informer.start()
            watcher.armed = True
            watcher.observe()
            try:
                pods = await pods_of(client, "vn")
                node = sorted(p["spec"]["nodeName"] for p in pods
                              if p["metadata"]["labels"][LWS_WORKER_INDEX_LABEL] != "0")[0]
                here = {p["metadata"]["name"] for p in on_node(pods, node)}
                before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
                doc = await rerun(drain_argv(node, lab.kubeconfig))
                assert doc["ok"] is True
                reports = {p["name"]: p for n in doc["nodes"] for p in n["pods"]}
                leaders_moved = {n for n in here if n.count("-") == 1}
                taken = {n for n in here
                         if any(n.startswith(f"{lead}-") for lead in leaders_moved)}
                assert {n for n, p in reports.items() if p["outcome"] == "evicted"} == \
                    here - taken, reports
                await wait_groups(client, "vn", GROUPS)
                now = {p["metadata"]["name"]: p["metadata"]["uid"]
                       for p in await pods_of(client, "vn")
                       if group_index(p) < GROUPS and not is_terminating(p)}
                # Pods elsewhere kept their UIDs unless an evicted leader took its workers.
                kept = {n for n in before if n not in here
                        and not any(n.startswith(f"{lead}-") for lead in leaders_moved)}
                assert all(now.get(n) == before[n] for n in kept), (kept, before, now)
                assert all(now.get(n) not in (None, before[n]) for n in here)
            finally:
                await informer.stop()
        assert watcher.lowest is not None and watcher.lowest >= GROUPS, watcher.lowest
