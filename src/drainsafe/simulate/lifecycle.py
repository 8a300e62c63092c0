"""The drain and pod lifecycle as a small discrete-event process in virtual time.

The engine in parts, one concept each, stacked: the clock (simulate.events), pods and the
consumers' routing (simulate.pods), grouped workloads and their moves (simulate.groupmoves),
the strategies' eviction decisions (simulate.strategies), and here the run itself: set-up,
the event loop and the nodes' lifecycle (drain, upgrade, back; waves).

Events are per node and per pod (drain start, eviction attempt, pod gone, replacement
Ready, node back), never per request: a 1,000-node upgrade is a few tens of thousands of
events. A consumer starting or stopping to route to a pod is no event either: those
changes wait in a queue per consumer and are applied at the next deletion, the only moment
the routed counts are read. What each terminating pod means for its traffic is written down
per deletion (time, the arrival rate each consumer sends it, each consumer's propagation
delay) and counted afterwards, vectorised, by drainsafe.simulate.requests.

Kubernetes behaviour modelled (and where it comes from):
- Eviction goes through the PodDisruptionBudget (drainsafe.pdb, the disruption controller's
  arithmetic); a refused eviction is retried every `eviction_retry` seconds, as kubectl drain
  does (5 s). A not-Ready pod may be evicted per unhealthyPodEvictionPolicy.
- The termination timeline of a deleted pod is drainsafe.budget.Budget: SIGTERM when the
  drain delay (preStop) ends, or at the grace period if the hook overruns it; SIGKILL at
  Budget.sigkill_at (grace, or grace + 2 s after an overrunning hook). Source:
  kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/ ("Hook handler execution")
  and kubernetes/kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go (killContainer).
- Endpoints propagate both ways, per consumer (kube-proxy, an ingress, a load balancer): a
  consumer starts routing to a pod that turned Ready after a delay drawn from its
  propagation distribution, and stops routing new requests to a deleted pod after another
  draw (additions draw on streams of their own, so the deletions' draws stay where they
  were). kube-proxy takes added and removed endpoints through the same change tracker and
  sync (kubernetes/kubernetes pkg/proxy/endpointschangetracker.go). Each consumer keeps its
  own count of the pods it routes to and splits its share of the workload's rate evenly over
  them: at a pod's deletion consumer c sends it share_c x rate / (pods c routes to). Hence
  make before break loses more than an even split over the Ready pods says: the old pod is
  evicted the moment its replacement is Ready, before any consumer routes to the
  replacement, so it still carries its pre-surge share (1/2, not 1/3, with one of two pods
  surged; measured in the lab, tests/simulate/test_sim_lab.py).
  Simplifications: a pod's rates are fixed at its deletion for its whole termination, so an
  endpoint added within its race window does not lower them (exact when addition and
  removal take equally long, as with a constant propagation; otherwise an over-count by at
  most that drop); a consumer that has not learnt of a pod by its deletion never routes to
  it (it learns of a terminating endpoint).
- kubectl-like drain: cordon, evict every pod on the node at once; the ReplicaSet creates a
  replacement as soon as a pod is deleted; it runs only where a schedulable node has free GPUs.
- drainsafe drain (what `drainsafe drain --strategy surge` does for Deployments,
  src/drainsafe/drain/execute.py): cordon, scale each workload up by all of its pods on the
  node in one step, and once all of those new pods are Ready evict the old ones as fast as
  the PDB allows (the drain watches the budget's status, so a refused eviction is retried as
  soon as a pod turns Ready, not on a 5 s timer); each accepted eviction lowers the scale by
  one, so the ReplicaSet does not replace the evicted pod. Still through the PDB. A
  Deployment's surge is shared by the nodes draining it (drain.sharedsurge: join on room,
  the counting gate; simulate.surgelock SharedSurges, simulate.strategies); a StatefulSet's
  or LeaderWorkerSet's is one node's at a time (the drainers' lock per workload), and so is
  a Deployment's under `upgrade.surge_sharing: lock` (the engine before issue 30). A node's
  drain is done when its steps are. Under a NodeMaintenance the planner holds a node whose
  StatefulSet or LeaderWorkerSet a node in progress surges, or whose surge has no room
  beside theirs, as the controller's waves by room do (Engine.room_check), and the
  preflight defers a node that still meets either (Engine.deferred).
- surge (make before break, per pod): cordon, start a replacement for each pod first, evict
  the old pod only when its own replacement is Ready (still through the PDB).
- A node is upgraded once its last pod is gone, comes back after `node_upgrade`, and then
  takes Pending pods; `parallelism` nodes are in the upgrade at once. Surge nodes join at the
  start, already upgraded, and are not drained. With `upgrade.maintenance` the nodes that
  start are a NodeMaintenance's waves (drainsafe.simulate.maintenance: the controller's
  planner, maxParallelNodes and maxUnavailable).
- Grouped workloads (a LeaderWorkerSet's groups spanning several nodes): the rules, and what
  each strategy does with a group, are in drainsafe.simulate.groups; the engine's part is
  drainsafe.simulate.groupmoves. Consumers catch up on their routing at every deletion before
  the deleted pod stops being Ready, so a pod whose only later deletion is its own (a
  recreated group's leader, a stand-in's) still carries its traffic.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from drainsafe.maintenance.roomwaves import Hold
from drainsafe.maintenance.waves import Admit
from drainsafe.simulate.distributions import SurvivalTable
from drainsafe.simulate.events import BACK, DRAIN, EVICT, GONE, READY, SURGE, WAVE
from drainsafe.simulate.groups import GroupLog
from drainsafe.simulate.maintenance import Waves
from drainsafe.simulate.pods import (
    DELETED,
    PENDING,
    READY_STATE,
    TERMINATING,
    TerminationTimes,
    termination_times,
)
from drainsafe.simulate.scenario import Scenario
from drainsafe.simulate.strategies import Strategies, needs_fit
from drainsafe.simulate.surgelock import first_fit

__all__ = ["Lifecycle", "TerminationTimes", "run_lifecycle", "termination_times"]


@dataclass
class Lifecycle:
    """What happened, as plain arrays; the input of the request counting."""

    scenario: Scenario
    # One row per deleted pod that was serving traffic.
    deleted_at: NDArray[np.float64]
    workload: NDArray[np.int64]
    pod_rate: NDArray[np.float64]
    """shape (deletions, consumers): arrivals per second each consumer routed to the pod
    when it was deleted (0 from a consumer that had not yet learnt of it)"""
    accepted_rate: NDArray[np.float64]
    """of those, the ones it could take: at most max_concurrency / E[D] in all (Little's
    law), each consumer's in proportion"""
    propagation: NDArray[np.float64]
    """shape (deletions, consumers)"""
    gone_after: NDArray[np.float64]
    """seconds from deletion to the pod's exit"""
    # Ready pods per workload over time: step function (times, counts[w]).
    ready_times: NDArray[np.float64]
    ready_counts: NDArray[np.int64]
    """shape (len(ready_times), workloads): ready pods from ready_times[i] on"""
    node_drain_started: NDArray[np.float64]
    node_empty: NDArray[np.float64]
    node_back: NDArray[np.float64]
    upgrade_started: float
    upgrade_finished: float
    """NaN when the upgrade never finishes (wedged)."""
    end: float
    events: int
    wedged: str | None = None
    pending_max: int = 0
    survival: list[SurvivalTable] = field(default_factory=list)
    times: list[TerminationTimes] = field(default_factory=list)
    groups: GroupLog = field(default_factory=GroupLog.empty)
    deferrals: int = 0
    """NodeMaintenance nodes drainsafe's preflight refused for what others held (each
    went back to Pending, retried last and alone after a backoff)."""



def run_lifecycle(scenario: Scenario) -> Lifecycle:
    return _Engine(scenario).run()


class _Engine(Strategies):
    """One run: set-up, the event loop, and the nodes' drain, upgrade and return."""

    def __init__(self, s: Scenario) -> None:
        super().__init__(s)
        self.drain_started = [math.nan] * s.nodes
        self.emptied = [math.nan] * s.nodes
        self.back = [math.nan] * s.nodes
        self.to_drain = deque(s.upgrade.nodes if s.upgrade.nodes is not None
                              else range(s.nodes))
        self.drained = tuple(self.to_drain)
        # drainsafe's engine under a NodeMaintenance: the controller's waves by room and
        # surge (room_check), and its preflight's deferral (deferred).
        self.by_room = s.upgrade.maintenance is not None and s.upgrade.strategy == "drainsafe"
        self.waves = None if s.upgrade.maintenance is None else Waves(
            s.upgrade.maintenance, self.drained, s.upgrade.parallelism, by_room=self.by_room)
        self.nodes_done = 0
        self.defers = self.by_room
        self.deferrals = 0
        self.plan_queued = False  # a WAVE event of this instant will run the planner

    def initial_placement(self) -> None:
        s = self.s
        for n in range(s.nodes):
            self.open_nodes[n] = None
        for w, wl in enumerate(s.workloads):
            if wl.group_size > 1:
                self.place_initial_groups(w)
                continue
            for _ in range(wl.replicas):
                p = self.new_pod(w)
                node = self.fit(wl.gpus)
                if node < 0:
                    # parse_scenario checked the GPU total; fragmentation can still defeat it.
                    raise ValueError(f"workload {wl.name}: replicas do not pack onto the "
                                     f"fleet ({wl.gpus} GPUs per pod)")
                self.place(p, node)
                self.pod_state[p] = READY_STATE
                self.ready[w] += 1
                self.ready_pods[w] += 1
                self.routed_by[p] = self.all_consumers
        self.ready_rows.append(list(self.ready))

    def run(self) -> Lifecycle:
        s = self.s
        self.initial_placement()
        start = s.upgrade.start
        for i in range(s.upgrade.surge_nodes):
            self.push(start + self.surge_ready.next(), SURGE, s.nodes + i)
        # The first batch is cordoned together, as upgrade tools do, so that no replacement
        # lands on a node whose drain starts in the same instant. By room, the planner
        # chooses it once the surge nodes due at the start have joined (after their
        # events): the cluster it reads has them.
        if self.by_room:
            first = []
            self.plan_queued = True
            self.push(start, WAVE, -1)
        else:
            first = ([self.to_drain.popleft()
                      for _ in range(min(s.upgrade.parallelism, len(self.drained)))]
                     if self.waves is None else self.waves.start(start))
        for node in first:
            self.cordoned[node] = True
            self.open_nodes.pop(node, None)
            self.push(start, DRAIN, node)

        handlers = {
            DRAIN: self.on_drain, EVICT: self.on_evict, GONE: self.on_gone,
            READY: self.on_ready, BACK: self.on_back, SURGE: self.on_surge,
            WAVE: self.on_wave,
        }
        heap = self.heap
        while heap:
            t, _, kind, arg = heapq.heappop(heap)
            self.now = t
            self.events += 1
            handlers[kind](arg)

        finished = self.nodes_done == len(self.drained)
        wedged = None if finished else self.wedge_reason()
        upgrade_finished = max(self.back[n] for n in self.drained) if finished else math.nan
        end = max(s.horizon, self.now)
        return Lifecycle(
            scenario=s,
            deleted_at=np.array(self.del_t, dtype=np.float64),
            workload=np.array(self.del_w, dtype=np.int64),
            pod_rate=np.array(self.del_rate, dtype=np.float64).reshape(
                len(self.del_t), len(s.consumers)),
            accepted_rate=np.array(self.del_accepted, dtype=np.float64).reshape(
                len(self.del_t), len(s.consumers)),
            propagation=np.array(self.del_prop, dtype=np.float64).reshape(
                len(self.del_t), len(s.consumers)),
            gone_after=np.array(self.del_gone, dtype=np.float64),
            ready_times=np.array(self.ready_times, dtype=np.float64),
            ready_counts=np.array(self.ready_rows, dtype=np.int64),
            node_drain_started=np.array(self.drain_started),
            node_empty=np.array(self.emptied),
            node_back=np.array(self.back),
            upgrade_started=start,
            upgrade_finished=upgrade_finished,
            end=end,
            events=self.events,
            wedged=wedged,
            pending_max=self.pending_max,
            survival=self.survival,
            times=self.times,
            groups=self.group_log(),
            deferrals=self.deferrals,
        )

    def on_drain(self, node: int) -> None:
        self.cordoned[node] = True
        self.open_nodes.pop(node, None)
        if self.defers and self.deferred(node):
            return
        self.drain_started[node] = self.now
        pods = sorted(self.node_pods[node])
        if not pods:
            self.node_emptied(node)
            return
        self.drain_pods(node, pods)

    def wedge_reason(self) -> str:
        s = self.s
        held = None if self.waves is None else self.waves.wedge_reason()
        if held:
            return held
        shared = self.shared_wedge()
        if shared:
            return shared
        for w, waiting in enumerate(self.waiters):
            if waiting:
                wl = s.workloads[w]
                what = (f"eviction of a whole group ({wl.group_size} pods)"
                        if wl.group_size > 1 and s.upgrade.strategy == "drainsafe"
                        else "eviction")
                return (f"workload {wl.name}: its PodDisruptionBudget allows no {what} "
                        f"and nothing will change that ({len(waiting)} pods waiting)")
        if self.pending:
            names = sorted({s.workloads[self.pod_w[p]].name for p in self.pending})
            hint = ("; make-before-break needs spare GPUs: add surge nodes"
                    if s.upgrade.strategy in ("surge", "drainsafe") else "")
            return (f"{len(self.pending)} pods of {', '.join(names)} wait for free GPUs that "
                    f"never come{hint}")
        return "the upgrade stopped before every node was drained"

    def node_emptied(self, node: int) -> None:
        self.emptied[node] = self.now
        if node in self.node_steps:
            self.awaiting_steps.add(node)  # drainsafe: a group's restore is still to come
            return
        self.node_drained(node)

    def node_drained(self, node: int) -> None:
        self.up[node] = False
        self.push(self.now + self.node_upgrade.next(), BACK, node)

    def on_back(self, node: int) -> None:
        self.back[node] = self.now
        self.up[node] = True
        self.cordoned[node] = False
        self.nodes_done += 1
        self.open_node(node)
        self.schedule_pending()
        if self.waves is not None:
            self.start_drains(self.waves.back(node, self.now, self.room_check()))
        elif self.to_drain:
            self.push(self.now, DRAIN, self.to_drain.popleft())

    def deferred(self, node: int) -> bool:
        """NodeMaintenance: drainsafe's preflight refuses `node` for what the nodes in
        progress hold (a workload one of them surges, or room for its surge: their cordons,
        their new pods; or a surge node still to join), and the controller defers it: the
        cordon given back, the node Pending again, retried last and alone after a backoff
        (controller/maintenance_node.py, controller/maintenance.py; drain/preflight.py
        only_waiting_on). No room with nothing that could give it back is no deferral: the
        surge waits Pending, as before.
        """
        assert self.waves is not None
        owned, no_room = self.surge_blocked(node)
        room_may_come = len(self.waves.in_progress) > 1 or not all(
            self.up[self.s.nodes:])
        if not owned and not (no_room and room_may_come):
            return False
        self.deferrals += 1
        self.cordoned[node] = False
        self.open_node(node)
        self.schedule_pending()
        self.push(self.waves.defer(node, self.now), WAVE, node)
        self.on_wave(node)  # its slot is free: the planner starts others in its place
        return True

    def room_check(self) -> Admit | None:
        """The planner's check of one call, as the controller's WaveRoom.admit decides
        (None: not checked, off the drainsafe engine). In its order: a workload of the node
        surged for a node in progress or of the wave so far (the engine's lock; not a
        shared Deployment's) holds it WaitingForSurge; then its
        surge must fit beside what theirs still need (WaitingForRoom), or alone, with
        nothing in progress or starting (else CannotSurge). Nothing changes within a call,
        so the plans of the nodes in progress and the wave are made once per wave size."""
        if not self.by_room:
            return None
        waves = self.waves
        assert waves is not None
        plans: dict[int, tuple[int, list[int], list[int]]] = {}
        surged: dict[int, set[int]] = {}
        fits: dict[tuple[int, tuple[tuple[int, int], ...]], bool] = {}
        holding: dict[int, set[int]] = {}
        for w, n in self.locks.holder.items():
            holding.setdefault(n, set()).add(w)

        def room(wave: Sequence[str], name: str) -> Hold | None:
            # The nodes in progress as the planner has them when it asks (a node back
            # has left them by then).
            base = [*waves.in_progress, *(int(n) for n in wave)]
            candidate = int(name)
            if base:
                if len(wave) not in surged:
                    surged[len(wave)] = set().union(
                        *(self.surging(n) | holding.get(n, set()) for n in base))
                shared = sorted(self.surging(candidate) & surged[len(wave)])
                if shared:
                    return Hold("surging", f"{self.s.workloads[shared[0]].name} is surged "
                                "for a node in progress (one surge of a workload at a time)")
            if len(wave) not in plans:
                plans[len(wave)] = self.room_plan(base)
            short, free, order = plans[len(wave)]
            if self.free[candidate] > 0:
                # Its cordon takes its free GPUs away: plan again without them.
                after = self.room_plan([*base, candidate])[0]
            else:
                # No free GPU of it in the plan: the same plan, and its own surge after.
                needs = self.surge_needs(candidate)
                if (len(wave), needs) not in fits:
                    fits[(len(wave), needs)] = needs_fit(needs, list(free), order)
                after = short + (not fits[(len(wave), needs)])
            if after <= short:
                return None
            if base:
                return Hold("no-room", f"node {name}: no room for its surge beside the "
                            "nodes in progress")
            return Hold("cannot-surge", f"cannot surge: no room for node {name}'s surge")

        return room

    def surging(self, node: int) -> set[int]:
        """The workloads a drain of `node` surges under the lock: those of its pods not
        going (a shared Deployment's surge is no one's to hold)."""
        return {w for p in self.node_pods[node]
                if self.pod_state[p] not in (TERMINATING, DELETED)
                and not self.sharing(w := self.pod_w[p])}

    def room_plan(self, nodes: list[int]) -> tuple[int, list[int], list[int]]:
        """As drain.roomwaves plans a wave: `nodes` (cordoned, or about to be) with what
        their surges still need, first fit over the schedulable nodes' free GPUs after the
        Pending pods. Returns how many things find no room (a Pending pod, a node's
        surge), and the free GPUs and node order left. A candidate fits when the plan with
        it leaves nothing short that the plan without it does not (its own surge, and the
        room its cordon takes from the others and from the Pending pods)."""
        cordoned = set(nodes)
        order = [n for n in self.open_nodes if n not in cordoned]
        free = list(self.free)
        short = 0
        for p in self.pending:
            if self.pod_state[p] == PENDING and self.pod_group[p] < 0:
                short += not first_fit(free, order, self.s.workloads[self.pod_w[p]].gpus, 1)
        short += sum(not self.surge_fits(n, free, order) for n in nodes)
        return short, free, order

    def plan_soon(self) -> None:
        """The planner runs at this instant, after the events already due now (once)."""
        if not self.plan_queued:
            self.plan_queued = True
            self.push(self.now, WAVE, -1)

    def on_wave(self, node: int) -> None:
        """The planner runs again (a deferred node's backoff is over, one left, room or a
        surge came back)."""
        assert self.waves is not None
        if node < 0:
            self.plan_queued = False
        self.start_drains(self.waves.start(self.now, self.room_check()))

    def start_drains(self, nodes: list[int]) -> None:
        """The planner started `nodes`: their drains begin now. By room they are cordoned
        at once, as the first batch is, so no new pod of this instant lands on a node the
        planner counted as going."""
        for n in nodes:
            if self.by_room:
                self.cordoned[n] = True
                self.open_nodes.pop(n, None)
            self.push(self.now, DRAIN, n)

    def step_finished(self, key: tuple[int, int]) -> None:
        super().step_finished(key)
        if self.by_room:
            self.plan_soon()  # a surge over, its room back: the planner runs again

    def on_surge(self, node: int) -> None:
        self.up[node] = True
        self.open_node(node)
        self.schedule_pending()
        if self.by_room:
            self.plan_soon()  # room came: the planner runs again
