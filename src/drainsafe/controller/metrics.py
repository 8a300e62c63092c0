"""Prometheus metrics of the controller (prometheus_client, one registry per controller).

GuardMetrics: the guard's counters and histograms, counted as it works.

MaintenanceCollector: gauges of what maintenance left on the cluster (maintenance.facts),
computed at each scrape from this replica's informer caches, as kube-state-metrics computes
object state at scrape time (one series per object, a phase as one 0/1 series per possible
value, as its kube_pod_status_phase), through prometheus_client's custom collector
interface (a `collect()` yielding metric families). Times are unix seconds, as
kube-state-metrics' *_created and node_boot_time_seconds are, so an alert compares them with
time(). Every replica exports the same facts: rules aggregate over the instances
(deploy/controller/prometheusrule.yaml).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from drainsafe.maintenance.facts import PHASES, MaintenanceFacts


@dataclass
class GuardMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.reviews = Counter("drainsafe_guard_reviews_total",
                               "Eviction reviews answered, by verdict", ["verdict"], registry=r)
        self.holds = Counter("drainsafe_guard_holds_total",
                             "Evictions held for the first time", registry=r)
        self.surges = Counter("drainsafe_guard_surges_total",
                              "Surges started by the leader", registry=r)
        self.restores = Counter("drainsafe_guard_restores_total",
                                "Surges restored by the leader", registry=r)
        self.releases = Counter("drainsafe_guard_releases_total",
                                "Holds given up, by reason", ["reason"], registry=r)
        self.hold_seconds = Histogram(
            "drainsafe_guard_hold_seconds", "From the first 429 to the allowed eviction",
            buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800), registry=r)
        self.review_seconds = Histogram(
            "drainsafe_guard_review_seconds", "Time to answer one review",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1), registry=r)


NODE_LABELS = ["node", "by", "nodemaintenance"]
SURGE_LABELS = ["namespace", "kind", "name", "node", "by", "nodemaintenance"]


class MaintenanceCollector(Collector):
    """The maintenance facts as gauges; `read` returns them from the caches (no I/O)."""

    def __init__(self, read: Callable[[], MaintenanceFacts]) -> None:
        self.read = read

    def describe(self) -> Iterator[Metric]:
        # Names only, so registering does not read caches that may not be filled yet.
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        facts = self.read()
        (cordoned, cordoned_since, surge, surge_since, surge_extra, phase,
         nodes) = self._families()
        for n in facts.cordons:
            labels = [n.node, n.by, n.maintenance]
            cordoned.add_metric(labels, 1)
            if n.since is not None:
                cordoned_since.add_metric(labels, n.since)
        for s in facts.surges:
            w = s.workload
            labels = [w.namespace, w.kind, w.name, s.record.node, s.by, s.maintenance]
            surge.add_metric(labels, 1)
            surge_extra.add_metric(labels, s.record.replicas_now - s.record.replicas_before)
            if s.since is not None:
                surge_since.add_metric(labels, s.since)
        for m in facts.maintenances:
            for p in PHASES:
                phase.add_metric([m.name, p], 1 if m.phase == p else 0)
            for state, count in m.nodes.items():
                nodes.add_metric([m.name, state], count)
        yield cordoned
        yield cordoned_since
        yield surge
        yield surge_since
        yield surge_extra
        yield phase
        yield nodes

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(
                "drainsafe_node_cordoned",
                "1 per cordoned node, by who holds the cordon: drain (drainsafe drain), "
                "nodemaintenance (named), other (no drainsafe record)", labels=NODE_LABELS),
            GaugeMetricFamily(
                "drainsafe_node_cordoned_since_seconds",
                "Unix time of drainsafe's cordon record (absent when by=other: unknown)",
                labels=NODE_LABELS),
            GaugeMetricFamily(
                "drainsafe_surge_active",
                "1 per workload carrying a drainsafe surge record, by whose surge: drain, "
                "nodemaintenance, guard", labels=SURGE_LABELS),
            GaugeMetricFamily(
                "drainsafe_surge_since_seconds", "Unix time the surge was recorded",
                labels=SURGE_LABELS),
            GaugeMetricFamily(
                "drainsafe_surge_extra_replicas",
                "The workload's replicas now minus the recorded scale", labels=SURGE_LABELS),
            GaugeMetricFamily(
                "drainsafe_nodemaintenance_phase",
                "1 for the NodeMaintenance's status.phase, 0 for the others",
                labels=["name", "phase"]),
            GaugeMetricFamily(
                "drainsafe_nodemaintenance_nodes",
                "A NodeMaintenance's nodes in each state", labels=["name", "state"]),
        )
