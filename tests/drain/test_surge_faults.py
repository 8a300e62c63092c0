"""Surge-first under faults: the CLI stopped after the scale-up (SIGINT), after an eviction
(SIGKILL) and just before the restore (SIGKILL), then run again.

Each rerun continues from the records (the surge on the Deployment, the evictions on the
node). At the end: the Deployment (or its HPA) is back at exactly the recorded values with no
drainsafe annotation, every old pod was evicted once through the Eviction API (judged by
what the API server accepted, behind a proxy), drainsafe sent no DELETE, and no Ready pod of
the workload was deleted by anyone (a pod removed by the ReplicaSet's scale-down carries no
DisruptionTarget condition: it would show here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from drainsafe.drain import ownership
from drainsafe.drain.parts import target
from drainsafe.drain.scale import audit_surged, same_surge
from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.kube.objects import is_ready
from drainsafe.lab.cluster import virtual_deployment

from .faultproxy import FaultProxy, in_front_of
from .labkit import get_node, gpu_lab, pdb, pods_of
from .test_faults import assert_each_evicted_once, keys, on_node


def drain_argv(node: str, kubeconfig: Path) -> list[str]:
    return [sys.executable, "-m", "drainsafe", "drain", node, "--kubeconfig", str(kubeconfig),
            "-o", "json", "--timeout", "90"]


class ReadyDeletions:
    """Pods of `app` that got a deletionTimestamp while Ready and without DisruptionTarget
    (deleted, not evicted), and the lowest Ready count seen."""

    def __init__(self, app: str) -> None:
        self.app = app
        self.deleted_ready: list[str] = []
        self.ready: dict[str, bool] = {}
        self.lowest: int | None = None
        self.armed = False  # the lowest count from the informer's first full list on
        self._terminating: set[str] = set()

    def on_event(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get("app") != self.app:
            return
        name = str(meta.get("name"))
        conditions = (pod.get("status") or {}).get("conditions") or []
        if meta.get("deletionTimestamp") and name not in self._terminating:
            self._terminating.add(name)
            evicted = any(c.get("type") == "DisruptionTarget" for c in conditions)
            if is_ready(pod) and not evicted:
                self.deleted_ready.append(name)
        if kind == "DELETED":
            self.ready.pop(name, None)
        else:
            self.ready[name] = is_ready(pod) and not meta.get("deletionTimestamp")
        self.observe()

    def observe(self) -> None:
        count = sum(self.ready.values())
        if self.armed and (self.lowest is None or count < self.lowest):
            self.lowest = count


async def deployment(client: KubeClient, name: str) -> dict[str, Any]:
    return await client.get(api_path("apps/v1", "deployments", namespace="default", name=name))


def surge_record(dep: dict[str, Any]) -> ownership.SurgeRecord | None:
    return ownership.SurgeRecord.of(dep)


async def run_until(argv: list[str], until: Callable[[], Awaitable[bool]], sig: int,
                    *, before: Callable[[], None] = lambda: None) -> int:
    """Run the CLI until `until()` holds, then send it `sig`; its exit code."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not await until():
            assert time.monotonic() < deadline, "the CLI never reached the point to stop it"
            assert proc.returncode is None, (await proc.communicate())[1].decode()[-2000:]
            await asyncio.sleep(0.02)
        before()
        os.killpg(proc.pid, sig)
        async with asyncio.timeout(30):
            await proc.communicate()
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    return proc.returncode if proc.returncode is not None else -1


async def cli(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"})
    async with asyncio.timeout(60):
        out, _ = await proc.communicate()
    return proc.returncode if proc.returncode is not None else -1, out.decode()


async def rerun(argv: list[str]) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(120):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-3000:]
    doc: dict[str, Any] = json.loads(out)
    return doc


async def test_stopped_after_scale_up_after_an_eviction_and_before_the_restore(
        tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=2, gpus=0) as lab:
        # Start-up 8 s (a model load is minutes): a replacement the ReplicaSet starts in the
        # instant between an accepted eviction and the scale-down, which a SIGKILL can
        # freeze, is still starting when the rerun restores the scale, so it is the one
        # removed (not Ready first). Removing it after it serves would lower Ready to the
        # recorded scale, no lower, but it would be a Ready pod deleted (docs/drain.md).
        await lab.apply(virtual_deployment("w", replicas=6, grace=10, startup_seconds=8.0,
                                           exit_after_sigterm_seconds=1.0),
                        pdb("w", "w", maxUnavailable=1))
        await lab.wait_available("default", "w", timeout=60)
        proxy: FaultProxy = in_front_of(lab.kubeconfig)
        watcher = ReadyDeletions("w")
        async with proxy.running(), KubeClient.from_kubeconfig(str(lab.kubeconfig)) as direct:
            informer = Informer(direct, api_path("v1", "pods", namespace="default"),
                                on_event=watcher.on_event)
            await informer.start()
            watcher.armed = True
            watcher.observe()
            try:
                cfg = proxy.kubeconfig(lab.kubeconfig, tmp_path / "proxy.kubeconfig")
                pods = await pods_of(direct, "w")
                node = pods[0]["spec"]["nodeName"]
                here = on_node(pods, node)
                k = len(here)
                assert k >= 2
                argv = drain_argv(node, cfg)

                async def surged() -> bool:
                    return (await deployment(direct, "w"))["spec"]["replicas"] == 6 + k

                # 1. Ctrl-C right after the scale-up: the surge stays, recorded (the rerun
                # continues it rather than deleting the surge pods it just started).
                code = await run_until(argv, surged, signal.SIGINT)
                assert code == 130
                record = surge_record(await deployment(direct, "w"))
                assert record is not None and record.replicas == 6 and record.node == node
                assert proxy.evictions_accepted() == {}
                n = await get_node(direct, node)
                assert ownership.Progress.of(n).state == "interrupted"
                # audit lists the workload left scaled up, and exits 1 for it.
                [left] = await audit_surged(direct)
                assert (left.workload, left.replicas_now, left.replicas_before, left.node) == (
                    "Deployment/default/w", 6 + k, 6, node)
                code, out = await cli("audit", "--kubeconfig", str(lab.kubeconfig))
                assert code == 1 and "Deployment/default/w" in out, out

                # 2. SIGKILL after the first eviction.
                async def one_evicted() -> bool:
                    n = await get_node(direct, node)
                    return len(ownership.Progress.of(n).evicted) >= 1

                await run_until(argv, one_evicted, signal.SIGKILL)
                dep = await deployment(direct, "w")
                # The same surge (its identity and recorded scale never rewritten); its part
                # (version 2) comes down with each eviction, in the write that lowers the
                # scale, so the record and the scale always agree.
                now = surge_record(dep)
                assert now is not None and same_surge(now, record) and now.replicas == 6
                evicted = set(ownership.Progress.of(await get_node(direct, node)).evicted)
                assert not evicted & set(now.holders[node].pods)
                assert dep["spec"]["replicas"] == target(now)

                # 3. SIGKILL once every old pod is evicted. The last part's lowering is the
                # restore and the record's removal in one write: killed before it, the
                # record names what is left; after it, nothing is left. Both rerun clean.
                async def all_evicted() -> bool:
                    return len(proxy.evictions_accepted()) >= k

                await run_until(argv, all_evicted, signal.SIGKILL)
                dep = await deployment(direct, "w")
                now = surge_record(dep)
                assert now is None or (same_surge(now, record)
                                       and dep["spec"]["replicas"] == target(now))

                doc = await rerun(argv)
                assert doc["ok"] is True
                dep = await deployment(direct, "w")
                assert dep["spec"]["replicas"] == 6
                assert not [a for a in dep["metadata"].get("annotations") or {}
                            if a.startswith("drainsafe.io/")]
                assert not on_node(await pods_of(direct, "w"), node)
                await lab.wait_available("default", "w", timeout=60)
            finally:
                await informer.stop()
        assert_each_evicted_once(proxy, keys(here))
        assert watcher.deleted_ready == [], watcher.deleted_ready
        assert watcher.lowest is not None and watcher.lowest >= 6, watcher.lowest


async def test_killed_after_the_hpa_was_raised_restores_its_bounds(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=1) as lab:
        await lab.apply(virtual_deployment("llm", replicas=2, gpus=1, grace=5,
                                           startup_seconds=1.0, exit_after_sigterm_seconds=0.5),
                        pdb("llm", "llm", minAvailable=2),
                        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                         "metadata": {"name": "llm", "namespace": "default"},
                         "spec": {"scaleTargetRef": {"apiVersion": "apps/v1",
                                                     "kind": "Deployment", "name": "llm"},
                                  "minReplicas": 2, "maxReplicas": 2}})
        await lab.wait_available("default", "llm", timeout=60)
        proxy = in_front_of(lab.kubeconfig)
        watcher = ReadyDeletions("llm")
        async with proxy.running(), KubeClient.from_kubeconfig(str(lab.kubeconfig)) as direct:
            informer = Informer(direct, api_path("v1", "pods", namespace="default"),
                                on_event=watcher.on_event)
            await informer.start()
            watcher.armed = True
            watcher.observe()
            try:
                cfg = proxy.kubeconfig(lab.kubeconfig, tmp_path / "proxy.kubeconfig")
                pods = await pods_of(direct, "llm")
                node = pods[0]["spec"]["nodeName"]
                here = on_node(pods, node)
                hpa_path = api_path("autoscaling/v2", "horizontalpodautoscalers",
                                    namespace="default", name="llm")

                async def raised() -> bool:
                    spec = (await direct.get(hpa_path))["spec"]
                    return bool(spec["minReplicas"] == 3 and spec["maxReplicas"] == 3)

                await run_until(drain_argv(node, cfg), raised, signal.SIGKILL)
                record = surge_record(await deployment(direct, "llm"))
                assert record is not None and record.autoscaler is not None
                assert (record.autoscaler.min_replicas, record.autoscaler.max_replicas) == (2, 2)
                doc = await rerun(drain_argv(node, cfg))
                assert doc["ok"] is True
                spec = (await direct.get(hpa_path))["spec"]
                assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 2)
                dep = await deployment(direct, "llm")
                assert dep["spec"]["replicas"] == 2 and surge_record(dep) is None
            finally:
                await informer.stop()
        assert_each_evicted_once(proxy, keys(here))
        assert watcher.deleted_ready == [], watcher.deleted_ready
        assert watcher.lowest == 2, watcher.lowest
