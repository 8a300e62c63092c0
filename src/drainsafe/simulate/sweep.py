"""Sweep: the settings that lose no request, at the shortest upgrade time.

The knobs act on different failures, so the search goes in stages instead of a full grid:

1. drain delay: the smallest candidate with no request refused in the race (grace held
   generous meanwhile, so nothing is cut);
2. grace period: the smallest candidate (shutdown deadline refitted with
   drainsafe.budget.fit_deadline) with no request cut;
3. parallelism x surge nodes x strategy: every combination with those termination settings;
   among those with no failure at all (capacity included) that finish, the shortest upgrade
   wins (ties: fewer surge nodes, then lower parallelism).

"No failure" means none in the simulated run and fewer than `ZERO_EXPECTED` expected, so a
lucky draw does not pass a setting whose long tail still loses requests (stages 1 and 2 keep
a margin below that, STAGE_MARGIN).
All runs share the scenario's seed (common random numbers), so settings are compared on
the same propagation and start-up draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drainsafe.simulate.scenario import STRATEGIES, Scenario, Strategy
from drainsafe.simulate.simulation import Result, simulate

ZERO_EXPECTED = 0.5
STAGE_MARGIN = 0.1
"""Stages 1 and 2 demand ten times less (0.05 expected) than the final check: other layouts
route a little more traffic per pod, and a setting on the edge would fail there."""
DRAIN_DELAYS = (0.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0)
GRACES = (30.0, 45.0, 60.0, 90.0, 120.0, 150.0, 180.0, 240.0, 300.0, 420.0, 600.0, 900.0)
PARALLELISMS = (1, 2, 4, 8, 16, 32, 64, 128)
SURGES = (0, 1, 2, 4, 8, 16)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Trial:
    stage: str
    result: Result

    @property
    def zero(self) -> bool:
        return is_zero(self.result)


@dataclass(frozen=True)
class Sweep:
    trials: tuple[Trial, ...]
    best: Result | None
    drain_delay: float | None
    grace: float | None
    wedged: str | None = None
    """Why no layout could finish the upgrade at all (then nothing else was searched)."""

    def ranked(self, limit: int = 10) -> list[Result]:
        """Stage-3 results with no failure: the fastest of each strategy, then the rest,
        fastest first (so the table compares strategies, not only variants of the winner)."""
        final = sorted((t.result for t in self.trials if t.stage == "layout" and t.zero),
                       key=_rank)
        firsts: dict[str, Result] = {}
        for r in final:
            firsts.setdefault(r.scenario.upgrade.strategy, r)
        head = sorted(firsts.values(), key=_rank)
        rest = [r for r in final if all(r is not h for h in head)]
        return (head + rest)[:limit]


def is_zero(result: Result, causes: Sequence[str] | None = None, *,
            expected_below: float = ZERO_EXPECTED) -> bool:
    keys = causes or tuple(result.counts.failures)
    sampled = sum(result.counts.failures[k] for k in keys)
    expected = sum(result.counts.expected[k] for k in keys)
    return result.finished and sampled == 0 and expected < expected_below


def _rank(r: Result) -> tuple[float, int, int]:
    return (r.upgrade_time, r.scenario.upgrade.surge_nodes, r.scenario.upgrade.parallelism)


def sweep(
    scenario: Scenario,
    *,
    drain_delays: Sequence[float] = DRAIN_DELAYS,
    graces: Sequence[float] = GRACES,
    parallelisms: Sequence[int] = PARALLELISMS,
    surges: Sequence[int] = SURGES,
    strategies: Sequence[Strategy] = STRATEGIES,
    progress: Progress | None = None,
) -> Sweep:
    trials: list[Trial] = []

    def run(stage: str, s: Scenario) -> Result:
        if progress is not None:
            progress(stage)
        result = simulate(s)
        trials.append(Trial(stage, result))
        return result

    longest = max(w.durations.upper for w in scenario.workloads)
    buffer = max(w.termination.buffer for w in scenario.workloads)

    # Stages 1 and 2 need a layout that finishes the upgrade: a wedged run may never have
    # deleted a pod, and would pass any drain delay. Keep the scenario's own if it finishes.
    generous_grace = math.ceil(max(drain_delays) + longest + buffer)
    probe: Scenario | None = None
    wedged: str | None = None
    layouts: tuple[tuple[Strategy | None, int | None], ...] = (
        (None, None), ("drainsafe", max(surges)), ("surge", max(surges)),
        ("kubectl", max(surges)))
    for strategy, surge in layouts:
        candidate = scenario.with_settings(strategy=strategy, surge_nodes=surge)
        r = run("layout that finishes", candidate.with_settings(
            drain_delay=max(drain_delays), grace=generous_grace))
        if r.finished:
            probe = candidate
            break
        wedged = wedged or r.lifecycle.wedged
    if probe is None:
        return Sweep(tuple(trials), None, None, None, wedged=wedged)

    delay: float | None = None
    for d in sorted(drain_delays):
        generous = math.ceil(d + longest + buffer)
        if is_zero(run("drain delay", probe.with_settings(drain_delay=d, grace=generous)),
                   ("race",), expected_below=STAGE_MARGIN * ZERO_EXPECTED):
            delay = d
            break
    if delay is None:
        return Sweep(tuple(trials), None, None, None)

    grace: float | None = None
    fitted = math.ceil(delay + longest + buffer)
    for g in sorted({*graces, fitted}):
        if g < delay + buffer:
            continue
        if is_zero(run("grace", probe.with_settings(drain_delay=delay, grace=g)),
                   ("cut_deadline", "cut_sigkill"), expected_below=STAGE_MARGIN * ZERO_EXPECTED):
            grace = g
            break
    if grace is None:
        return Sweep(tuple(trials), None, delay, None)

    best: Result | None = None
    for strategy in strategies:
        for surge in surges:
            for par in parallelisms:
                if par > scenario.nodes:
                    continue
                r = run("layout", scenario.with_settings(
                    drain_delay=delay, grace=grace, parallelism=par, surge_nodes=surge,
                    strategy=strategy))
                if is_zero(r) and (best is None or _rank(r) < _rank(best)):
                    best = r
    return Sweep(tuple(trials), best, delay, grace)


def planned_runs(scenario: Scenario, *, parallelisms: Sequence[int] = PARALLELISMS,
                 surges: Sequence[int] = SURGES,
                 strategies: Sequence[Strategy] = STRATEGIES) -> int:
    """An upper bound on the runs `sweep` makes (for a progress bar)."""
    layout = len(strategies) * len(surges) * sum(1 for p in parallelisms if p <= scenario.nodes)
    return 4 + len(DRAIN_DELAYS) + len(GRACES) + 1 + layout
