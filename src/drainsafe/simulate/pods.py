"""Pods and the consumers' routing to them, on the simulator's clock (drainsafe.simulate.
lifecycle has the whole model and its sources).

- Placement is first fit by node index over the schedulable nodes with free GPUs (as the
  reference model and a packed fleet do); a pod with no room waits Pending and is placed
  when a node frees GPUs or comes back.
- The termination timeline of a deleted pod is drainsafe.budget.Budget (TerminationTimes):
  SIGTERM when the drain delay (preStop) ends, or at the grace period if the hook overruns
  it; SIGKILL at Budget.sigkill_at. Source: kubernetes.io/docs/concepts/containers/
  container-lifecycle-hooks/ ("Hook handler execution") and kubernetes/kubernetes
  pkg/kubelet/kuberuntime/kuberuntime_container.go (killContainer).
- Endpoints propagate both ways, per consumer (kube-proxy's change tracker takes added and
  removed endpoints alike: kubernetes/kubernetes pkg/proxy/endpointschangetracker.go):
  routing changes wait in a queue per consumer and are applied at the next deletion
  (catch_up), the only moment the routed counts are read; what each deleted pod carried is
  written down per deletion for drainsafe.simulate.requests.
- Random draws come from streams of their own (Sampler), so changing one setting leaves
  the other streams' draws where they were: sweeps compare settings on common random numbers.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from drainsafe.simulate.distributions import survival_table
from drainsafe.simulate.events import READY, EventLoop
from drainsafe.simulate.scenario import Scenario
from drainsafe.simulate.traffic import Rate

# Pod states
PENDING, STARTING, READY_STATE, TERMINATING, DELETED = range(5)

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


class Sampler:
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


class Pods(EventLoop):
    """Where the pods are, what state each is in, and who routes to them."""

    def __init__(self, s: Scenario) -> None:
        super().__init__()
        self.s = s
        nc, nw = len(s.consumers), len(s.workloads)
        # Streams added later go last: spawned children keep their index, so the earlier
        # streams draw what they drew before.
        seeds = np.random.SeedSequence(s.seed).spawn(6 + 2 * nc + nw)
        rngs = [np.random.default_rng(x) for x in seeds]
        self.node_upgrade = Sampler(s.upgrade.node_upgrade.sample, rngs[0])
        self.surge_ready = Sampler(s.upgrade.surge_ready.sample, rngs[1])
        self.uniform = Sampler(lambda r, n: r.random(n), rngs[2])
        self.prop = [Sampler(c.propagation.sample, rngs[6 + i])
                     for i, c in enumerate(s.consumers)]
        base = 6 + nc
        self.startup = [Sampler(w.startup.sample, rngs[base + i])
                        for i, w in enumerate(s.workloads)]
        base += nw
        self.prop_add = [Sampler(c.propagation.sample, rngs[base + i])
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
        # Pods of grouped workloads count here too (drainsafe.simulate.groupmoves).
        self.ready_pods = [0] * nw  # what a PodDisruptionBudget counts healthy
        self.pod_group: list[int] = []
        self.pending: deque[int] = deque()

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
        self.pending_max = 0

    def new_pod(self, w: int, replaces: int = -1) -> int:
        p = len(self.pod_w)
        self.pod_w.append(w)
        self.pod_node.append(-1)
        self.pod_state.append(PENDING)
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

    def fit(self, gpus: int) -> int:
        for node in self.open_nodes:
            if self.free[node] >= gpus:
                return node
        return -1

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
            if self.pod_state[p] != PENDING:
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
            self.pod_state[p] = STARTING
            self.push(self.now + self.startup[self.pod_w[p]].next(), READY, p)
        self.pending = still

    def on_ready(self, p: int) -> None:
        if self.pod_state[p] != STARTING:
            return
        w = self.pod_w[p]
        self.pod_state[p] = READY_STATE
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

    def on_gone(self, p: int) -> None:
        self.pod_state[p] = DELETED
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
                    if self.pod_state[p] != READY_STATE:
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

    # What the other parts of the engine do (drainsafe.simulate.groupmoves, strategies,
    # lifecycle).
    def node_emptied(self, node: int) -> None:
        """The node's last pod is gone."""
        raise NotImplementedError

    def place_pending_group(self, g: int) -> bool:
        """Place group g's Pending pods, all or none."""
        raise NotImplementedError

    def group_pod_ready(self, p: int) -> None:
        """A pod of a group turned Ready."""
        raise NotImplementedError

    def group_pod_gone(self, p: int) -> None:
        """A pod of a group is gone."""
        raise NotImplementedError

    def on_new_ready(self, r: int) -> None:
        """A pod (of no group) turned Ready: what the drain does next."""
        raise NotImplementedError

    def wake_waiters(self, w: int) -> None:
        """Workload w's budget may allow more now."""
        raise NotImplementedError
