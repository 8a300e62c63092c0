"""One simulated upgrade: the lifecycle, then the request counts, then the figures."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from drainsafe.simulate.lifecycle import Lifecycle, run_lifecycle
from drainsafe.simulate.requests import CAUSES, Counts, count_requests
from drainsafe.simulate.scenario import Scenario

_COUNT_STREAM = 7919  # a fixed offset: request counts get their own random stream


@dataclass(frozen=True)
class Result:
    scenario: Scenario
    lifecycle: Lifecycle
    counts: Counts
    seconds: float
    """Wall-clock time the simulation took."""

    @property
    def failed(self) -> int:
        return sum(self.counts.failures.values())

    @property
    def expected_failed(self) -> float:
        return sum(self.counts.expected.values())

    @property
    def finished(self) -> bool:
        return self.lifecycle.wedged is None

    @property
    def upgrade_time(self) -> float:
        """Seconds from the first cordon to the last node back (inf when wedged)."""
        lc = self.lifecycle
        if not self.finished:
            return math.inf
        return lc.upgrade_finished - lc.upgrade_started

    def capacity(self) -> tuple[np.ndarray, np.ndarray]:
        """Serving capacity over time: Ready replicas' GPUs as a fraction of the desired (a
        group of s pods of g GPUs serves as one replica and weighs s x g)."""
        lc = self.lifecycle
        weight = np.array([(w.gpus or 1) * w.group_size for w in self.scenario.workloads],
                          dtype=np.float64)
        desired = float((weight * [w.replicas for w in self.scenario.workloads]).sum())
        return lc.ready_times, (lc.ready_counts * weight).sum(axis=1) / desired

    @property
    def min_capacity(self) -> float:
        return float(self.capacity()[1].min())

    def min_ready(self) -> dict[str, int]:
        counts = self.lifecycle.ready_counts.min(axis=0)
        return {w.name: int(c) for w, c in zip(self.scenario.workloads, counts, strict=True)}

    @property
    def restored_after(self) -> float:
        """Seconds from the start of the upgrade until every workload is fully Ready again."""
        lc = self.lifecycle
        want = np.array([w.replicas for w in self.scenario.workloads])
        short = (lc.ready_counts < want).any(axis=1)
        if not short.any():
            return 0.0
        last_short = int(np.nonzero(short)[0][-1])
        if last_short + 1 >= len(lc.ready_times):
            return math.inf
        return float(lc.ready_times[last_short + 1] - lc.upgrade_started)

    def node_drain_seconds(self) -> np.ndarray:
        """Per upgraded node: cordon until the last pod is gone."""
        lc = self.lifecycle
        done = ~np.isnan(lc.node_empty)
        return lc.node_empty[done] - lc.node_drain_started[done]

    def timeline(self, windows: int = 100) -> dict[str, Any]:
        """Capacity and failures over the upgrade, in `windows` equal windows (for -o json):
        the lowest capacity within each window and the failed requests by cause."""
        lc = self.lifecycle
        start = lc.upgrade_started
        stop = lc.upgrade_finished if self.finished else lc.end
        edges = np.linspace(start, max(stop, start + 1.0), windows + 1)
        _, capacity = self.capacity()
        ev = self.counts.events
        failed: dict[str, list[int]] = {}
        for i, cause in enumerate(CAUSES):
            mask = ev.cause == i
            counts, _ = np.histogram(ev.time[mask], bins=edges, weights=ev.count[mask])
            failed[cause] = [int(c) for c in counts]
        return {
            "window_seconds": round(float(edges[1] - edges[0]), 3),
            "start_seconds": [round(float(t - start), 3) for t in edges[:-1]],
            "capacity_min": [round(float(c), 4) for c in
                             lowest_per_window(lc.ready_times, capacity, edges)],
            "failed": failed,
        }

    def summary(self) -> dict[str, Any]:
        """Plain data for -o json and for tests."""
        lc = self.lifecycle
        drains = self.node_drain_seconds()
        s = self.scenario
        return {
            "scenario": s.name,
            "strategy": s.upgrade.strategy,
            "settings": settings_of(s),
            "finished": self.finished,
            "wedged": lc.wedged,
            "requests": self.counts.requests,
            "failed": self.failed,
            "failures": dict(self.counts.failures),
            "expected_failures": {k: round(v, 3) for k, v in self.counts.expected.items()},
            "failure_rate": self.failed / self.counts.requests if self.counts.requests else 0.0,
            "upgrade_seconds": None if not self.finished else round(self.upgrade_time, 3),
            "restored_seconds": _finite(self.restored_after),
            "min_capacity": round(self.min_capacity, 4),
            "min_ready": self.min_ready(),
            "node_drain_seconds": {
                "mean": _finite(float(drains.mean())) if len(drains) else None,
                "max": _finite(float(drains.max())) if len(drains) else None,
            },
            "pods_deleted": len(lc.deleted_at),
            "max_pending_pods": lc.pending_max,
            "deferrals": lc.deferrals,
            "events": lc.events,
            "simulated_seconds": round(lc.end, 3),
            "wall_seconds": round(self.seconds, 4),
        }


def lowest_per_window(times: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """For a step function (values[i] from times[i] on), its minimum within each window."""
    first = np.clip(np.searchsorted(times, edges[:-1], side="right") - 1, 0, len(values) - 1)
    # Steps after the last window must not count in it.
    end = max(int(np.searchsorted(times, edges[-1], side="left")), int(first[-1]) + 1)
    lowest = np.minimum.reduceat(values[:end], first)
    # reduceat stops before the next window's first step; that step may begin in this window.
    following = np.append(first[1:], first[-1])
    starts_inside = times[following] < edges[1:]
    lowest = np.where(starts_inside, np.minimum(lowest, values[following]), lowest)
    # Where two windows share their first step, reduceat returned just that step: fine.
    return lowest


def settings_of(s: Scenario) -> dict[str, Any]:
    first = s.workloads[0].termination
    return {
        "drain_delay": first.drain_delay,
        "grace": first.grace,
        "shutdown_deadline": None if math.isinf(first.shutdown_deadline)
        else first.shutdown_deadline,
        "parallelism": s.upgrade.parallelism,
        "surge_nodes": s.upgrade.surge_nodes,
    }


def _finite(x: float) -> float | None:
    return None if not math.isfinite(x) else round(x, 3)


def simulate(scenario: Scenario) -> Result:
    began = time.perf_counter()
    lc = run_lifecycle(scenario)
    rng = np.random.default_rng([scenario.seed, _COUNT_STREAM])
    counts = count_requests(lc, rng)
    return Result(scenario=scenario, lifecycle=lc, counts=counts,
                  seconds=time.perf_counter() - began)


__all__ = ["CAUSES", "Result", "simulate"]
