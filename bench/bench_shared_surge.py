"""Benchmark: the drain engine's surge of a Deployment shared by the nodes drained at once
(today's engine, issue 30: drain.sharedsurge, join on room, the counting gate) beside the
engine before it (one node's surge of a workload at a time, `upgrade.surge_sharing: lock`)
and kubectl drain, on the 500 x 8 example, as the simulator predicts them.

Side by side, on `drainsafe simulate --example` (the same file): a fleet drain
(`upgrade.parallelism`) and a NodeMaintenance (`--maintenance`: the controller's wave
planner, by room, WaitingForSurge for StatefulSets and LeaderWorkerSets only, and the
preflight's deferral; no maxUnavailable), at parallelism 4, and at 64 with 16 surge
nodes. Total hours (first cordon to last node back), the lowest serving capacity,
deferrals, failed requests, and the wedge when a run stops. Takes about 10 s.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from importlib.resources import files

import yaml
from rich.console import Console
from rich.table import Table

from drainsafe.simulate.cli import EXAMPLE
from drainsafe.simulate.maintenance import Maintenance
from drainsafe.simulate.scenario import Scenario, Strategy, SurgeSharing, parse_scenario
from drainsafe.simulate.simulation import Result, simulate

LAYOUTS = ((4, 0), (64, 16))
# (label, strategy, upgrade.surge_sharing)
RUNS: tuple[tuple[str, Strategy, SurgeSharing], ...] = (
    ("kubectl", "kubectl", "shared"),
    ("drainsafe, lock (engine before)", "drainsafe", "lock"),
    ("drainsafe, shared (today's engine)", "drainsafe", "shared"))


def example() -> Scenario:
    """The built-in example, as `drainsafe simulate --example` reads it."""
    text = files("drainsafe.simulate").joinpath(EXAMPLE).read_text(encoding="utf-8")
    return parse_scenario(yaml.safe_load(text))


# (label, maintenance): a fleet drain, or a NodeMaintenance (the controller's waves)
DRAINS = (("fleet", None), ("NodeMaintenance", Maintenance()))


def variant(base: Scenario, *, strategy: Strategy, sharing: SurgeSharing, parallelism: int,
            surge: int, maintenance: Maintenance | None) -> Scenario:
    up = dataclasses.replace(base.upgrade, strategy=strategy, parallelism=parallelism,
                             surge_nodes=surge, surge_sharing=sharing,
                             maintenance=maintenance)
    return dataclasses.replace(base, upgrade=up)


def cells(r: Result) -> list[str]:
    if not r.finished:
        return ["wedged", f"{r.min_capacity:.2%}", f"{r.lifecycle.deferrals:,}", "-",
                r.lifecycle.wedged or ""]
    return [f"{r.upgrade_time / 3600:.1f}", f"{r.min_capacity:.2%}",
            f"{r.lifecycle.deferrals:,}", f"{r.failed:,}", ""]


def main() -> int:
    console = Console(width=200)
    base = example()
    table = Table(title=f"{base.name} (drainsafe simulate --example): today's engine (a "
                  "Deployment's surge shared) beside the lock per workload and kubectl",
                  title_justify="left")
    for col in ("run", "layout", "drain", "total h", "lowest capacity", "deferrals",
                "failed", "wedge"):
        table.add_column(col, justify="left" if col in ("run", "wedge") else "right",
                         overflow="fold")
    began = time.perf_counter()
    for drain, maintenance in DRAINS:
        for parallelism, surge in LAYOUTS:
            layout = f"p{parallelism}" + (f" + {surge} surge nodes" if surge else "")
            for label, strategy, sharing in RUNS:
                if maintenance is not None and strategy == "kubectl":
                    continue  # a NodeMaintenance drains with drainsafe's engine
                r = simulate(variant(base, strategy=strategy, sharing=sharing,
                                     parallelism=parallelism, surge=surge,
                                     maintenance=maintenance))
                table.add_row(label, layout, drain, *cells(r))
            table.add_section()
    console.print(table)
    console.print(f"{time.perf_counter() - began:.1f} s for the runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
