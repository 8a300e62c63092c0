"""A shared surge in the lab (issue 30): two nodes of one fleet run
(`--max-parallel-nodes 2`) hold parts of one Deployment's surge at once, under streaming
load through its Service. Measured from the Deployment's own watch: the scale reached
base + both parts while both parts were recorded (so the surge was shared, not taken in
turn), Ready never below desired at any 0.1 s sample or change, no request failed or was
cut, and the scale is back at base with no record afterwards, audit clean. The lab has
room for exactly both parts' new pods. A node whose new pods do not fit beside another's
part waits and joins once that part leaves. A drain killed (SIGKILL) mid-shared-surge
leaves a two-part record, which audit lists for both nodes; a rerun, with no room beyond
the stand-ins already running (counted, not asked for again), restores base; so does
`drainsafe uncordon` of each node, one part at a time.

Real processes: the lab's API server, scheduler, controllers and kubelets, the streaming
workload under `drainsafe serve` (drainsafe.demo.fleetload's scenario, the NodeMaintenance
acceptance test's), the real load process."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from drainsafe.demo.fleetload import deploy, under_load
from drainsafe.demo.scenario import NAMESPACE, ScenarioSettings
from drainsafe.drain import ownership
from drainsafe.drain.execute import DrainSettings, NodeDrainer
from drainsafe.drain.fleet import drain_fleet
from drainsafe.drain.sharedsurge import Surges
from drainsafe.kube import Informer, KubeClient, api_path
from drainsafe.lab.cluster import virtual_deployment

from .labkit import gpu_lab, pods_of

pytestmark = pytest.mark.e2e

SETTINGS = ScenarioSettings(kind="Deployment", app="chat", replicas=2, gpus=1,
                            propagation=0.3, drain_delay=0.5, stream_seconds=0.5,
                            model_load=2, concurrency=2, warmup=1.0, wait_timeout=90)
DEPLOYMENTS = api_path("apps/v1", "deployments", namespace=NAMESPACE)


@dataclass
class Seen:
    """The Deployment's scale and surge record at every change."""

    rows: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)

    def on_event(self, _kind: str, obj: dict[str, Any]) -> None:
        record = ownership.SurgeRecord.of(obj)
        self.rows.append((int(obj["spec"]["replicas"]),
                          () if record is None else record.nodes))

    @property
    def most_parts(self) -> int:
        return max((len(nodes) for _, nodes in self.rows), default=0)

    def scale_with(self, parts: int) -> int:
        return max((r for r, nodes in self.rows if len(nodes) == parts), default=0)


async def chat_nodes(client: KubeClient) -> list[str]:
    return sorted({p["spec"]["nodeName"] for p in await pods_of(client, SETTINGS.app)})


async def test_two_nodes_share_one_deployments_surge_under_load(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=4, gpus=1, propagation=SETTINGS.propagation) as lab, \
            KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        await deploy(lab, [SETTINGS])
        nodes = await chat_nodes(client)
        assert len(nodes) == 2
        seen = Seen()
        results = []

        async def operation() -> None:
            results.append(await drain_fleet(client, nodes, DrainSettings(timeout=120),
                                             max_parallel=2))

        async with Informer(client, DEPLOYMENTS, on_event=seen.on_event):
            run = await under_load(lab, [SETTINGS], operation)
        [fleet] = results
        assert fleet.ok, [r.failure for r in fleet.reports]
        [chat] = run.workloads
        assert chat.samples >= 10 and chat.lowest_ready >= SETTINGS.replicas, chat
        assert chat.total_failed == 0 and chat.truncated == 0, chat
        assert chat.ok > 0
        # Shared, measured: both nodes' parts recorded at once, the scale base + both.
        assert seen.most_parts == 2, seen.rows
        assert seen.scale_with(2) == SETTINGS.replicas + 2, seen.rows
        assert chat.replicas_after == SETTINGS.replicas and chat.annotations_left == []
        assert all(r.scaled for r in fleet.reports)
        from drainsafe.drain.scale import audit_surged
        assert await audit_surged(client) == []


async def test_a_node_without_room_waits_and_joins_when_a_part_leaves(
        tmp_path: Path) -> None:
    """Two drainers of one process (as one NodeMaintenance leader runs them) and room for
    one new pod: each one's plan finds the free GPU, the first holds its part, the second
    finds no room beside it and waits; once the first part leaves (its old pod gone),
    room is freed (a filler goes) and it joins alone. Never two parts at once."""
    settings = replace(SETTINGS, model_load=1)
    async with gpu_lab(tmp_path, nodes=4, gpus=1, propagation=settings.propagation) as lab, \
            KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        await deploy(lab, [settings])
        a, b = await chat_nodes(client)
        # A filler takes one of the two free GPUs: room for one new pod.
        await lab.apply(virtual_deployment("filler", replicas=1, gpus=1, startup_seconds=0.2))
        await lab.wait_available(NAMESPACE, "filler", timeout=60)
        for n in (a, b):
            await client.patch(api_path("v1", "nodes", name=n), {"spec": {"unschedulable": True}})
        seen = Seen()
        said: list[str] = []
        waiting = asyncio.Event()

        def say(msg: str) -> None:
            said.append(msg)
            if "waiting for a part to leave" in msg:
                waiting.set()

        surges = Surges()
        drainers = [NodeDrainer(client, n, DrainSettings(timeout=120), draining=[m],
                                surges=surges, on_progress=say)
                    for n, m in ((a, b), (b, a))]
        async with Informer(client, DEPLOYMENTS, on_event=seen.on_event):
            runs = [asyncio.ensure_future(d.run()) for d in drainers]
            async with asyncio.timeout(60):
                await waiting.wait()
            # The waiter joins only once a part left; then there must be room for it.
            await client.patch(api_path("apps/v1", "deployments", namespace=NAMESPACE,
                                        name="filler"), {"spec": {"replicas": 0}})
            reports = await asyncio.gather(*runs)
        assert all(r.ok for r in reports), [r.failure for r in reports]
        assert seen.most_parts == 1, seen.rows
        assert [r for r, _ in seen.rows if r > settings.replicas + 1] == [], seen.rows
        dep = await client.get(api_path("apps/v1", "deployments", namespace=NAMESPACE,
                                        name=settings.app))
        assert dep["spec"]["replicas"] == settings.replicas
        assert ownership.SURGE not in (dep["metadata"].get("annotations") or {})


async def _ds(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)


async def test_a_drain_killed_mid_shared_surge_is_restored_by_a_rerun(tmp_path: Path) -> None:
    settings = replace(SETTINGS, model_load=6)
    async with gpu_lab(tmp_path, nodes=4, gpus=1, propagation=settings.propagation) as lab, \
            KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        await deploy(lab, [settings])
        nodes = await chat_nodes(client)
        cfg = f"--kubeconfig={lab.kubeconfig}"
        shared = asyncio.Event()
        seen = Seen()

        def on_event(kind: str, obj: dict[str, Any]) -> None:
            seen.on_event(kind, obj)
            if seen.rows[-1][1] and len(seen.rows[-1][1]) == 2:
                shared.set()

        async with Informer(client, DEPLOYMENTS, on_event=on_event):
            proc = await _ds("drain", *nodes, "--max-parallel-nodes", "2", cfg,
                             "--timeout", "120")
            try:
                async with asyncio.timeout(60):
                    await shared.wait()
            finally:
                proc.send_signal(signal.SIGKILL)
                await proc.communicate()
            dep = await client.get(api_path("apps/v1", "deployments", namespace=NAMESPACE,
                                            name=settings.app))
            record = ownership.SurgeRecord.of(dep)
            assert record is not None and record.nodes == tuple(nodes)
            assert dep["spec"]["replicas"] == settings.replicas + 2
            # The audit sees the surge left, for both nodes.
            proc = await _ds("audit", cfg, "-o", "json")
            out, _ = await proc.communicate()
            assert proc.returncode == 1
            [left] = json.loads(out)["scaled_up"]
            assert left["node"] == ",".join(nodes)
            # The rerun continues both parts and restores base.
            proc = await _ds("drain", *nodes, "--max-parallel-nodes", "2", cfg,
                             "--timeout", "120")
            out, err = await proc.communicate()
            assert proc.returncode == 0, (out.decode()[-2000:], err.decode()[-2000:])
        dep = await client.get(api_path("apps/v1", "deployments", namespace=NAMESPACE,
                                        name=settings.app))
        assert dep["spec"]["replicas"] == settings.replicas
        assert ownership.SURGE not in (dep["metadata"].get("annotations") or {})
        for n in nodes:
            proc = await _ds("uncordon", n, cfg)
            await proc.communicate()
            assert proc.returncode == 0
        proc = await _ds("audit", cfg, "-o", "json")
        out, _ = await proc.communicate()
        assert proc.returncode == 0 and json.loads(out) == {"nodes": [], "scaled_up": []}


async def test_uncordon_gives_back_one_part_at_a_time_after_a_kill(tmp_path: Path) -> None:
    """SIGKILL with both parts held, then `drainsafe uncordon` of each node: the first
    takes its part out (the scale base + the other part, the record naming the other),
    the second restores base and removes the record; audit is clean."""
    settings = replace(SETTINGS, model_load=6)
    async with gpu_lab(tmp_path, nodes=4, gpus=1, propagation=settings.propagation) as lab, \
            KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        await deploy(lab, [settings])
        first, second = await chat_nodes(client)
        cfg = f"--kubeconfig={lab.kubeconfig}"
        shared = asyncio.Event()

        def on_event(_kind: str, obj: dict[str, Any]) -> None:
            record = ownership.SurgeRecord.of(obj)
            if record is not None and len(record.nodes) == 2:
                shared.set()

        async with Informer(client, DEPLOYMENTS, on_event=on_event):
            proc = await _ds("drain", first, second, "--max-parallel-nodes", "2", cfg,
                             "--timeout", "120")
            try:
                async with asyncio.timeout(60):
                    await shared.wait()
            finally:
                proc.send_signal(signal.SIGKILL)
                await proc.communicate()
        path = api_path("apps/v1", "deployments", namespace=NAMESPACE, name=settings.app)
        proc = await _ds("uncordon", first, cfg)
        await proc.communicate()
        assert proc.returncode == 0
        dep = await client.get(path)
        record = ownership.SurgeRecord.of(dep)
        assert record is not None and record.nodes == (second,)
        assert dep["spec"]["replicas"] == settings.replicas + 1
        proc = await _ds("uncordon", second, cfg)
        await proc.communicate()
        assert proc.returncode == 0
        dep = await client.get(path)
        assert dep["spec"]["replicas"] == settings.replicas
        assert ownership.SURGE not in (dep["metadata"].get("annotations") or {})
        proc = await _ds("audit", cfg, "-o", "json")
        out, _ = await proc.communicate()
        assert proc.returncode == 0 and json.loads(out) == {"nodes": [], "scaled_up": []}
