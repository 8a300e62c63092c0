"""A straightforward SimPy implementation of drainsafe simulate's model: every request is an
event. It is a reference, not product code: the benchmark runs it next to the vectorised
simulator (bench_simulate.py) and a test checks that both agree statistically
(tests/simulate/test_sim_reference.py).

Same model, simulated the obvious way:
- Poisson arrivals per workload (thinning for the diurnal rate); each request picks a consumer
  by share and a pod uniformly among the pods that consumer routes to at that instant: from
  a propagation delay after the pod turned Ready until one after its deletion (a consumer
  that has not learnt of the pod by its deletion never routes to it);
- a pod routed to after its listener closed refuses the request (race); a request still
  running when the pod's in-flight work is cut (shutdown deadline or SIGKILL) fails there;
  no routable pod, or a pod at its max concurrency, rejects it (capacity);
- drains as processes: cordon, then evict through the PDB: all at once with kubectl's 5 s
  retry (kubectl); a new pod for each of the node's pods first, and once all of a
  workload's new pods are Ready its old pods, retried whenever the pods change and not
  replaced by the ReplicaSet (drainsafe, surge-first); or per pod, its replacement first,
  with kubectl's retry (surge); pods gone when their last request ends or at the cut, nodes
  upgraded then back.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from drainsafe.pdb import status, unhealthy_pod_may_be_evicted
from drainsafe.simulate.lifecycle import termination_times
from drainsafe.simulate.scenario import Scenario
from drainsafe.simulate.traffic import Rate


@dataclass
class _Pod:
    w: int
    state: str = "pending"  # pending, starting, ready, terminating, gone
    node: int = -1
    replaces: _Pod | None = None
    replaced_by: _Pod | None = None
    deleted_at: float = math.nan
    # Per consumer: it routes to the pod from route_from until route_until.
    route_from: list[float] = field(default_factory=list)
    route_until: list[float] = field(default_factory=list)
    inflight: set[int] = field(default_factory=set)
    closed: bool = False
    ready_event: Any = None
    empty_event: Any = None


@dataclass
class ReferenceResult:
    requests: int
    failures: dict[str, int]
    upgrade_seconds: float
    node_drain_seconds: list[float]
    events: int
    deletions: int
    """Pods deleted while Ready (each one a race and a cut opportunity)."""


class Reference:
    def __init__(self, s: Scenario, seed: int) -> None:
        self.s = s
        self.rnd = random.Random(seed)
        self.env = simpy.Environment()
        self.times = termination_times(s)
        n = s.nodes + s.upgrade.surge_nodes
        self.free = [s.gpus_per_node] * n
        self.up = [True] * s.nodes + [False] * s.upgrade.surge_nodes
        self.cordoned = [False] * n
        self.node_pods: list[set[int]] = [set() for _ in range(n)]
        self.pods: list[_Pod] = []
        self.pending: list[_Pod] = []
        self.failures = {"race": 0, "cut_deadline": 0, "cut_sigkill": 0, "capacity": 0}
        self.requests = 0
        self.req_seq = 0
        self.cut_requests: set[int] = set()
        self.slots = simpy.Resource(self.env, capacity=s.upgrade.parallelism)
        self.node_done = [self.env.event() for _ in range(s.nodes)]
        self.drain_seconds: list[float] = []
        self.upgrade_end = math.nan
        self._changed = self.env.event()
        self.deletions = 0
        self.np_rng = np.random.default_rng(seed)

    # ---------------------------------------------------------------- sampling
    def draw(self, dist: Any) -> float:
        return float(dist.sample(self.np_rng, 1)[0])

    # ---------------------------------------------------------------- pods
    def ready_count(self, w: int) -> int:
        return sum(1 for p in self.pods if p.w == w and p.state == "ready")

    def matched(self, w: int) -> int:
        return sum(1 for p in self.pods if p.w == w and p.state in ("pending", "starting", "ready"))

    def changed(self) -> Any:
        """An event that fires at the next change of Ready pods or free GPUs."""
        return self._changed

    def notify(self) -> None:
        event, self._changed = self._changed, self.env.event()
        event.succeed()

    def new_pod(self, w: int, replaces: _Pod | None = None) -> _Pod:
        never = [math.inf] * len(self.s.consumers)
        pod = _Pod(w=w, replaces=replaces, route_from=never, route_until=list(never))
        pod.ready_event = self.env.event()
        pod.empty_event = self.env.event()
        self.pods.append(pod)
        return pod

    def fit(self, gpus: int) -> int:
        for node in range(len(self.free)):
            if self.up[node] and not self.cordoned[node] and self.free[node] >= gpus:
                return node
        return -1

    def place(self, pod: _Pod, node: int) -> None:
        pod.node = node
        self.free[node] -= self.s.workloads[pod.w].gpus
        self.node_pods[node].add(id(pod))

    def schedule(self) -> None:
        still = []
        for pod in self.pending:
            if pod.state != "pending":
                continue
            node = self.fit(self.s.workloads[pod.w].gpus)
            if node < 0:
                still.append(pod)
                continue
            self.place(pod, node)
            pod.state = "starting"
            self.env.process(self.start(pod))
        self.pending = still

    def start(self, pod: _Pod) -> Any:
        yield self.env.timeout(self.draw(self.s.workloads[pod.w].startup))
        if pod.state != "starting":
            return
        pod.state = "ready"
        pod.route_from = [self.env.now + self.draw(c.propagation) for c in self.s.consumers]
        pod.ready_event.succeed()
        self.notify()

    def evictable(self, pod: _Pod) -> bool:
        wl = self.s.workloads[pod.w]
        if wl.pdb is None:
            return True
        ready = self.ready_count(pod.w)
        matched = self.matched(pod.w)
        placed = sum(1 for p in self.pods if p.w == pod.w and p.state in ("starting", "ready"))
        st = status(wl.pdb, expected_scale=max(wl.replicas, placed), matched_pods=matched,
                    current_healthy=ready)
        if pod.state != "ready":
            return unhealthy_pod_may_be_evicted(wl.pdb, current_healthy=ready,
                                                desired=st.desired_healthy)
        return st.disruptions_allowed > 0

    def evict(self, pod: _Pod) -> Any:
        """kubectl's loop: try, and on a PDB refusal sleep the retry interval and try again;
        drainsafe tries again as soon as the pods change."""
        while pod.state in ("ready", "starting"):
            if self.evictable(pod):
                self.delete(pod)
                return
            if self.s.upgrade.strategy == "drainsafe":
                yield self.changed()
            else:
                yield self.env.timeout(self.s.upgrade.eviction_retry)

    def delete(self, pod: _Pod) -> None:
        was_ready = pod.state == "ready"
        pod.state = "terminating"
        now = self.env.now
        pod.deleted_at = now
        if was_ready:
            self.deletions += 1
            # A consumer that has not learnt of the pod yet never routes to it.
            pod.route_until = [now + self.draw(c.propagation) if start <= now else now
                               for c, start in zip(self.s.consumers, pod.route_from,
                                                   strict=True)]
        else:
            pod.route_until = [now] * len(self.s.consumers)
        self.env.process(self.terminate(pod))
        strategy = self.s.upgrade.strategy
        if strategy == "kubectl":
            self.pending.append(self.new_pod(pod.w))
            self.schedule()
        elif pod.replaces is not None and pod.replaces.state in ("starting", "ready"):
            heir = pod.replaced_by
            if heir is not None and heir.state in ("pending", "starting", "ready"):
                heir.replaces = pod.replaces  # its own replacement takes over the duty
                pod.replaces.replaced_by = heir
                if heir.state == "ready" and strategy == "surge":
                    self.env.process(self.evict(heir.replaces))
            else:
                new = self.new_pod(pod.w, replaces=pod.replaces)
                pod.replaces.replaced_by = new
                self.pending.append(new)
                self.schedule()
                if strategy == "surge":
                    self.env.process(self.replace_then_evict(new))

    def terminate(self, pod: _Pod) -> Any:
        tt = self.times[pod.w]
        yield self.env.timeout(tt.close)
        pod.closed = True
        if pod.inflight and tt.cut > tt.close:
            cut = self.env.timeout(tt.cut - tt.close)
            yield cut | pod.empty_event
        if pod.inflight:
            cause = "cut_deadline" if tt.cut_by_deadline else "cut_sigkill"
            self.failures[cause] += len(pod.inflight)
            self.cut_requests.update(pod.inflight)
            pod.inflight.clear()
        pod.state = "gone"
        node = pod.node
        self.node_pods[node].discard(id(pod))
        self.free[node] += self.s.workloads[pod.w].gpus
        if not self.cordoned[node]:
            self.schedule()
            self.notify()

    # ---------------------------------------------------------------- requests
    def arrivals(self, w: int) -> Any:
        wl = self.s.workloads[w]
        rate = Rate(wl.rate, self.s.start_hour, wl.diurnal)
        peak = wl.rate * (1 + (wl.diurnal.amplitude if wl.diurnal else 0.0))
        shares = [c.share for c in self.s.consumers]
        while True:
            yield self.env.timeout(self.rnd.expovariate(peak))
            if self.rnd.random() * peak > rate.at(self.env.now):
                continue  # thinning: keeps the diurnal rate's Poisson law
            self.requests += 1
            c = self.rnd.choices(range(len(shares)), shares)[0]
            now = self.env.now
            routed = [p for p in self.pods
                      if p.w == w and p.route_from[c] <= now < p.route_until[c]]
            if not routed:
                self.failures["capacity"] += 1
                continue
            pod = self.rnd.choice(routed)
            if pod.closed or pod.state == "gone":
                self.failures["race"] += 1
                continue
            if wl.max_concurrency is not None and len(pod.inflight) >= wl.max_concurrency:
                self.failures["capacity"] += 1
                continue
            self.env.process(self.request(pod, self.draw(wl.durations)))

    def request(self, pod: _Pod, duration: float) -> Any:
        self.req_seq += 1
        rid = self.req_seq
        pod.inflight.add(rid)
        yield self.env.timeout(duration)
        if rid in self.cut_requests:
            self.cut_requests.discard(rid)
            return
        pod.inflight.discard(rid)
        if pod.closed and not pod.inflight and not pod.empty_event.triggered:
            pod.empty_event.succeed()

    # ---------------------------------------------------------------- drains
    def upgrade_node(self, node: int) -> Any:
        with self.slots.request() as slot:
            yield slot
            began = self.env.now
            self.cordoned[node] = True
            victims = [p for p in self.pods if p.node == node and p.state in ("ready",
                                                                              "starting")]
            strategy = self.s.upgrade.strategy
            groups: dict[int, list[_Pod]] = {}
            for pod in victims:
                if strategy == "kubectl":
                    self.env.process(self.evict(pod))
                    continue
                new = self.new_pod(pod.w, replaces=pod)
                pod.replaced_by = new
                self.pending.append(new)
                if strategy == "drainsafe":
                    groups.setdefault(pod.w, []).append(pod)
                else:
                    self.env.process(self.replace_then_evict(new))
            for olds in groups.values():
                self.env.process(self.surge_then_evict(olds))
            self.schedule()
            while any(p.node == node and p.state != "gone" for p in self.pods):
                yield self.env.timeout(0.05)
            self.drain_seconds.append(self.env.now - began)
            self.up[node] = False
            yield self.env.timeout(self.draw(self.s.upgrade.node_upgrade))
            self.up[node] = True
            self.cordoned[node] = False
            self.free[node] = self.s.gpus_per_node
            self.schedule()
            self.notify()
        self.node_done[node].succeed()

    def surge_then_evict(self, olds: list[_Pod]) -> Any:
        """drainsafe: once every new pod of the group (an old pod's current replacement)
        is Ready, evict the old pods, all as far as the budget lets them."""
        while any(old.replaced_by is not None and old.replaced_by.state != "ready"
                  for old in olds if old.state in ("ready", "starting")):
            yield self.changed()
        for old in olds:
            self.env.process(self.evict(old))

    def replace_then_evict(self, new: _Pod) -> Any:
        yield new.ready_event
        if new.replaces is not None:
            yield self.env.process(self.evict(new.replaces))

    def surge(self, node: int) -> Any:
        yield self.env.timeout(self.draw(self.s.upgrade.surge_ready))
        self.up[node] = True
        self.schedule()
        self.notify()

    def run(self) -> ReferenceResult:
        s = self.s
        for w, wl in enumerate(s.workloads):
            for _ in range(wl.replicas):
                pod = self.new_pod(w)
                node = self.fit(wl.gpus)
                self.place(pod, node)
                pod.state = "ready"
                pod.route_from = [-math.inf] * len(s.consumers)  # known to every consumer
                pod.ready_event.succeed()
        for w in range(len(s.workloads)):
            self.env.process(self.arrivals(w))

        def orchestrate() -> Any:
            yield self.env.timeout(s.upgrade.start)
            for i in range(s.upgrade.surge_nodes):
                self.env.process(self.surge(s.nodes + i))
            for node in range(min(s.upgrade.parallelism, s.nodes)):
                self.cordoned[node] = True  # the first batch is cordoned together
            for node in range(s.nodes):
                self.env.process(self.upgrade_node(node))
            yield simpy.AllOf(self.env, self.node_done)
            self.upgrade_end = self.env.now

        done = self.env.process(orchestrate())
        self.env.run(until=done)
        # Let the last replacements come up and the traffic run to the horizon.
        self.env.run(until=max(s.horizon, self.env.now + 1))
        return ReferenceResult(requests=self.requests, failures=dict(self.failures),
                               upgrade_seconds=self.upgrade_end - s.upgrade.start,
                               node_drain_seconds=self.drain_seconds, events=self.req_seq,
                               deletions=self.deletions)


def run_reference(scenario: Scenario, seed: int | None = None) -> ReferenceResult:
    return Reference(scenario, scenario.seed if seed is None else seed).run()
