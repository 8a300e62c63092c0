"""Fault injection against the lab through a proxy: API 500s and timeouts, dropped watches,
410 Expired, 409 conflicts, budget and rate-limit 429s, a multi-PDB 500, the orchestrator
killed mid-drain and run again, two drains racing for one free GPU.

In every case: no pod is deleted outside the Eviction API, none is evicted twice, and the
node ends drained or consistently cordoned (owned and recorded).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from drainsafe.drain import ownership
from drainsafe.drain.execute import DrainSettings, NodeDrainer
from drainsafe.kube import Backoff, KubeClient
from drainsafe.lab.cluster import virtual_deployment

from .faultproxy import BUDGET_429, MULTI_PDB_500, Fault, FaultProxy, lab_upstream
from .labkit import get_node, gpu_lab, pdb, pods_of

FAST = DrainSettings(timeout=90, backoff=Backoff(base=0.2, cap=1.0), unschedulable_after=3)


def on_node(pods: list[dict], node: str) -> list[dict]:
    return [p for p in pods if p["spec"]["nodeName"] == node]


async def test_transient_api_faults_change_nothing_but_the_timing(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=1) as lab:
        await lab.apply(virtual_deployment("llm", replicas=2, gpus=1, grace=5,
                                           startup_seconds=0.3, exit_after_sigterm_seconds=0.5),
                        virtual_deployment("web", replicas=3, startup_seconds=0.3),
                        pdb("llm", "llm", maxUnavailable=1))
        await lab.wait_available("default", "llm", timeout=60)
        await lab.wait_available("default", "web", timeout=60)
        upstream, ca = lab_upstream(lab.kubeconfig)
        proxy = FaultProxy(upstream, ca)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as direct:
            llm = await pods_of(direct, "llm")
            node = llm[0]["spec"]["nodeName"]
            web_here = on_node(await pods_of(direct, "web"), node)
        ev = r"/pods/llm-[^/]+/eviction$"
        proxy.add(
            Fault("PATCH", rf"/nodes/{node}$", "respond", status=409,
                  body=b'{"kind":"Status","status":"Failure","reason":"Conflict","code":409}'),
            Fault("POST", ev, "respond", status=429, body=b"Too many requests, please try "
                  b"again later.\n", headers={"content-type": "text/plain",
                                               "retry-after": "1"}),
            Fault("POST", ev, "respond", status=429, body=BUDGET_429),
            Fault("POST", ev, "forward_then", status=500,
                  body=b'{"kind":"Status","status":"Failure","reason":"InternalError",'
                  b'"code":500,"message":"etcdserver: request timed out"}'),
            Fault("GET", r"/namespaces/default/pods/llm-[^/]+$", "respond", status=500,
                  body=b'{"kind":"Status","status":"Failure","code":500}'),
            Fault("GET", r"/namespaces/default/pods$", "drop_watch", query="watch=true"),
            Fault("GET", r"/namespaces/default/pods$", "expire_watch", query="watch=true"),
            Fault("GET", r"/endpointslices$", "expire_watch", query="watch=true"),
            Fault("GET", r"/endpointslices$", "respond", status=503, query="limit=",
                  body=b'{"kind":"Status","status":"Failure","code":503}'),
        )
        if web_here:
            proxy.add(Fault("POST", r"/pods/web-[^/]+/eviction$", "hang"))
        async with proxy.running():
            cfg = proxy.kubeconfig(lab.kubeconfig, tmp_path / "proxy.kubeconfig")
            async with KubeClient.from_kubeconfig(str(cfg), timeout=3) as client:
                report = await NodeDrainer(client, node, FAST).run()
        assert report.ok, (report.failure, [e.outcome for e in proxy.log][-20:])
        unused = [f for f in proxy.faults if f.used < f.times]
        assert not unused, unused  # every fault really happened
        assert proxy.deletes() == []
        counts = proxy.evictions_forwarded()
        assert counts and set(counts.values()) == {1}, counts  # each pod evicted exactly once
        [llm_report] = [p for p in report.pods if p.name.startswith("llm")]
        assert llm_report.rate_429s == 1 and llm_report.budget_429s == 1
        assert llm_report.transient_errors >= 1 and llm_report.outcome == "evicted"
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as direct:
            n = await get_node(direct, node)
            assert ownership.Progress.of(n).state == "drained"
            assert not on_node(await pods_of(direct, "llm") + await pods_of(direct, "web"), node)


async def test_multi_pdb_500_stops_and_a_rerun_continues(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=1) as lab:
        await lab.apply(virtual_deployment("llm", replicas=2, gpus=1, grace=5,
                                           startup_seconds=0.3))
        await lab.wait_available("default", "llm", timeout=60)
        upstream, ca = lab_upstream(lab.kubeconfig)
        proxy = FaultProxy(upstream, ca)
        proxy.add(Fault("POST", r"/eviction$", "respond", status=500, body=MULTI_PDB_500))
        async with proxy.running():
            cfg = proxy.kubeconfig(lab.kubeconfig, tmp_path / "proxy.kubeconfig")
            async with KubeClient.from_kubeconfig(str(cfg), timeout=5) as client:
                node = (await pods_of(client, "llm"))[0]["spec"]["nodeName"]
                first = await NodeDrainer(client, node, FAST).run()
                assert not first.ok and not first.refused
                assert "several PodDisruptionBudgets" in first.failure
                n = await get_node(client, node)
                assert n["spec"]["unschedulable"] and ownership.owned_by_drainsafe(n)
                assert ownership.Progress.of(n).state == "failed"
                second = await NodeDrainer(client, node, FAST).run()
                assert second.ok, second.failure
        assert proxy.deletes() == []
        assert set(proxy.evictions_forwarded().values()) == {1}


async def stop_after_evictions(client: KubeClient, node: str, argv: list[str],
                               evicted: int, sig: int) -> int:
    """Run the CLI until the node records `evicted` evictions, then send `sig`."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            n = await get_node(client, node)
            if len(ownership.Progress.of(n).evicted) >= evicted:
                break
            await asyncio.sleep(0.05)
        os.killpg(proc.pid, sig)
        await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    return proc.returncode if proc.returncode is not None else -1


async def test_interrupted_then_killed_mid_drain_then_run_again(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=2, gpus=0) as lab:
        await lab.apply(virtual_deployment("w", replicas=6, grace=10, startup_seconds=1.0,
                                           exit_after_sigterm_seconds=1.0),
                        pdb("w", "w", maxUnavailable=1))
        await lab.wait_available("default", "w", timeout=60)
        upstream, ca = lab_upstream(lab.kubeconfig)
        proxy = FaultProxy(upstream, ca)
        async with proxy.running():
            cfg = proxy.kubeconfig(lab.kubeconfig, tmp_path / "proxy.kubeconfig")
            async with KubeClient.from_kubeconfig(str(cfg)) as client:
                pods = await pods_of(client, "w")
                node = pods[0]["spec"]["nodeName"]
                assert len(on_node(pods, node)) >= 3
                argv = [sys.executable, "-m", "drainsafe", "drain", node, "--kubeconfig",
                        str(cfg), "-o", "json", "--timeout", "90"]
                # Ctrl-C after the first eviction: exit 130, the node says "interrupted".
                code = await stop_after_evictions(client, node, argv, 1, signal.SIGINT)
                n = await get_node(client, node)
                progress = ownership.Progress.of(n)
                assert code == 130
                assert n["spec"]["unschedulable"] and ownership.owned_by_drainsafe(n)
                assert progress.state == "interrupted" and len(progress.evicted) == 1
                # A crash (SIGKILL) after the second: the record still says where it was.
                await stop_after_evictions(client, node, argv, 2, signal.SIGKILL)
                n = await get_node(client, node)
                progress = ownership.Progress.of(n)
                assert n["spec"]["unschedulable"] and ownership.owned_by_drainsafe(n)
                assert progress.state == "draining" and len(progress.evicted) == 2
                rerun = await asyncio.create_subprocess_exec(
                    *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                out, err = await asyncio.wait_for(rerun.communicate(), 90)
                assert rerun.returncode == 0, err.decode()[-2000:]
                assert json.loads(out)["ok"] is True
                assert not on_node(await pods_of(client, "w"), node)
        assert proxy.deletes() == []
        counts = proxy.evictions_forwarded()
        assert set(counts.values()) == {1} and len(counts) >= 3, counts


async def test_two_drains_racing_for_one_free_gpu(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=1) as lab:
        await lab.apply(virtual_deployment("a", replicas=1, gpus=1, grace=2),
                        virtual_deployment("b", replicas=1, gpus=1, grace=2))
        await lab.wait_available("default", "a", timeout=60)
        await lab.wait_available("default", "b", timeout=60)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
            na = (await pods_of(client, "a"))[0]["spec"]["nodeName"]
            nb = (await pods_of(client, "b"))[0]["spec"]["nodeName"]
            # Each plan alone sees the third node's GPU free; only one replacement fits.
            ra, rb = await asyncio.gather(NodeDrainer(client, na, FAST).run(),
                                          NodeDrainer(client, nb, FAST).run())
            results = sorted([ra, rb], key=lambda r: r.ok)
            loser, winner = results
            assert winner.ok and not loser.ok, (ra.failure, rb.failure)
            assert "cannot be scheduled" in loser.failure
            assert "Insufficient nvidia.com/gpu" in loser.failure
            n = await get_node(client, loser.node)
            assert n["spec"]["unschedulable"] and ownership.Progress.of(n).state == "failed"

