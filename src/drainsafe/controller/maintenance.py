"""The leader's NodeMaintenance reconciler: the operation's loop and the choice of each wave.

The decisions are drainsafe.maintenance's (spec, per-node states, the wave planner); this
is their I/O. Only the leader acts (controller.leader). Each pass reads every
NodeMaintenance from its informer, starts a node task (controller.maintenance_node: cordon,
drain, await maintained, uncordon) for each node its status says is in progress and not
running here (a new leader continues where the status says), then chooses the next wave
on the status just read and marks its nodes started (Cordoned) *before* their tasks
cordon them, so a new leader counts them against the budgets. Status writes are
controller.maintenance_status's, one writer per NodeMaintenance.

A node refused before any eviction only for what the other nodes in progress hold comes
back Pending, reason Deferred (controller.maintenance_node); the planner starts it last
and alone (maintenance.waves: later), and not before a backoff from its last refusal
(not_now: RETRY_MIN_SECONDS, doubled at each refusal up to RETRY_MAX_SECONDS, so a lasting
shortage does not flap the cordon). A pass that may start a node reads the cluster once and
admits nodes by the room their stand-ins need (maintenance.roomwaves WaveRoom); a node held
back is written Pending with the reason of its hold (WAITING). CannotSurge is judged again
on each such read (WaveRoom.still_cannot_surge), not carried over from the status row; a
pass that read no cluster starts no node.

Pending nodes carry a soft taint (maintenance.pending: PreferNoSchedule, the operation's
name as value; controller.maintenance_taints) so that stand-ins and replacements prefer
other nodes; it is taken off when the node starts, when the operation ends (Succeeded or
Failed) and when it is deleted, each pass comparing the status with the node informer's copy.

The node set is fixed when the status is first written: a node labelled later does not join
a running operation.

Leadership lost: its node tasks are cancelled (each drain records "interrupted" and the next
leader continues it). Stopped (SIGTERM) or no longer leading, it waits a bounded while
(controller.events FLUSH_SECONDS) for its last lowest-capacity write and then the Events
of its last status writes, both written in the background, so a graceful stop does not
drop them; a SIGKILL may, and the
next leader writes Events only for the changes it writes itself. Deleted: a finalizer
holds the object until the leader has cancelled its node tasks and given back the cordons
and surges it holds (controller.maintenance_release).

What a person reads (status.nodeTable, status.conditions, status.lowestCapacity from the
drains' own capacity readings, and the Events of each status change) is
controller.maintenance_readout's, applied to every status write.

Paused (spec.paused): no new node starts; a node already started finishes the steps it has
(its drain, then its uncordon or its wait for the maintained mark), since stopping a drain
half way leaves a node out of service and a workload scaled up for as long as the pause.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from drainsafe.controller import maintenance_release as release
from drainsafe.controller.events import EventRecorder
from drainsafe.controller.leader import LeaderElector
from drainsafe.controller.maintenance_node import DEFERRED, Deferrals, NodeTask
from drainsafe.controller.maintenance_readout import MaintenanceReadout
from drainsafe.controller.maintenance_status import StatusWriter
from drainsafe.controller.maintenance_taints import set_pending
from drainsafe.drain.preflight import read_cluster
from drainsafe.drain.sharedsurge import Surges
from drainsafe.drain.workloads import ClusterState
from drainsafe.failpoint import failpoint
from drainsafe.kube import Informer, KubeClient, KubeError, WaitTimeout, api_path
from drainsafe.kube.objects import is_node_ready, meta, rfc3339
from drainsafe.kube.retry import KeptChanging
from drainsafe.maintenance.pending import pending_of
from drainsafe.maintenance.progress import (
    NodeProgress,
    NodeState,
    in_progress,
    read_nodes,
    status_of,
)
from drainsafe.maintenance.reasons import NodeReason
from drainsafe.maintenance.roomwaves import HoldCode, WaveRoom
from drainsafe.maintenance.spec import MaintenanceSpec, SpecError, parse_spec
from drainsafe.maintenance.waves import NodeFacts, Wave, next_wave

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
CANNOT_SURGE: NodeReason = "CannotSurge"  # a Pending node with no room even alone: started last
# The reason of a Pending node the planner holds back (maintenance.roomwaves), by its code.
WAITING: dict[HoldCode, NodeReason] = {"no-room": "WaitingForRoom", "budget": "WaitingForBudget",
                                "surging": "WaitingForSurge", "cannot-surge": CANNOT_SURGE}
RETRY_MIN_SECONDS = 2.0  # a deferred node's backoff, doubled at each refusal
RETRY_MAX_SECONDS = 60.0


def _unchanged(p: NodeProgress) -> NodeProgress:
    return p


class MaintenanceReconciler:
    def __init__(self, client: KubeClient, nodes: Informer, *,
                 clock: Callable[[], float] = time.time,
                 events: EventRecorder | None = None) -> None:
        self.client, self.nodes, self.clock = client, nodes, clock
        # status.nodeTable, conditions, Events, lowestCapacity (controller.maintenance_readout)
        self.readout = MaintenanceReadout(
            events or EventRecorder(client, instance=socket.gethostname(), wall=clock),
            clock=clock)
        self.informer = Informer(client, "/apis/drainsafe.io/v1alpha1/nodemaintenances")
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}  # (uid, node)
        self.status = StatusWriter(client, self.readout, clock)
        self._surges = Surges()  # shared by every drain of this leader (drain.sharedsurge)
        # (name, node) deferred -> (when last, how many times): the node tasks write it
        self._deferred: Deferrals = {}
        self.node_task = NodeTask(client, nodes, self.informer, clock=clock,
                                  readout=self.readout, status=self.status,
                                  surges=self._surges, deferred=self._deferred)

    async def run(self, elector: LeaderElector, period: float) -> None:
        """Reconcile every `period` seconds (and on every change) while this replica leads."""
        while True:
            try:
                # Until the CRD is installed the list is a 404; keep trying, do nothing else.
                await self.informer.start(sync_timeout=30)
                break
            except WaitTimeout as exc:
                log.info("NodeMaintenance not served yet: %s", exc)
        try:
            while True:
                if elector.is_leader:
                    try:
                        await self.reconcile_all()
                    except Exception:  # the loop outlives one bad pass; the next retries
                        log.exception("NodeMaintenance reconcile failed; retrying")
                elif self._tasks:
                    # Leadership lost: the node tasks stop, and so does this leader once
                    # its last lowest-capacity write and the Events of its last status
                    # writes are written (bounded)
                    await self._cancel(set(self._tasks))
                    await self.readout.flush()
                    await self.readout.events.flush()
                await asyncio.sleep(period)
        finally:
            await self._cancel(set(self._tasks))
            await self.readout.stop()
            # A graceful stop (SIGTERM: app.run cancels this task) writes the Events of the
            # last status writes before it returns; the recorder may be shared (the guard's),
            # so it is flushed, not stopped, here
            await self.readout.events.flush()
            await self.informer.stop()

    async def _cancel(self, keys: set[tuple[str, str]]) -> None:
        tasks = [self._tasks.pop(k) for k in keys]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def reconcile_all(self) -> None:
        objs = list(self.informer.cache.values())
        live = {meta(o).get("uid") for o in objs}
        await self._cancel({k for k in self._tasks if k[0] not in live})
        for obj in objs:
            await self.reconcile(obj)

    async def reconcile(self, obj: Obj) -> None:
        name, uid = meta(obj)["name"], meta(obj)["uid"]
        status = obj.get("status") or {}
        if release.deleting(obj):
            if release.FINALIZER in release.finalizers(obj):
                await self._cancel({k for k in self._tasks if k[0] == uid})
                self.readout.deleting(obj)
                await self._pending(name, read_nodes(status), running=False)
                try:
                    await release.release(self.client, name)
                except (KubeError, KeptChanging, RuntimeError) as exc:
                    log.warning("NodeMaintenance %s: not released yet: %s", name, exc)
            return
        if release.FINALIZER not in release.finalizers(obj):
            # Before any node starts: a delete from now on waits for the give-back.
            await release.hold(self.client, name)
            return
        if status.get("phase") in TERMINAL:
            await self._pending(name, read_nodes(status), running=False)
            return
        try:
            spec = parse_spec(obj)
        except SpecError as exc:
            await self.status.failed(name, "InvalidSpec", str(exc))
            return
        progress = read_nodes(status)
        if not progress:
            selected = await self._select(spec)
            if not selected:
                await self.status.failed(name, "NoNodes", "no node matches the selection")
            else:
                await self.status.update(name, spec, {n: _unchanged for n in selected})
                failpoint("maintenance.operation.selected")
            return
        await self._pending(name, progress, running=True, uid=uid)
        for node, p in progress.items():
            # A new leader continues here. A task that ended stays listed until the
            # NodeMaintenance goes or the lead is lost, so a status read before its last
            # write never starts the node again.
            if in_progress(p.state, spec.uncordon) and (uid, node) not in self._tasks:
                self._start(name, uid, node, spec, p.state)
        if spec.paused:
            await self.status.update(name, spec, {})
            return
        started: list[str] = []
        now = rfc3339(self.clock())
        room: ClusterState | None = None
        if self._may_start(progress, spec):
            # One read of the cluster per pass that may start a node: the wave is chosen
            # by the room its stand-ins need (maintenance.roomwaves), not found out by a
            # refused drain.
            try:
                room = await read_cluster(self.client)
            except KubeError as exc:
                log.warning("NodeMaintenance %s: cluster not read, no node starts: %s",
                            name, exc)
                return
        options = spec.drain_settings(name).options

        def plan(obj: Obj) -> Obj:
            # Planned on the status just read (not the informer's copy, which may lag our
            # own last write), so a node is never started twice nor a budget overrun.
            old = obj.get("status") or {}
            nodes = read_nodes(old)
            facts = [self._facts(n) for n in nodes]
            pending = {n: p for n, p in nodes.items() if p.state == "Pending"}
            later = {n for n, p in pending.items() if p.reason == DEFERRED}
            busy = [n for n, p in nodes.items() if in_progress(p.state, spec.uncordon)]
            said = {n for n, p in pending.items() if p.reason == CANNOT_SURGE}
            if room is None:
                # No snapshot read (the informer's copy, older than this status, had no
                # slot free): no node starts unchecked by room, nor by a CannotSurge this
                # snapshot would have changed; the next pass reads the cluster.
                wave, still, back = Wave(start=(), held=None), {}, set()
            else:
                judge = WaveRoom(room, options, busy)
                # Re-decided on this snapshot (a node joined, stand-ins left), not
                # remembered: one that fits alone now goes back in line.
                still = judge.still_cannot_surge(said)
                wave = next_wave(facts, {n: p.state for n, p in nodes.items()},
                                 max_parallel=spec.max_parallel_nodes,
                                 unavailable_budget=spec.unavailable_budget(len(facts)),
                                 uncordon=spec.uncordon, later=later,
                                 not_now=self._not_now(name, later),
                                 last=set(still), room=judge.admit)
                back = said - set(still) - set(wave.waiting) - set(wave.start)
            # said on the node, why it waits (one still last and not tried this pass: in
            # this snapshot's words, the same reason, so no Event)
            for n, hold in {**still, **wave.waiting}.items():
                nodes[n] = nodes[n].to("Pending", WAITING[hold.code], hold.message[:500])
            for n in back:
                nodes[n] = nodes[n].to("Pending", "")  # back in line, not tried this pass
            current = int(old.get("currentWave") or 0) + (1 if wave.start else 0)
            for n in wave.start:
                # Written before the cordon: a new leader counts these against the budgets.
                nodes[n] = NodeProgress(n, "Cordoned", current, "Cordoning", started=now)
            started[:] = wave.start
            return {**old, **status_of(nodes.values(), spec.uncordon, spec.paused, current,
                                       int(meta(obj).get("generation") or 0))}

        if await self.status.put(name, plan):
            if started:
                failpoint("maintenance.wave.started")
            for n in started:
                # Taken off as the node starts (read afresh: the informer's copy may not
                # show a taint put on this pass), not at the next pass: a node with
                # nothing to evict is done within a period, and the operation would end
                # Succeeded with its taint still on.
                try:
                    await set_pending(self.client, n, name, pending=False)
                except (KubeError, KeptChanging) as exc:
                    log.warning("NodeMaintenance %s: pending taint on %s not removed: %s",
                                name, n, exc)
                self._start(name, uid, n, spec, "Cordoned")

    async def _pending(self, name: str, progress: Mapping[str, NodeProgress], *,
                       running: bool, uid: str | None = None) -> None:
        """The pending taint (maintenance.pending) on each node Pending in a running
        operation, and on no other node of it; read from the node informer, written only
        where it differs (an error: the next pass tries again). A node whose task runs
        here (operation `uid`) is not Pending, whatever an informer copy of the status
        older than the write that started it says."""
        for node, p in progress.items():
            obj = self.nodes.get(node)
            task = None if uid is None else self._tasks.get((uid, node))
            want = running and p.state == "Pending" and (task is None or task.done())
            if obj is None or want == (pending_of(obj) == name):
                continue
            try:
                await set_pending(self.client, node, name, pending=want)
            except (KubeError, KeptChanging) as exc:
                log.warning("NodeMaintenance %s: pending taint on %s not %s: %s", name,
                            node, "set" if want else "removed", exc)

    def _may_start(self, progress: Mapping[str, NodeProgress], spec: MaintenanceSpec) -> bool:
        """Whether a node may start on this pass (as the informer's status reads)."""
        busy = sum(in_progress(p.state, spec.uncordon) for p in progress.values())
        return busy < spec.max_parallel_nodes and any(
            p.state == "Pending" for p in progress.values())

    def _not_now(self, name: str, later: set[str]) -> set[str]:
        """The deferred nodes still in their backoff (a new leader, which did not see the
        refusals, retries them at once)."""
        now = time.monotonic()
        out = set()
        for node in later:
            when, times = self._deferred.get((name, node), (0.0, 0))
            if times and now - when < min(RETRY_MIN_SECONDS * 2 ** (times - 1),
                                          RETRY_MAX_SECONDS):
                out.add(node)
        return out

    def _facts(self, node: str) -> NodeFacts:
        obj = self.nodes.get(node)
        if obj is None:  # gone: unavailable, and its drain will say so
            return NodeFacts(node, ready=False, unschedulable=True)
        return NodeFacts(node, ready=is_node_ready(obj),
                         unschedulable=bool((obj.get("spec") or {}).get("unschedulable")))

    async def _select(self, spec: MaintenanceSpec) -> list[str]:
        names = list(spec.node_names)
        if spec.label_selector is not None:
            found, _ = await self.client.list(api_path("v1", "nodes"),
                                              {"labelSelector": spec.label_selector})
            names += [meta(n)["name"] for n in found if meta(n)["name"] not in names]
        return names

    def _start(self, name: str, uid: str, node: str, spec: MaintenanceSpec,
               state: NodeState) -> None:
        self._tasks[(uid, node)] = asyncio.create_task(
            self.node_task.run(name, node, spec, state), name=f"maintenance {name} {node}")
