"""Fault injection against the lab through a proxy: API 500s and timeouts, dropped watches,
410 Expired, 409 conflicts, budget and rate-limit 429s, a multi-PDB 500, the orchestrator
killed mid-drain and run again, two drains racing for one free GPU.

In every case: no pod is deleted outside the Eviction API, none is evicted twice, and the
node ends drained or consistently cordoned (owned and recorded).

"Evicted twice" is judged on what the API server accepted (faultproxy.FaultProxy): a budget
429 retried until the PDB controller has counted the replacement is one eviction, not two.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from drainsafe.drain import ownership
from drainsafe.drain.execute import DrainSettings, NodeDrainer
from drainsafe.drain.plan import DrainOptions
from drainsafe.kube import Backoff, KubeClient, api_path
from drainsafe.lab.cluster import virtual_deployment

from .faultproxy import BUDGET_429, MULTI_PDB_500, Fault, FaultProxy, in_front_of
from .labkit import get_node, gpu_lab, pdb, pods_of

FAST = DrainSettings(timeout=90, backoff=Backoff(base=0.2, cap=1.0), unschedulable_after=3)
EVICT_FIRST = replace(FAST, options=DrainOptions(strategy="evict"))


def on_node(pods: list[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"]["nodeName"] == node]


def drain_argv(node: str, kubeconfig: Path) -> list[str]:
    """The drainsafe CLI as a user runs it, through the fault proxy's kubeconfig."""
    return [sys.executable, "-m", "drainsafe", "drain", node, "--kubeconfig", str(kubeconfig),
            "-o", "json", "--timeout", "90"]


def keys(pods: list[dict[str, Any]]) -> set[str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods}


def assert_each_evicted_once(proxy: FaultProxy, expected: set[str]) -> None:
    """No DELETE; every pod in `expected` (and no other) evicted exactly once by the server;
    no eviction sent for a pod after the server had accepted one for it."""
    log = "\n".join(proxy.eviction_log())
    assert proxy.deletes() == [], proxy.deletes()
    accepted = proxy.evictions_accepted()
    assert set(accepted) == expected, (sorted(expected), log)
    assert set(accepted.values()) == {1}, (accepted, log)
    assert proxy.evictions_after_accepted() == [], log


async def test_transient_api_faults_change_nothing_but_the_timing(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=1) as lab:
        await lab.apply(virtual_deployment("llm", replicas=2, gpus=1, grace=5,
                                           startup_seconds=0.3, exit_after_sigterm_seconds=0.5),
                        virtual_deployment("web", replicas=3, startup_seconds=0.3),
                        pdb("llm", "llm", maxUnavailable=1))
        await lab.wait_available("default", "llm", timeout=60)
        await lab.wait_available("default", "web", timeout=60)
        proxy = in_front_of(lab.kubeconfig)
        async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as direct:
            llm = await pods_of(direct, "llm")
            node = llm[0]["spec"]["nodeName"]
            web_here = on_node(await pods_of(direct, "web"), node)
            expected = keys(on_node(llm, node) + web_here)
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
        assert_each_evicted_once(proxy, expected)
        [llm_report] = [p for p in report.pods if p.name.startswith("llm")]
        # One of each was injected; the lab never rate-limits, but its PDB controller may
        # not have counted a pod Ready yet, which is a real budget 429.
        real_budget_429s = sum(1 for e in proxy.log if e.is_eviction and "/pods/llm-" in e.path
                               and e.outcome == "upstream 429")
        assert llm_report.rate_429s == 1, proxy.eviction_log()
        assert llm_report.budget_429s == 1 + real_budget_429s, proxy.eviction_log()
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
        proxy = in_front_of(lab.kubeconfig)
        proxy.add(Fault("POST", r"/eviction$", "respond", status=500, body=MULTI_PDB_500))
        async with proxy.running():
            cfg = proxy.kubeconfig(lab.kubeconfig, tmp_path / "proxy.kubeconfig")
            async with KubeClient.from_kubeconfig(str(cfg), timeout=5) as client:
                llm = await pods_of(client, "llm")
                node = llm[0]["spec"]["nodeName"]
                first = await NodeDrainer(client, node, FAST).run()
                assert not first.ok and not first.refused
                assert "several PodDisruptionBudgets" in first.failure
                n = await get_node(client, node)
                assert n["spec"]["unschedulable"] and ownership.owned_by_drainsafe(n)
                assert ownership.Progress.of(n).state == "failed"
                second = await NodeDrainer(client, node, FAST).run()
                assert second.ok, second.failure
        assert_each_evicted_once(proxy, keys(on_node(llm, node)))


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
        async with asyncio.timeout(30):
            await proc.communicate()
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
        proxy = in_front_of(lab.kubeconfig)
        async with proxy.running():
            cfg = proxy.kubeconfig(lab.kubeconfig, tmp_path / "proxy.kubeconfig")
            async with KubeClient.from_kubeconfig(str(cfg)) as client:
                pods = await pods_of(client, "w")
                node = pods[0]["spec"]["nodeName"]
                here = on_node(pods, node)
                assert len(here) >= 3
                # Evict-first, one pod at a time, so "after the first eviction" is a state
                # that lasts; surge-first's kills are in test_surge_faults.py.
                argv = [*drain_argv(node, cfg), "--strategy", "evict"]
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
                async with asyncio.timeout(90):
                    out, err = await rerun.communicate()
                assert rerun.returncode == 0, err.decode()[-2000:]
                assert json.loads(out)["ok"] is True
                assert not on_node(await pods_of(client, "w"), node)
        # With maxUnavailable 1, an eviction sent as soon as the replacement is Ready may get
        # a budget 429 until the PDB controller has counted it; that retry is no second
        # eviction. Each pod that was on the node is evicted exactly once.
        assert_each_evicted_once(proxy, keys(here))


async def test_killed_after_the_server_accepted_an_eviction_before_it_was_recorded(
        tmp_path: Path) -> None:
    """The crash window between send and record: the API server accepts the eviction, the
    proxy holds the answer back, the CLI is SIGKILLed. The node's record does not list the
    pod; the rerun finds it terminating (the cluster is the truth, not the record) and waits
    for it instead of evicting it again."""
    async with gpu_lab(tmp_path, nodes=2, gpus=0) as lab:
        await lab.apply(virtual_deployment("w", replicas=4, grace=15, startup_seconds=0.5,
                                           exit_after_sigterm_seconds=6.0),
                        pdb("w", "w", maxUnavailable=1))
        await lab.wait_available("default", "w", timeout=60)
        proxy = in_front_of(lab.kubeconfig)
        proxy.add(Fault("POST", r"/eviction$", "hang", hold=30))
        async with proxy.running():
            cfg = proxy.kubeconfig(lab.kubeconfig, tmp_path / "proxy.kubeconfig")
            async with KubeClient.from_kubeconfig(str(cfg)) as client:
                pods = await pods_of(client, "w")
                node = pods[0]["spec"]["nodeName"]
                here = on_node(pods, node)
                assert len(here) >= 2
                argv = drain_argv(node, cfg)
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                    start_new_session=True)
                try:
                    deadline = time.monotonic() + 60
                    while not proxy.evictions_accepted() and time.monotonic() < deadline:
                        await asyncio.sleep(0.02)
                    os.killpg(proc.pid, signal.SIGKILL)
                    async with asyncio.timeout(30):
                        await proc.communicate()
                finally:
                    if proc.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, signal.SIGKILL)
                        await proc.wait()
                [first] = proxy.evictions_accepted()
                n = await get_node(client, node)
                progress = ownership.Progress.of(n)
                assert n["spec"]["unschedulable"] and ownership.owned_by_drainsafe(n)
                assert progress.state == "draining" and progress.evicted == {}  # the window
                rerun = await asyncio.create_subprocess_exec(
                    *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                async with asyncio.timeout(90):
                    out, err = await rerun.communicate()
                assert rerun.returncode == 0, err.decode()[-2000:]
                doc = json.loads(out)
                assert doc["ok"] is True
                [report] = doc["nodes"]
                outcomes = {f"{p['namespace']}/{p['name']}": p["outcome"]
                            for p in report["pods"]}
                assert outcomes.get(first) == "waited", (first, outcomes, proxy.eviction_log())
                assert not on_node(await pods_of(client, "w"), node)
        assert_each_evicted_once(proxy, keys(here))


async def test_a_pod_that_starts_terminating_before_its_turn_is_waited_for(
        tmp_path: Path) -> None:
    """The plan saw the pod running; by its turn someone else is deleting it. The server
    would accept an eviction of a terminating pod without a budget check, so sending one
    would be a second eviction; the drainer waits for the pod instead. Evict-first, whose
    queue leaves the window between turns wide (surge-first checks the same before each
    eviction, in the same function)."""
    async with gpu_lab(tmp_path, nodes=2, gpus=0) as lab:
        # First eviction at t0, the next pod deleted at t0 + 2 s. Its turn comes at
        # max(t0 + exit, t0 + 2 + startup) (the first pod gone; its own replacement Ready,
        # replacement first), and it terminates until t0 + 2 + exit: a 2 s margin.
        await lab.apply(virtual_deployment("w", replicas=4, grace=15, startup_seconds=1.0,
                                           exit_after_sigterm_seconds=5.0),
                        pdb("w", "w", maxUnavailable=1))
        await lab.wait_available("default", "w", timeout=60)
        proxy = in_front_of(lab.kubeconfig)
        async with proxy.running(), KubeClient.from_kubeconfig(str(lab.kubeconfig)) as direct:
            cfg = proxy.kubeconfig(lab.kubeconfig, tmp_path / "proxy.kubeconfig")
            pods = await pods_of(direct, "w")
            node = pods[0]["spec"]["nodeName"]
            here = on_node(pods, node)
            assert len(here) >= 2
            uids = {f"default/{p['metadata']['name']}": p["metadata"]["uid"] for p in here}
            async with KubeClient.from_kubeconfig(str(cfg)) as client:
                drainer = NodeDrainer(client, node, EVICT_FIRST)
                task = asyncio.create_task(drainer.run())
                try:
                    deadline = time.monotonic() + 60
                    while not proxy.evictions_accepted() and time.monotonic() < deadline:
                        await asyncio.sleep(0.02)
                    [first] = proxy.evictions_accepted()
                    assert drainer.report.plan is not None
                    [queue] = [q.pods for q in drainer.report.plan.queues if first in q.pods]
                    after = queue[queue.index(first) + 1]
                    # Someone else deletes the next pod directly (not through the proxy)
                    # while the first one terminates; the sleep places it in that window.
                    await asyncio.sleep(2.0)
                    ns, name = after.split("/")
                    sent = [e for e in proxy.log if e.is_eviction
                            and e.path.endswith(f"/pods/{name}/eviction")]
                    assert not sent, proxy.eviction_log()  # not its turn yet
                    assert uids[first] in {p["metadata"]["uid"]
                                           for p in await pods_of(direct, "w")}
                    await direct.request("DELETE", api_path("v1", "pods", namespace=ns,
                                                            name=name))
                    async with asyncio.timeout(90):
                        report = await task
                finally:
                    if not task.done():
                        task.cancel()
                        with contextlib.suppress(BaseException):
                            await task
        assert report.ok, report.failure
        outcome = {p.key: p.outcome for p in report.pods}
        assert outcome[after] == "waited", (outcome, proxy.eviction_log())
        assert_each_evicted_once(proxy, keys(here) - {after})
        assert not [e for e in proxy.log if e.is_eviction and e.path.endswith(
            f"/pods/{name}/eviction")], proxy.eviction_log()


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

