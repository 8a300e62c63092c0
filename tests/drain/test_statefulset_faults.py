"""A StatefulSet's surge under faults: the CLI stopped after the scale-up (SIGINT), after an
eviction (SIGKILL), after the last eviction while the recreations start (SIGKILL, before
the restore) and in the restore (SIGKILL), then run again.

Each rerun continues from the records (the surge on the StatefulSet, the evictions on the
node): the record is never rewritten, every old pod is evicted exactly once through the
Eviction API (judged by what the API server accepted, behind a proxy), drainsafe sends no
DELETE, the Ready count never drops below the recorded replicas, and at the end the
StatefulSet is back at exactly the recorded scale with no drainsafe annotation, its old
pods recreated under their names on other nodes. The only Ready pods removed without an
eviction are the stand-ins, the highest ordinals, which the StatefulSet controller removes
when the scale is restored (pkg/controller/statefulset/stateful_set_control.go
processCondemned). The Deployment equivalent is test_surge_faults.py, whose harness this
uses.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from drainsafe.drain import ownership
from drainsafe.drain.scale import audit_surged
from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.lab.cluster import VIRTUAL

from .faultproxy import Fault, FaultProxy, in_front_of
from .labkit import get_node, gpu_lab, pdb, pods_of
from .test_faults import assert_each_evicted_once, keys, on_node
from .test_surge_faults import ReadyDeletions, cli, drain_argv, rerun, run_until

REPLICAS = 4


def virtual_statefulset(name: str, replicas: int, *, startup_seconds: float,
                        grace: int) -> dict[str, Any]:
    """A StatefulSet of virtual pods (no processes): start-up and exit as annotated."""
    labels = {"app": name}
    annotations = {**VIRTUAL, "lab.drainsafe.io/startup-seconds": f"{startup_seconds:g}",
                   "lab.drainsafe.io/exit-after-sigterm-seconds": "0.5"}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "serviceName": name,
                     # Parallel: the controller removes the stand-ins as soon as the scale
                     # is restored, healthy or not, so only drainsafe's wait for the
                     # recreations keeps Ready at the recorded scale (OrderedReady would
                     # wait for every other pod to be healthy first).
                     "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels, "annotations": annotations},
                                  "spec": {"terminationGracePeriodSeconds": grace,
                                           "containers": [{"name": "main",
                                                           "image": "lab/virtual"}]}}}}


async def statefulset(client: KubeClient, name: str) -> dict[str, Any]:
    return await client.get(api_path("apps/v1", "statefulsets", namespace="default",
                                     name=name))


async def wait_ready(client: KubeClient, name: str, replicas: int) -> None:
    def ready(cache: dict[str, dict[str, Any]]) -> bool:
        st = (cache.get(f"default/{name}") or {}).get("status") or {}
        return st.get("availableReplicas") == replicas == st.get("replicas")

    async with Informer(client, api_path("apps/v1", "statefulsets",
                                         namespace="default")) as informer:
        await informer.wait_for(ready, timeout=90, what=f"{name} Available")


async def test_stopped_after_scale_up_after_an_eviction_and_before_the_restore(
        tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=2, gpus=0) as lab:
        await lab.apply(virtual_statefulset("db", REPLICAS, startup_seconds=2.0, grace=5),
                        pdb("db", "db", maxUnavailable=1))
        proxy: FaultProxy = in_front_of(lab.kubeconfig)
        watcher = ReadyDeletions("db")
        async with proxy.running(), KubeClient.from_kubeconfig(str(lab.kubeconfig)) as direct:
            await wait_ready(direct, "db", REPLICAS)
            informer = Informer(direct, api_path("v1", "pods", namespace="default"),
                                on_event=watcher.on_event)
            await informer.start()
            watcher.armed = True
            watcher.observe()
            try:
                cfg = proxy.kubeconfig(lab.kubeconfig, tmp_path / "proxy.kubeconfig")
                pods = await pods_of(direct, "db")
                node = pods[0]["spec"]["nodeName"]
                here = on_node(pods, node)
                k = len(here)
                assert k >= 2, [p["spec"]["nodeName"] for p in pods]
                argv = drain_argv(node, cfg)

                async def surged() -> bool:
                    return (await statefulset(direct, "db"))["spec"]["replicas"] == \
                        REPLICAS + k

                # 1. Ctrl-C right after the scale-up: the surge stays, recorded.
                code = await run_until(argv, surged, signal.SIGINT)
                assert code == 130
                record = ownership.SurgeRecord.of(await statefulset(direct, "db"))
                assert record is not None and record.replicas == REPLICAS
                assert record.node == node and set(record.pods) == keys(here)
                assert proxy.evictions_accepted() == {}
                [left] = await audit_surged(direct)
                assert (left.workload, left.replicas_now, left.replicas_before) == (
                    "StatefulSet/default/db", REPLICAS + k, REPLICAS)
                code, out = await cli("audit", "--kubeconfig", str(lab.kubeconfig))
                assert code == 1 and "StatefulSet/default/db" in out, out

                # 2. SIGKILL after the first eviction.
                async def one_evicted() -> bool:
                    n = await get_node(direct, node)
                    return len(ownership.Progress.of(n).evicted) >= 1

                await run_until(argv, one_evicted, signal.SIGKILL)
                assert ownership.SurgeRecord.of(await statefulset(direct, "db")) == record

                # 3. SIGKILL once every old pod was evicted, while their recreations start:
                # the rerun must not restore (and so remove a stand-in) before they serve.
                async def all_evicted() -> bool:
                    return len(proxy.evictions_accepted()) >= k

                await run_until(argv, all_evicted, signal.SIGKILL)
                sts = await statefulset(direct, "db")
                assert ownership.SurgeRecord.of(sts) == record
                assert sts["spec"]["replicas"] == REPLICAS + k

                # 4. SIGKILL in the restore, before the record is cleared: once every old
                # pod was evicted, hold back the answer to the StatefulSet's next PATCH
                # (the restore's scale, which the server applies) and kill the CLI while
                # it waits for it.
                hold = Fault("PATCH", r"/statefulsets/db$", "hang", times=100)

                async def restoring() -> bool:
                    if hold not in proxy.faults and len(proxy.evictions_accepted()) >= k:
                        proxy.add(hold)
                    return hold.used >= 1

                await run_until(argv, restoring, signal.SIGKILL)
                hold.times = hold.used  # release: later requests pass
                assert ownership.SurgeRecord.of(await statefulset(direct, "db")) == record

                doc = await rerun(argv)
                assert doc["ok"] is True
                sts = await statefulset(direct, "db")
                assert sts["spec"]["replicas"] == REPLICAS
                assert not [a for a in sts["metadata"].get("annotations") or {}
                            if a.startswith("drainsafe.io/")]
                await wait_ready(direct, "db", REPLICAS)
                now = await pods_of(direct, "db")
                assert sorted(p["metadata"]["name"] for p in now) == \
                    [f"db-{i}" for i in range(REPLICAS)]
                assert not on_node(now, node)  # recreated under their names elsewhere
            finally:
                await informer.stop()
        assert_each_evicted_once(proxy, keys(here))
        stand_ins = {f"db-{i}" for i in range(REPLICAS, REPLICAS + k)}
        assert set(watcher.deleted_ready) <= stand_ins, watcher.deleted_ready
        assert watcher.lowest is not None and watcher.lowest >= REPLICAS, watcher.lowest
