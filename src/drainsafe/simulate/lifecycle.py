"""The drain and pod lifecycle as a small discrete-event process in virtual time.

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
  one, so the ReplicaSet does not replace the evicted pod. Still through the PDB.
- surge (make before break, per pod): cordon, start a replacement for each pod first, evict
  the old pod only when its own replacement is Ready (still through the PDB).
- A node is upgraded once its last pod is gone, comes back after `node_upgrade`, and then
  takes Pending pods; `parallelism` nodes are in the upgrade at once. Surge nodes join at the
  start, already upgraded, and are not drained. With `upgrade.maintenance` the nodes that
  start are a NodeMaintenance's waves (drainsafe.simulate.maintenance: the controller's
  planner, maxParallelNodes and maxUnavailable).
- Grouped workloads (a LeaderWorkerSet's groups spanning several nodes): the rules, and what
  each strategy does with a group, are in drainsafe.simulate.groups; the engine's part is
  the "groups" section below. Consumers catch up on their routing at every deletion before
  the deleted pod stops being Ready, so a pod whose only later deletion is its own (a
  recreated group's leader, a stand-in's) still carries its traffic.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from drainsafe.pdb import status, unhealthy_pod_may_be_evicted
from drainsafe.simulate.distributions import SurvivalTable, survival_table
from drainsafe.simulate.groups import GroupLog, disruptions_needed, place_group, serves
from drainsafe.simulate.maintenance import Waves
from drainsafe.simulate.scenario import Scenario
from drainsafe.simulate.traffic import Rate

# Event kinds
_DRAIN, _EVICT, _GONE, _READY, _BACK, _SURGE = range(6)
# Pod states
_PENDING, _STARTING, _READY_STATE, _TERMINATING, _DELETED = range(5)

_CHUNK = 4096


@dataclass(frozen=True)
class TerminationTimes:
    """Per workload, seconds after deletion: listener closed, in-flight work cut, and how."""

    close: float
    cut: float
    cut_by_deadline: bool
    """True: the server's shutdown deadline ends the stragglers; False: SIGKILL does."""


def termination_times(scenario: Scenario) -> list[TerminationTimes]:
    out = []
    for w in scenario.workloads:
        budget = w.termination.budget
        close = min(budget.drain_delay, budget.grace)
        deadline_end = close + budget.shutdown_deadline
        cut = min(deadline_end, budget.sigkill_at)
        out.append(TerminationTimes(close=close, cut=cut,
                                    cut_by_deadline=deadline_end < budget.sigkill_at))
    return out


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


class _Sampler:
    """Pre-drawn samples in chunks, so the event loop never calls numpy per event.

    Each stream has its own generator, so changing one setting (say the drain delay) leaves
    the other streams' draws where they were: sweeps compare settings on common random numbers.
    """

    def __init__(self, draw: object, rng: np.random.Generator) -> None:
        self._draw = draw
        self._rng = rng
        self._buf: list[float] = []
        self._i = 0

    def next(self) -> float:
        if self._i >= len(self._buf):
            self._buf = self._draw(self._rng, _CHUNK).tolist()  # type: ignore[operator]
            self._i = 0
        value = self._buf[self._i]
        self._i += 1
        return float(value)


def run_lifecycle(scenario: Scenario) -> Lifecycle:
    return _Engine(scenario).run()


class _Engine:
    def __init__(self, s: Scenario) -> None:
        self.s = s
        nc, nw = len(s.consumers), len(s.workloads)
        # Streams added later go last: spawned children keep their index, so the earlier
        # streams draw what they drew before.
        seeds = np.random.SeedSequence(s.seed).spawn(6 + 2 * nc + nw)
        rngs = [np.random.default_rng(x) for x in seeds]
        self.node_upgrade = _Sampler(s.upgrade.node_upgrade.sample, rngs[0])
        self.surge_ready = _Sampler(s.upgrade.surge_ready.sample, rngs[1])
        self.uniform = _Sampler(lambda r, n: r.random(n), rngs[2])
        self.prop = [_Sampler(c.propagation.sample, rngs[6 + i])
                     for i, c in enumerate(s.consumers)]
        base = 6 + nc
        self.startup = [_Sampler(w.startup.sample, rngs[base + i])
                        for i, w in enumerate(s.workloads)]
        base += nw
        self.prop_add = [_Sampler(c.propagation.sample, rngs[base + i])
                         for i, c in enumerate(s.consumers)]
        self.rates = [Rate(w.rate, s.start_hour, w.diurnal) for w in s.workloads]
        self.times = termination_times(s)
        self.survival = [survival_table(w.durations) for w in s.workloads]
        self.shares = [c.share for c in s.consumers]

        n_nodes = s.nodes + s.upgrade.surge_nodes
        self.gpus = s.gpus_per_node
        self.free = [s.gpus_per_node] * n_nodes
        self.up = [True] * s.nodes + [False] * s.upgrade.surge_nodes
        self.cordoned = [False] * n_nodes
        self.node_pods: list[set[int]] = [set() for _ in range(n_nodes)]
        # Schedulable nodes with free GPUs, in node order for first-fit placement.
        self.open_nodes: dict[int, None] = {}

        self.pod_w: list[int] = []
        self.pod_node: list[int] = []
        self.pod_state: list[int] = []
        self.pod_replaces: list[int] = []
        self.replaced_by: dict[int, int] = {}
        self.pod_first_refusal: list[float] = []

        self.ready = [0] * nw
        self.matched = [0] * nw
        self.pending_of = [0] * nw
        # routed[c][w]: pods of workload w consumer c sends traffic to (Ready ones it has
        # learnt of, deleted ones it has not yet dropped), as of the last catch_up.
        self.routed = [[w.replicas for w in s.workloads] for _ in range(nc)]
        # Per consumer, the changes it makes later: (time, pod, +1 learns of it | -1 drops it).
        self.route_changes: list[list[tuple[float, int, int]]] = [[] for _ in range(nc)]
        self.all_consumers = (1 << nc) - 1
        self.routed_by: list[int] = []  # per pod, a bit per consumer that routes to it
        self.waiters: list[list[int]] = [[] for _ in range(nw)]
        # drainsafe strategy: the surge of one workload on one node is one step: its old
        # pods are evicted once every new pod of the step is Ready.
        self.step_old: dict[tuple[int, int], list[int]] = {}
        self.step_new: dict[tuple[int, int], set[int]] = {}
        self.step_of: dict[int, tuple[int, int]] = {}  # new pod -> its step

        # Grouped workloads (drainsafe.simulate.groups): a slot is a replica's identity
        # (the group index), a group one incarnation of it, all of its pods together.
        self.size = [w.group_size for w in s.workloads]
        self.ready_pods = [0] * nw  # what a PodDisruptionBudget counts healthy
        self.pod_group: list[int] = []
        self.g_w: list[int] = []
        self.g_slot: list[int] = []
        self.g_pods: list[list[int]] = []
        self.g_state: list[int] = []
        self.g_ready: list[int] = []  # its pods Ready
        self.g_live: list[int] = []  # its pods not yet gone, once it is deleted
        self.g_spell: list[int] = []  # its current serving spell
        # Serving spells (drainsafe.simulate.groups.GroupLog).
        self.sp_group: list[int] = []
        self.sp_from: list[float] = []
        self.sp_until: list[float] = []
        self.slot_w: list[int] = []
        self.slot_group: list[int] = []
        self.slot_removed: list[bool] = []
        self.slot_standin: list[bool] = []
        # Make before break for groups: per drained slot, its move; per stand-in slot, the
        # slot it stands in for; per drainsafe step (node, workload), the slots it moves.
        self.moves: dict[int, _Move] = {}
        self.standin_for: dict[int, int] = {}
        self.group_steps: dict[tuple[int, int], list[int]] = {}  # stand-ins to be Ready
        self.step_moves: dict[tuple[int, int], list[int]] = {}  # moves to finish together
        self.pending: deque[int] = deque()

        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.events = 0
        self.now = 0.0

        self.ready_times: list[float] = [0.0]
        self.ready_rows: list[list[int]] = []

        self.del_t: list[float] = []
        self.del_w: list[int] = []
        self.del_rate: list[list[float]] = []
        self.del_accepted: list[list[float]] = []
        # A pod full of requests turns the rest away: it takes at most C / E[D] per second.
        self.max_accept = [math.inf if w.max_concurrency is None
                           else w.max_concurrency / max(w.durations.mean, 1e-9)
                           for w in s.workloads]
        self.del_prop: list[list[float]] = []
        self.del_gone: list[float] = []

        self.drain_started = [math.nan] * s.nodes
        self.emptied = [math.nan] * s.nodes
        self.back = [math.nan] * s.nodes
        self.to_drain = deque(s.upgrade.nodes if s.upgrade.nodes is not None
                              else range(s.nodes))
        self.drained = tuple(self.to_drain)
        self.waves = None if s.upgrade.maintenance is None else Waves(
            s.upgrade.maintenance, self.drained, s.upgrade.parallelism)
        self.nodes_done = 0
        self.pending_max = 0

    # ------------------------------------------------------------------ helpers
    def push(self, t: float, kind: int, arg: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, arg))

    def new_pod(self, w: int, replaces: int = -1) -> int:
        p = len(self.pod_w)
        self.pod_w.append(w)
        self.pod_node.append(-1)
        self.pod_state.append(_PENDING)
        self.pod_replaces.append(replaces)
        self.pod_first_refusal.append(math.nan)
        self.routed_by.append(0)
        self.pod_group.append(-1)
        self.matched[w] += 1
        self.pending_of[w] += 1
        return p

    def place(self, p: int, node: int) -> None:
        self.pending_of[self.pod_w[p]] -= 1
        self.pod_node[p] = node
        self.node_pods[node].add(p)
        self.free[node] -= self.s.workloads[self.pod_w[p]].gpus
        if self.free[node] <= 0:
            self.open_nodes.pop(node, None)

    def record_ready(self) -> None:
        t = self.now
        if self.ready_times[-1] == t and self.ready_rows:
            self.ready_rows[-1] = list(self.ready)
        else:
            self.ready_times.append(t)
            self.ready_rows.append(list(self.ready))

    def open_node(self, node: int) -> None:
        if node in self.open_nodes or not self.up[node] or self.cordoned[node]:
            return
        if self.free[node] > 0:
            last = next(reversed(self.open_nodes), -1)
            self.open_nodes[node] = None
            # First fit goes by node index, as the reference model and a packed fleet do.
            if node < last:
                self.open_nodes = dict.fromkeys(sorted(self.open_nodes))

    # ------------------------------------------------------------------ set-up
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
                self.pod_state[p] = _READY_STATE
                self.ready[w] += 1
                self.ready_pods[w] += 1
                self.routed_by[p] = self.all_consumers
        self.ready_rows.append(list(self.ready))

    def place_initial_groups(self, w: int) -> None:
        wl = self.s.workloads[w]
        for _ in range(wl.replicas):
            g = self.new_group(self.new_slot(w, standin=False))
            nodes = place_group(self.open_nodes, self.free, wl.gpus, wl.group_size)
            if nodes is None:
                raise ValueError(f"workload {wl.name}: groups do not pack onto the fleet "
                                 f"({wl.group_size} nodes with {wl.gpus} GPUs free each)")
            for p, node in zip(self.g_pods[g], nodes, strict=True):
                self.place(p, node)
                self.pod_state[p] = _READY_STATE
            self.ready_pods[w] += wl.group_size
            self.g_ready[g] = wl.group_size
            self.g_state[g] = _READY_STATE
            self.g_spell[g] = len(self.sp_from)
            self.sp_group.append(g)
            self.sp_from.append(0.0)
            self.sp_until.append(math.nan)
            self.ready[w] += 1
            self.routed_by[self.g_pods[g][0]] = self.all_consumers

    def fit(self, gpus: int) -> int:
        for node in self.open_nodes:
            if self.free[node] >= gpus:
                return node
        return -1

    # ------------------------------------------------------------------ run
    def run(self) -> Lifecycle:
        s = self.s
        self.initial_placement()
        start = s.upgrade.start
        for i in range(s.upgrade.surge_nodes):
            self.push(start + self.surge_ready.next(), _SURGE, s.nodes + i)
        # The first batch is cordoned together, as upgrade tools do, so that no replacement
        # lands on a node whose drain starts in the same instant.
        first = ([self.to_drain.popleft()
                  for _ in range(min(s.upgrade.parallelism, len(self.drained)))]
                 if self.waves is None else self.waves.start())
        for node in first:
            self.cordoned[node] = True
            self.open_nodes.pop(node, None)
            self.push(start, _DRAIN, node)

        handlers = {
            _DRAIN: self.on_drain, _EVICT: self.on_evict, _GONE: self.on_gone,
            _READY: self.on_ready, _BACK: self.on_back, _SURGE: self.on_surge,
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
        )

    def group_log(self) -> GroupLog:
        if not self.sp_group:
            return GroupLog.empty()
        return GroupLog(
            workload=np.array([self.g_w[g] for g in self.sp_group], dtype=np.int64),
            group=np.array(self.sp_group, dtype=np.int64),
            standin=np.array([self.slot_standin[self.g_slot[g]] for g in self.sp_group],
                             dtype=np.bool_),
            serving_from=np.array(self.sp_from), serving_until=np.array(self.sp_until))

    def wedge_reason(self) -> str:
        s = self.s
        held = None if self.waves is None else self.waves.wedge_reason()
        if held:
            return held
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

    # ------------------------------------------------------------------ events
    def on_drain(self, node: int) -> None:
        self.cordoned[node] = True
        self.open_nodes.pop(node, None)
        self.drain_started[node] = self.now
        pods = sorted(self.node_pods[node])
        if not pods:
            self.node_emptied(node)
            return
        strategy = self.s.upgrade.strategy
        if strategy == "kubectl":
            for p in pods:
                self.try_evict(p)
        elif strategy == "drainsafe":
            # One step per workload: all of its pods here get a new pod at once (a starting
            # one too: the drain counts it in the surge).
            for p in pods:
                if self.pod_state[p] in (_TERMINATING, _DELETED):
                    continue
                key = (node, self.pod_w[p])
                if self.pod_group[p] >= 0:
                    self.surge_group(p, key)
                    continue
                r = self.new_pod(self.pod_w[p], replaces=p)
                self.replaced_by[p] = r
                self.step_old.setdefault(key, []).append(p)
                self.step_new.setdefault(key, set()).add(r)
                self.step_of[r] = key
                self.pending.append(r)
            self.schedule_pending()
        else:
            # Make before break for every pod on the node, a starting one included: evicting
            # it now would only be refused by the budget and retried once it serves.
            for p in pods:
                if self.pod_group[p] >= 0:
                    if self.pod_state[p] not in (_TERMINATING, _DELETED):
                        self.surge_group(p, None)
                    continue
                r = self.new_pod(self.pod_w[p], replaces=p)
                self.replaced_by[p] = r
                self.pending.append(r)
            self.schedule_pending()

    def step_ready(self, r: int) -> None:
        """drainsafe: a new pod is Ready; when its whole step is, evict the step's old pods
        (the budget decides how many go now; the rest wait for it)."""
        key = self.step_of.get(r)
        if key is None:
            old = self.pod_replaces[r]
            if old >= 0:
                self.try_evict(old)
            return
        if any(self.pod_state[n] != _READY_STATE for n in self.step_new[key]):
            return
        for n in self.step_new.pop(key):
            self.step_of.pop(n, None)
        for old in self.step_old.pop(key):
            self.try_evict(old)

    def evictable(self, p: int) -> bool:
        w = self.pod_w[p]
        spec = self.s.workloads[w].pdb
        if spec is None:
            return True
        # Make before break scales the workload up by its replacements in progress, and the
        # disruption controller counts that scale (so an extra Ready pod is no free slack).
        # A replacement is added to the scale once there is room for it, not while Pending:
        # a make-before-break tool that over-commits would wedge its own budget.
        # Over a grouped workload the budget counts pods, not groups.
        wl = self.s.workloads[w]
        scale = max(wl.pods, self.matched[w] - self.pending_of[w])
        st = status(spec, expected_scale=scale, matched_pods=self.matched[w],
                    current_healthy=self.ready_pods[w])
        if self.pod_state[p] != _READY_STATE:
            return unhealthy_pod_may_be_evicted(spec, current_healthy=self.ready_pods[w],
                                                desired=st.desired_healthy)
        need = 1
        if self.pod_group[p] >= 0 and self.s.upgrade.strategy == "drainsafe":
            need = disruptions_needed(wl.group_size, wl.recreates_group or self.is_leader(p))
        return st.disruptions_allowed >= need

    def try_evict(self, p: int) -> None:
        state = self.pod_state[p]
        if state in (_TERMINATING, _DELETED):
            return
        if state == _PENDING:
            # A pod that never got a node is not on the drained node; nothing to evict.
            return
        if self.evictable(p):
            self.delete(p)
            return
        if math.isnan(self.pod_first_refusal[p]):
            self.pod_first_refusal[p] = self.now
        self.waiters[self.pod_w[p]].append(p)

    def on_evict(self, p: int) -> None:
        self.try_evict(p)

    def delete(self, p: int) -> None:
        # The consumers' routing up to now, before p stops being Ready: a pod learnt of
        # since the last deletion is routed to.
        self.catch_up()
        g = self.pod_group[p]
        if g >= 0:
            if self.s.workloads[self.g_w[g]].recreates_group or self.is_leader(p):
                # The LWS controller takes the rest of the group down with it (or, under
                # None, the leader's workers go with their StatefulSet it owns).
                self.delete_group(g)
            else:
                self.delete_group_pod(p)
            return
        w = self.pod_w[p]
        was_ready = self.pod_state[p] == _READY_STATE
        self.pod_state[p] = _TERMINATING
        self.matched[w] -= 1
        tt = self.times[w]
        if was_ready:
            self.ready[w] -= 1
            self.ready_pods[w] -= 1
            self.record_ready()
            gone = self.serving_deleted(p, w)
        else:
            gone = tt.close
        self.push(self.now + gone, _GONE, p)
        # The ReplicaSet replaces a deleted pod at once. drainsafe started the replacement
        # of a Ready pod before evicting it; a pod evicted before it was Ready (say a
        # replacement on a node drained meanwhile) is re-made and keeps its duty.
        if self.s.upgrade.strategy == "kubectl":
            self.pending.append(self.new_pod(w))
            self.schedule_pending()
        else:
            # Surge: a replacement evicted while the pod it replaces still runs passes its
            # duty on to a new one; any other evicted pod already has its replacement.
            old = self.pod_replaces[p]
            if old >= 0 and self.pod_state[old] in (_STARTING, _READY_STATE):
                heir = self.replaced_by.get(p, -1)
                if heir >= 0 and self.pod_state[heir] in (_PENDING, _STARTING, _READY_STATE):
                    # p's own replacement takes over: it now replaces the pod p replaced.
                    self.pod_replaces[heir] = old
                    self.replaced_by[old] = heir
                    self.pass_duty(p, heir)
                    if self.pod_state[heir] == _READY_STATE:
                        self.on_new_ready(heir)
                else:
                    r = self.new_pod(w, replaces=old)
                    self.replaced_by[old] = r
                    self.pass_duty(p, r)
                    self.pending.append(r)
                    self.schedule_pending()

    def serving_deleted(self, p: int, w: int) -> float:
        """A pod that served traffic (a group's leader) is deleted: write down what its
        consumers send it and how long they keep doing so; returns when it exits."""
        props = [sampler.next() for sampler in self.prop]
        self.catch_up()
        rates = self.rates_to(p, w)
        for c, prop in enumerate(props):
            if self.routed_by[p] >> c & 1:
                heapq.heappush(self.route_changes[c], (self.now + prop, p, -1))
        total = sum(rates)
        # A full pod takes at most C / E[D] per second, from each consumer alike.
        scale = min(1.0, self.max_accept[w] / total) if total > 0 else 0.0
        accepted = [r * scale for r in rates]
        gone = self.exit_after(w, accepted, props)
        self.del_t.append(self.now)
        self.del_w.append(w)
        self.del_rate.append(rates)
        self.del_accepted.append(accepted)
        self.del_prop.append(props)
        self.del_gone.append(gone)
        return gone

    def pass_duty(self, p: int, heir: int) -> None:
        """A new pod of a drainsafe group was evicted before it served: its heir joins the
        group in its place."""
        key = self.step_of.pop(p, None)
        if key is not None:
            self.step_new[key].discard(p)
            self.step_new[key].add(heir)
            self.step_of[heir] = key

    def on_new_ready(self, r: int) -> None:
        if self.s.upgrade.strategy == "drainsafe":
            self.step_ready(r)
        else:
            old = self.pod_replaces[r]
            if old >= 0:
                self.try_evict(old)

    def catch_up(self) -> None:
        """Apply the routing changes the consumers have made by now."""
        now = self.now
        for c, changes in enumerate(self.route_changes):
            routed = self.routed[c]
            while changes and changes[0][0] <= now:
                _, p, change = heapq.heappop(changes)
                if change > 0:
                    # Every deletion catches up first, so a pod not Ready here was deleted
                    # before this consumer learnt of it: it never routes to it.
                    if self.pod_state[p] != _READY_STATE:
                        continue
                    self.routed_by[p] |= 1 << c
                routed[self.pod_w[p]] += change

    def rates_to(self, p: int, w: int) -> list[float]:
        """Arrivals per second each consumer sends pod p now: its share of the workload's
        rate over the pods it routes to, 0 if it has not learnt of p yet."""
        rate = self.rates[w].at(self.now)
        routed_by = self.routed_by[p]
        return [rate * share / self.routed[c][w] if routed_by >> c & 1 else 0.0
                for c, share in enumerate(self.shares)]

    def exit_after(self, w: int, rates: list[float], props: list[float]) -> float:
        """Seconds from deletion to the process exiting: when its last request is done.

        With consumer c's arrivals (rates[c] per second) stopping at a_c, the number of
        requests still running at close + x is Poisson with mean m(x) = sum_c r_c
        I(close + x - a_c), so the last one ends by close + x with probability exp(-m(x)).
        Draw that time by inversion.
        """
        tt = self.times[w]
        table = self.survival[w]
        close = tt.close
        span = tt.cut - close
        lags = [close - min(close, p) for p in props]

        def m(x: float) -> float:
            return sum(r * table.at_scalar(lag + x) for r, lag in zip(rates, lags, strict=True))

        target = -math.log(max(self.uniform.next(), 1e-300))
        if span <= 0 or m(0.0) <= target:
            return close
        if m(span) >= target:
            return tt.cut
        lo, hi = 0.0, span
        for _ in range(24):
            mid = (lo + hi) / 2
            if m(mid) > target:
                lo = mid
            else:
                hi = mid
        return close + hi

    def on_gone(self, p: int) -> None:
        self.pod_state[p] = _DELETED
        node = self.pod_node[p]
        self.node_pods[node].discard(p)
        self.free[node] += self.s.workloads[self.pod_w[p]].gpus
        if self.cordoned[node]:
            if not self.node_pods[node] and node < self.s.nodes and self.up[node]:
                self.node_emptied(node)
        else:
            self.open_node(node)
            self.schedule_pending()
        if self.pod_group[p] >= 0:
            self.group_pod_gone(p)

    def node_emptied(self, node: int) -> None:
        self.emptied[node] = self.now
        self.up[node] = False
        self.push(self.now + self.node_upgrade.next(), _BACK, node)

    def on_back(self, node: int) -> None:
        self.back[node] = self.now
        self.up[node] = True
        self.cordoned[node] = False
        self.nodes_done += 1
        self.open_node(node)
        self.schedule_pending()
        if self.waves is not None:
            for n in self.waves.back(node):
                self.push(self.now, _DRAIN, n)
        elif self.to_drain:
            self.push(self.now, _DRAIN, self.to_drain.popleft())

    def on_surge(self, node: int) -> None:
        self.up[node] = True
        self.open_node(node)
        self.schedule_pending()

    def on_ready(self, p: int) -> None:
        if self.pod_state[p] != _STARTING:
            return
        w = self.pod_w[p]
        self.pod_state[p] = _READY_STATE
        self.ready_pods[w] += 1
        if self.pod_group[p] >= 0:
            self.group_pod_ready(p)
            self.wake_waiters(w)
            return
        self.ready[w] += 1
        self.record_ready()
        # Consumers route to the new endpoint only once they learn of it; evictions that
        # wait for this Ready (make before break) happen before then.
        for changes, sampler in zip(self.route_changes, self.prop_add, strict=True):
            heapq.heappush(changes, (self.now + sampler.next(), p, 1))
        self.on_new_ready(p)
        self.wake_waiters(w)

    def wake_waiters(self, w: int) -> None:
        waiting = self.waiters[w]
        if not waiting:
            return
        self.waiters[w] = []
        retry = self.s.upgrade.eviction_retry
        for p in waiting:
            if self.s.upgrade.strategy == "drainsafe":
                # drainsafe waits on the budget's status, not on a retry timer.
                self.push(self.now, _EVICT, p)
                continue
            first = self.pod_first_refusal[p]
            ticks = math.ceil((self.now - first) / retry - 1e-9)
            self.push(first + max(ticks, 1) * retry, _EVICT, p)

    def schedule_pending(self) -> None:
        if not self.pending:
            return
        if len(self.pending) > self.pending_max:
            self.pending_max = len(self.pending)
        if not self.open_nodes:
            return
        still: deque[int] = deque()
        wls = self.s.workloads
        tried: set[int] = set()
        for p in self.pending:
            if self.pod_state[p] != _PENDING:
                continue
            g = self.pod_group[p]
            if g >= 0:
                if g not in tried and self.open_nodes:
                    tried.add(g)
                    if self.place_pending_group(g):
                        continue
                still.append(p)
                continue
            node = self.fit(wls[self.pod_w[p]].gpus) if self.open_nodes else -1
            if node < 0:
                still.append(p)
                continue
            self.place(p, node)
            self.pod_state[p] = _STARTING
            self.push(self.now + self.startup[self.pod_w[p]].next(), _READY, p)
        self.pending = still

    # ------------------------------------------------------------------ groups
    def new_slot(self, w: int, *, standin: bool) -> int:
        self.slot_w.append(w)
        self.slot_group.append(-1)
        self.slot_removed.append(False)
        self.slot_standin.append(standin)
        return len(self.slot_w) - 1

    def new_group(self, slot: int) -> int:
        """A new incarnation of `slot`: all of its pods Pending."""
        w = self.slot_w[slot]
        g = len(self.g_w)
        pods = [self.new_pod(w) for _ in range(self.size[w])]
        for p in pods:
            self.pod_group[p] = g
        self.g_w.append(w)
        self.g_slot.append(slot)
        self.g_pods.append(pods)
        self.g_state.append(_PENDING)
        self.g_ready.append(0)
        self.g_live.append(0)
        self.g_spell.append(-1)
        self.slot_group[slot] = g
        return g

    def is_leader(self, p: int) -> bool:
        return self.g_pods[self.pod_group[p]][0] == p

    def place_pending_group(self, g: int) -> bool:
        """The group's Pending pods onto distinct nodes at once, or none of them (a new
        group: all of them; restartPolicy None: a recreated worker, away from the nodes
        of its group's other pods)."""
        w = self.g_w[g]
        gpus = self.s.workloads[w].gpus
        pods = [p for p in self.g_pods[g] if self.pod_state[p] == _PENDING]
        taken = {self.pod_node[p] for p in self.g_pods[g] if self.pod_state[p] != _PENDING}
        nodes = place_group(self.open_nodes, self.free, gpus, len(pods), avoid=taken)
        if nodes is None:
            return False
        sampler = self.startup[w]
        for p, node in zip(pods, nodes, strict=True):
            self.place(p, node)
            self.pod_state[p] = _STARTING
            self.push(self.now + sampler.next(), _READY, p)
        if self.g_state[g] == _PENDING:
            self.g_state[g] = _STARTING
        return True

    def group_pod_ready(self, p: int) -> None:
        g = self.pod_group[p]
        w = self.g_w[g]
        if self.is_leader(p):
            # The Service selects leaders by their labels: consumers learn of a Ready
            # leader whether or not its workers are Ready yet.
            for changes, sampler in zip(self.route_changes, self.prop_add, strict=True):
                heapq.heappush(changes, (self.now + sampler.next(), p, 1))
        self.g_ready[g] += 1
        if not serves(self.g_ready[g], self.size[w], self.g_state[g] == _TERMINATING):
            return
        self.g_state[g] = _READY_STATE
        self.ready[w] += 1
        self.record_ready()
        self.g_spell[g] = len(self.sp_from)
        self.sp_group.append(g)
        self.sp_from.append(self.now)
        self.sp_until.append(math.nan)
        self.group_serving(g)

    def stop_serving(self, g: int) -> None:
        if self.g_state[g] != _READY_STATE:
            return
        self.ready[self.g_w[g]] -= 1
        self.record_ready()
        self.sp_until[self.g_spell[g]] = self.now

    def delete_group(self, g: int) -> None:
        """Every pod of the group goes (one evicted, the rest deleted by the LWS
        controller, no budget asked); the leader's traffic as for any deleted pod."""
        state = self.g_state[g]
        if state in (_TERMINATING, _DELETED):
            return
        self.catch_up()  # before any pod of it stops being Ready
        w = self.g_w[g]
        self.stop_serving(g)
        self.g_state[g] = _TERMINATING
        close = self.times[w].close
        live = 0
        for p in self.g_pods[g]:
            pod_state = self.pod_state[p]
            if pod_state == _DELETED:
                continue
            live += 1
            if pod_state == _TERMINATING:
                continue  # a worker already going (restartPolicy None)
            self.matched[w] -= 1
            if pod_state == _PENDING:
                self.pod_state[p] = _DELETED
                self.pending_of[w] -= 1
                live -= 1
                continue
            self.pod_state[p] = _TERMINATING
            if pod_state == _READY_STATE:
                self.ready_pods[w] -= 1
                if self.is_leader(p):
                    self.push(self.now + self.serving_deleted(p, w), _GONE, p)
                    continue
            self.push(self.now + close, _GONE, p)
        self.g_live[g] = live
        move = self.moves.get(self.g_slot[g])
        if move is not None and move.old == g:
            move.pods.clear()
            self.reloading(move)
        if live == 0:
            self.group_gone(g)

    def delete_group_pod(self, p: int) -> None:
        """restartPolicy None: a worker goes alone; its group stops serving until the
        worker's StatefulSet has recreated it and it is Ready."""
        g = self.pod_group[p]
        w = self.g_w[g]
        was_ready = self.pod_state[p] == _READY_STATE
        self.pod_state[p] = _TERMINATING
        self.matched[w] -= 1
        if was_ready:
            self.ready_pods[w] -= 1
            self.g_ready[g] -= 1
        self.stop_serving(g)
        if self.g_state[g] == _READY_STATE:
            self.g_state[g] = _STARTING
        self.push(self.now + self.times[w].close, _GONE, p)
        move = self.moves.get(self.g_slot[g])
        if move is not None and move.old == g and p in move.pods:
            move.pods.remove(p)
            if not move.pods:
                self.reloading(move)

    def group_pod_gone(self, p: int) -> None:
        g = self.pod_group[p]
        if self.g_state[g] == _TERMINATING:
            self.g_live[g] -= 1
            if self.g_live[g] == 0:
                self.group_gone(g)
            return
        # restartPolicy None: the worker StatefulSet recreates it under its name, now.
        r = self.new_pod(self.g_w[g])
        self.pod_group[r] = g
        self.g_pods[g][self.g_pods[g].index(p)] = r
        self.pending.append(r)
        self.schedule_pending()

    def group_gone(self, g: int) -> None:
        """The last pod of the group is gone: the set recreates it under the same names."""
        self.g_state[g] = _DELETED
        slot = self.g_slot[g]
        if self.slot_removed[slot] or self.slot_group[slot] != g:
            return
        new = self.new_group(slot)
        self.pending.extend(self.g_pods[new])
        self.schedule_pending()

    def surge_group(self, p: int, step: tuple[int, int] | None) -> None:
        """Make before break for the group of pod p: a stand-in group first (one per
        group, even when it has pods on several drained nodes)."""
        g = self.pod_group[p]
        slot = self.g_slot[g]
        move = self.moves.get(slot)
        if move is None:
            standin = self.new_slot(self.g_w[g], standin=True)
            self.pending.extend(self.g_pods[self.new_group(standin)])
            self.moves[slot] = _Move(slot=slot, standin=standin, pods=[p], old=g, step=step)
            self.standin_for[standin] = slot
            if step is not None:
                self.group_steps.setdefault(step, []).append(slot)
                self.step_moves.setdefault(step, []).append(slot)
            return
        if g != move.old:
            # Its recreation landed on a node drained since: the stand-in still serves.
            move.old, move.pods = g, [p]
            self.evict_old(move)
        elif p not in move.pods:
            move.pods.append(p)
            if move.phase != _SURGING:
                move.phase = _EVICTING
                self.try_evict(p)

    def slot_serving(self, slot: int) -> bool:
        return self.g_state[self.slot_group[slot]] == _READY_STATE

    def group_serving(self, g: int) -> None:
        slot = self.g_slot[g]
        moved = self.standin_for.get(slot)
        if moved is not None and self.moves[moved].phase == _SURGING:
            self.standin_ready(self.moves[moved])
        move = self.moves.get(slot)
        if move is not None:
            self.maybe_reloaded(move)

    def standin_ready(self, move: _Move) -> None:
        if move.step is None:
            self.evict_old(move)
            return
        slots = self.group_steps.get(move.step, [])
        waiting = [self.moves[s] for s in slots
                   if s in self.moves and self.moves[s].phase == _SURGING]
        if not all(self.slot_serving(m.standin) for m in waiting):
            return
        self.group_steps.pop(move.step, None)
        for m in waiting:
            self.evict_old(m)

    def evict_old(self, move: _Move) -> None:
        move.phase = _EVICTING
        move.pods = [p for p in move.pods if self.pod_state[p] in (_STARTING, _READY_STATE)]
        if not move.pods:  # gone meanwhile (its group went for another reason)
            self.reloading(move)
            return
        for p in list(move.pods):
            self.try_evict(p)

    def reloading(self, move: _Move) -> None:
        move.phase = _RELOADING
        self.maybe_reloaded(move)

    def maybe_reloaded(self, move: _Move) -> None:
        """The moved group serves again: scale back down (drainsafe: once every group of
        its step does, as it restores a workload's recorded replicas in one step)."""
        if move.phase != _RELOADING or not self.slot_serving(move.slot):
            return
        move.phase = _RELOADED
        if move.step is None:
            self.finish_move(move)
            return
        slots = self.step_moves.get(move.step, [])
        moves = [self.moves[s] for s in slots if s in self.moves]
        if all(m.phase == _RELOADED for m in moves):
            self.step_moves.pop(move.step, None)
            for m in moves:
                self.finish_move(m)

    def finish_move(self, move: _Move) -> None:
        """Scale back down: the stand-in goes."""
        if self.moves.get(move.slot) is not move:
            return
        self.moves.pop(move.slot, None)
        self.standin_for.pop(move.standin, None)
        self.remove_slot(move.standin)

    def remove_slot(self, slot: int) -> None:
        self.slot_removed[slot] = True
        inner = self.moves.get(slot)
        if inner is not None:  # a stand-in that was itself being moved
            self.finish_move(inner)
        self.delete_group(self.slot_group[slot])


_SURGING, _EVICTING, _RELOADING, _RELOADED = range(4)


@dataclass
class _Move:
    """A make-before-break move of one group: stand-in first, then evict, then reload."""

    slot: int
    standin: int
    pods: list[int]
    """The group's pods on drained nodes still to evict."""
    old: int
    """The incarnation being moved."""
    step: tuple[int, int] | None
    """drainsafe: (node, workload), whose stand-ins must all be Ready first."""
    phase: int = _SURGING
