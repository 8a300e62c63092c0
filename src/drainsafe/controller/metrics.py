"""Prometheus metrics of the guard (prometheus_client, one registry per controller)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram


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
