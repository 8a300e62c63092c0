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
  Each capacity reading of the drain goes to controller.maintenance_readout.
- Refused before any eviction only for what the other nodes in progress hold
  (drain.preflight.only_waiting_on: no room for the surge, held by their cordons, their
  stand-ins or pods still terminating; or a workload one of them is surging): the cordon
  is given back and the node is Pending again, reason Deferred, the refusal its message,
  and the refusal is counted for the planner's backoff (controller.maintenance). Any other
  refusal fails the node.
- Drained: uncordon per spec.uncordon (drain.cordon.uncordon, which refuses a cordon that
  was not drainsafe's); AwaitingMaintenance: the node's boot ID, kubelet version and UID
  are recorded in its status row with that state, then the task waits (on the node
  informer) until spec.maintainedWhen says it is maintained (maintenance.maintained: the
  annotation drainsafe.io/maintained = the NodeMaintenance's name, a node condition, a new
  boot ID or kubelet version, or a replaced node), then uncordons. With
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
import time
from collections.abc import Callable, Mapping
from typing import Any

from drainsafe.controller.maintenance_readout import MaintenanceReadout
from drainsafe.controller.maintenance_status import StatusWriter
from drainsafe.drain.capacity import CapacityReading
from drainsafe.drain.cordon import NotOwned, cordon, uncordon
from drainsafe.drain.execute import NodeDrainer
from drainsafe.drain.ownership import maintenance_ref
from drainsafe.drain.preflight import only_waiting_on
from drainsafe.drain.sharedsurge import Surges
from drainsafe.kube import Informer, KubeClient, KubeError, WaitTimeout
from drainsafe.kube.objects import parse_time
from drainsafe.maintenance.maintained import (
    Recorded,
    WaitBound,
    Why,
    maintained,
    node_seen,
    record_of,
    wait_bound,
)
from drainsafe.maintenance.progress import NodeState, in_progress, read_nodes
from drainsafe.maintenance.reasons import NodeReason
from drainsafe.maintenance.spec import MaintenanceSpec

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
        if state == "Cordoned":
            await cordon(self.client, node, reason=settings.reason, state="queued",
                         clock=self.clock, operation=maintenance_ref(name))
            await step("Draining", "Draining")
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
            state = "AwaitingMaintenance" if spec.uncordon == "WhenMaintained" else "Drained"
            drained_at = await step(state, "Drained", finished=True,
                                    recorded=self._record(node))
        marked: Why | None = None
        if state == "AwaitingMaintenance":
            bound = self._wait_bound(name, node, spec, drained_at)
            marked = await self._await_maintained(name, node, spec, bound)
            if marked is None:
                # The cordon and its record stay: a failed node is drainsafe's to give
                # back (NodeMaintenance deleted) or a person's (drainsafe uncordon).
                await step("Failed", TIMED_OUT, bound.message(), finished=True)
                return
            state = "Drained"
        if state == "Drained" and spec.uncordon != "Never":
            try:
                await uncordon(self.client, node)
            except NotOwned as exc:
                await step("Failed", "NotOurCordon", str(exc))
                return
            await step("Uncordoned", "Uncordoned",
                       f"maintained: {marked}" if marked else "")

    def _record(self, node: str) -> Recorded | None:
        obj = self.nodes.get(node)
        return None if obj is None else record_of(node_seen(obj))

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
            # a status written before the record existed: from now on, as a new leader sees it
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
                                       if why == "NodeGone" else "")
