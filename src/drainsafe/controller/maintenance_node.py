"""One node of a NodeMaintenance, as a task of the leader: cordon, drain, await, uncordon.

The reconciler (controller.maintenance) starts a task per node it has marked started, and
again on a new leader for every node its status says is in progress. Each step is written
to the status (controller.maintenance_status) *before* it is taken where it changes the
cluster (a node is marked Cordoned, then cordoned), and after it where it only completes,
so a new leader reads where the node is and continues:

- Cordoned: cordon again (idempotent: drain.cordon, with the fleet's "queued" state, so a
  node whose drain never starts gets its cordon back, as drainsafe drain does; the record
  names this NodeMaintenance, drain.ownership.CORDONED_FOR), then drain.
- Draining: drain again with the same engine `drainsafe drain` runs (drain.execute
  NodeDrainer): its record on the node names the pods it already evicted (by UID) and the
  surge on each workload, so no pod is evicted twice and a surge is finished or restored.
  A node whose record already says `drained` under this operation's cordon (the leader was
  lost between the drain's end and the Drained write) is not drained again: Drained is
  written, as that leader would have done next.
  Each capacity reading of the drain goes to controller.maintenance_readout.
- Refused before any eviction only for what the other nodes in progress hold
  (drain.preflight.only_waiting_on: no room for the surge, held by their cordons, their
  stand-ins or pods still terminating; or a workload one of them is surging): the cordon
  is given back and the node is Pending again, reason Deferred, the refusal its message,
  and the refusal is counted for the planner's backoff (controller.maintenance). Any other
  refusal fails the node.
- Drained: uncordon per spec.uncordon (drain.cordon.uncordon, which refuses a cordon that
  was not drainsafe's); AwaitingMaintenance: the node's boot ID, kubelet version and UID
  are recorded in its status row with that state (read from the API after the drain, with
  the drainsafe.io/maintained annotation already there, which therefore does not count),
  then the task waits (on the node informer) until spec.maintainedWhen says it is
  maintained (maintenance.maintained: the annotation naming the NodeMaintenance, set since,
  a node condition, a new boot ID or kubelet version, or a replaced node), then uncordons. With
  maintainedWhen.timeoutSeconds the wait ends at a deadline counted from the row's
  `finished` time (maintenance.maintained.wait_bound, so a new leader keeps the same
  one): the node informer's wait is bounded by it, and past it the node is Failed,
  MaintenanceTimedOut, left cordoned with drainsafe's record (audit lists it; deleting the
  NodeMaintenance gives it back, as any failed node's).

Cancelled (leadership lost, the operation deleted): a drain cancelled this way records
"interrupted" on the node and stays cordoned with its surge recorded, as Ctrl-C on
drainsafe drain does, and the next leader continues it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from drainsafe.controller.maintenance_readout import MaintenanceReadout
from drainsafe.controller.maintenance_status import StatusWriter
from drainsafe.drain.capacity import CapacityReading
from drainsafe.drain.cordon import NotOwned, cordon, uncordon
from drainsafe.drain.execute import NodeDrainer
from drainsafe.drain.ownership import (
    PROGRESS,
    Progress,
    cordoned_for,
    maintenance_ref,
    node_annotations,
)
from drainsafe.drain.preflight import only_waiting_on
from drainsafe.drain.sharedsurge import Surges
from drainsafe.failpoint import failpoint
from drainsafe.kube import Informer, KubeClient, KubeError, NotFound, WaitTimeout, api_path
from drainsafe.kube.objects import parse_time
from drainsafe.maintenance.maintained import (
    Recorded,
    WaitBound,
    Why,
    maintained,
    node_seen,
    record_of,
    stale_mark,
    wait_bound,
)
from drainsafe.maintenance.progress import NodeState, in_progress, read_nodes
from drainsafe.maintenance.reasons import NodeReason
from drainsafe.maintenance.spec import MaintenanceSpec

log = logging.getLogger(__name__)
Obj = dict[str, Any]
DEFERRED: NodeReason = "Deferred"  # the reason of a Pending node refused for what others hold
# (NodeMaintenance name, node) deferred -> (when last, by time.monotonic; how many times)
Deferrals = dict[tuple[str, str], tuple[float, int]]
TIMED_OUT: NodeReason = "MaintenanceTimedOut"
UNBOUNDED_WAIT = 3600.0  # a wait with no deadline wakes this often (re-checked, no effect)


class NodeTask:
    """What a node task needs of the reconciler: the API, both informers, the status
    writer, the readout, the surges shared by every drain of this process, and the
    deferrals the planner reads back."""

    def __init__(self, client: KubeClient, nodes: Informer, maintenances: Informer, *,
                 clock: Callable[[], float], readout: MaintenanceReadout,
                 status: StatusWriter, surges: Surges,
                 deferred: Deferrals) -> None:
        self.client, self.nodes, self.informer, self.clock = client, nodes, maintenances, clock
        self.readout, self.status = readout, status
        self.surges, self.deferred = surges, deferred

    async def run(self, name: str, node: str, spec: MaintenanceSpec,
                  state: NodeState) -> None:
        try:
            await self._steps(name, node, spec, state)
        except (KubeError, WaitTimeout, RuntimeError) as exc:
            # The node stays as the last step left it (cordoned and recorded, if so).
            await self.status.step(name, spec, node, "Failed", "Error", str(exc)[:500],
                                   finished=True)

    async def _steps(self, name: str, node: str, spec: MaintenanceSpec,
                     state: NodeState) -> None:
        step = functools.partial(self.status.step, name, spec, node)
        settings = spec.drain_settings(f"NodeMaintenance {name}")
        drained_at: str | None = None  # the row's finished time, as this task wrote it
        if state == "Draining" and await self._drained_before(name, node):
            # A leader lost after this drain ended, before its Drained write: the node is
            # drained, and is drained once; what that leader would have done next follows.
            state, drained_at = await self._drained(name, node, spec)
        if state == "Cordoned":
            await cordon(self.client, node, reason=settings.reason, state="queued",
                         clock=self.clock, operation=maintenance_ref(name))
            failpoint("maintenance.node.cordoned")
            await step("Draining", "Draining")
            failpoint("maintenance.node.draining")
            state = "Draining"
        if state == "Draining":
            obj = self.informer.get(name) or {}
            others = [n for n, p in read_nodes(obj.get("status") or {}).items()
                      if n != node and in_progress(p.state, spec.uncordon)]

            def read(r: CapacityReading) -> None:  # each reading of the drain's watch
                self.readout.reading(self.informer.get(name), name, node, r, self.status.put)

            report = await NodeDrainer(self.client, node, settings, draining=others,
                                       clock=self.clock, surges=self.surges,
                                       on_capacity=read).run()
            if not report.ok:
                why = report.failure or "the drain did not finish"
                if (report.refused and report.plan is not None
                        and only_waiting_on(report.plan, others)):
                    with contextlib.suppress(NotOwned):
                        await uncordon(self.client, node)
                    times = self.deferred.get((name, node), (0.0, 0))[1] + 1
                    self.deferred[(name, node)] = (time.monotonic(), times)
                    await step("Pending", DEFERRED, why)
                    return
                if report.refused:
                    # refused before any eviction: give our queued cordon back, as
                    # drainsafe drain does for a node it never started
                    with contextlib.suppress(NotOwned):
                        await uncordon(self.client, node)
                await step("Failed", "Refused" if report.refused else "DrainFailed", why,
                           finished=True)
                return
            failpoint("maintenance.node.drained")
            state, drained_at = await self._drained(name, node, spec)
        marked: Why | None = None
        if state == "AwaitingMaintenance":
            failpoint("maintenance.node.awaiting")
            bound = self._wait_bound(name, node, spec, drained_at)
            marked = await self._await_maintained(name, node, spec, bound)
            if marked is None:
                # The cordon and its record stay: a failed node is drainsafe's to give
                # back (NodeMaintenance deleted) or a person's (drainsafe uncordon).
                await step("Failed", TIMED_OUT, bound.message(), finished=True)
                return
            state = "Drained"
        if state == "Drained" and spec.uncordon != "Never":
            failpoint("maintenance.node.uncordoning")
            try:
                await uncordon(self.client, node)
            except NotOwned as exc:
                await step("Failed", "NotOurCordon", str(exc))
                return
            failpoint("maintenance.node.uncordoned")
            await step("Uncordoned", "Uncordoned",
                       f"maintained: {marked}" if marked else "")

    async def _drained_before(self, name: str, node: str) -> bool:
        """Whether this operation's drain of `node` already ended drained: its record says
        so under this operation's cordon (read from the API, not the informer, which may
        lag it). Our Cordoned step set the record `queued`, so only our own drain can have
        made it `drained`; the status still says Draining when the leader that drained it
        was lost before writing Drained."""
        try:
            obj = await self.client.get(api_path("v1", "nodes", name=node))
        except NotFound:
            return False
        return (cordoned_for(obj) == name and PROGRESS in node_annotations(obj)
                and Progress.of(obj).state == "drained")

    async def _drained(self, name: str, node: str, spec: MaintenanceSpec
                       ) -> tuple[NodeState, str | None]:
        """The Drained write (AwaitingMaintenance under WhenMaintained); the state and the
        row's finished time written."""
        state: NodeState = ("AwaitingMaintenance" if spec.uncordon == "WhenMaintained"
                            else "Drained")
        # Read after the drain, not from the informer's copy: a maintained mark put on
        # before the drain ended is recorded, so it does not count (maintenance.maintained)
        recorded = await self._read_record(node)
        drained_at = await self.status.step(name, spec, node, state, "Drained",
                                            self._stale(recorded, spec, name),
                                            finished=True, recorded=recorded)
        return state, drained_at

    def _record(self, node: str) -> Recorded | None:
        obj = self.nodes.get(node)
        return None if obj is None else record_of(node_seen(obj))

    async def _read_record(self, node: str) -> Recorded | None:
        """The node read after its drain. An API error falls back to the informer's copy
        (behind by a watch event at most): failing a drained node for one read would leave
        it cordoned for a person, where the copy misses only a mark set in that instant."""
        try:
            return record_of(node_seen(await self.client.get(api_path("v1", "nodes",
                                                                      name=node))))
        except NotFound:
            return None
        except KubeError as exc:
            log.warning("%s: node not read after its drain (%s); recorded from the cache",
                        node, exc)
            return self._record(node)

    @staticmethod
    def _stale(recorded: Recorded | None, spec: MaintenanceSpec, name: str) -> str:
        if spec.uncordon != "WhenMaintained":
            return ""
        return stale_mark(recorded, spec.maintained_when, name) or ""

    def _wait_bound(self, name: str, node: str, spec: MaintenanceSpec,
                    drained_at: str | None) -> WaitBound:
        """The deadline of the node's wait, from the finished time this task just wrote,
        or else its row's (a new leader: the informer's status, which started this task)."""
        finished, started = drained_at, None
        if finished is None:
            row = read_nodes((self.informer.get(name) or {}).get("status") or {}).get(node)
            if row is not None:
                finished, started = row.finished, parse_time(row.started)
        now = self.clock()
        return wait_bound(finished, now if started is None else started,
                          spec.maintained_when)

    async def _await_maintained(self, name: str, node: str, spec: MaintenanceSpec,
                                bound: WaitBound) -> Why | None:
        """Wait (the node stays cordoned and recorded meanwhile) until spec.maintainedWhen
        says the node is maintained (maintenance.maintained), against what was recorded
        when its drain ended; the row's reason says NodeGone while no node of the name
        exists. Returns why it is maintained, or None once past `bound`'s deadline unmarked
        (a mark is checked first, so one made while no leader ran still counts)."""
        obj = self.informer.get(name) or {}
        row = read_nodes(obj.get("status") or {}).get(node)
        recorded = row.recorded if row is not None else None
        if recorded is None and (recorded := self._record(node)) is not None:
            # a status written before the record existed: from now on, as a new leader sees
            # it. Not its maintained mark: that may have been set since (as before the record)
            recorded = replace(recorded, maintained="")
            await self.status.step(name, spec, node, "AwaitingMaintenance", "Drained",
                                   recorded=recorded)
        shown: Why = "AwaitingMaintenance"

        def verdict(cache: Mapping[str, Obj]) -> tuple[bool, Why]:
            seen = cache.get(node)
            return maintained(None if seen is None else node_seen(seen), recorded,
                              spec.maintained_when, name)

        def changed(cache: Mapping[str, Obj], shown: Why) -> bool:
            ok, why = verdict(cache)
            return ok or why != shown

        while True:
            # Woken by a change of the node or at the deadline (a requeue, not a poll).
            left = bound.left(self.clock())
            with contextlib.suppress(WaitTimeout):
                await self.nodes.wait_for(functools.partial(changed, shown=shown),
                                          timeout=UNBOUNDED_WAIT if left is None else left,
                                          what=f"{node} maintained")
            ok, why = verdict(self.nodes.cache)
            if ok:
                return why
            if bound.expired(self.clock()):
                return None
            if why != shown:
                shown = why
                await self.status.step(name, spec, node, "AwaitingMaintenance",
                                       "NodeGone" if why == "NodeGone" else "Drained",
                                       "no node of this name; waiting for one to register"
                                       if why == "NodeGone" else
                                       self._stale(recorded, spec, name))
