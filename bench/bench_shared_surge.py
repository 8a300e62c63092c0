"""Benchmark: what a shared surge would give on the 500 x 8 example (issue 30), predicted by
the simulator before the drain engine has one.

The drain engine surges a workload for one node at a time (its lock per workload,
drainsafe.simulate.surgelock SurgeLocks); a workload with pods on most nodes makes a fleet
drain nearly serial. `upgrade.shared_surge` lets the nodes hold parts of one surge at once
(SharedSurges), `upgrade.shared_join_room` lets a node join only when its new pods fit.
Side by side, on `drainsafe simulate --example` (the same file): kubectl, drainsafe with
the lock, shared, shared + join on room; a fleet drain (`upgrade.parallelism`) and a
NodeMaintenance (`--maintenance`: the controller's wave planner, by room and surge, and
the preflight's deferral; no maxUnavailable), at parallelism 4, and at 64 with 16 surge
nodes. Total hours (first cordon to last node back), the lowest serving capacity,
deferrals, failed requests, and the wedge when a run stops. Takes about 9 s.
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
from drainsafe.simulate.scenario import Scenario, parse_scenario
from drainsafe.simulate.simulation import Result, simulate

LAYOUTS = ((4, 0), (64, 16))
# (label, strategy, shared_surge, shared_join_room)
RUNS = (("kubectl", "kubectl", False, False),
        ("drainsafe, lock", "drainsafe", False, False),
        ("drainsafe, shared", "drainsafe", True, False),
        ("drainsafe, shared + join on room", "drainsafe", True, True))


def example() -> Scenario:
    """The built-in example, as `drainsafe simulate --example` reads it."""
    text = files("drainsafe.simulate").joinpath(EXAMPLE).read_text(encoding="utf-8")
    return parse_scenario(yaml.safe_load(text))


# (label, maintenance): a fleet drain, or a NodeMaintenance (the controller's waves)
DRAINS = (("fleet", None), ("NodeMaintenance", Maintenance()))


def variant(base: Scenario, *, strategy: str, shared: bool, join_room: bool,
            parallelism: int, surge: int, maintenance: Maintenance | None) -> Scenario:
    up = dataclasses.replace(base.upgrade, strategy=strategy, parallelism=parallelism,
                             surge_nodes=surge, shared_surge=shared,
                             shared_join_room=join_room, maintenance=maintenance)
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
    table = Table(title=f"{base.name} (drainsafe simulate --example): a shared surge beside "
                  "the engine's lock per workload", title_justify="left")
    for col in ("run", "layout", "drain", "total h", "lowest capacity", "deferrals",
                "failed", "wedge"):
        table.add_column(col, justify="left" if col in ("run", "wedge") else "right",
                         overflow="fold")
    began = time.perf_counter()
    for drain, maintenance in DRAINS:
        for parallelism, surge in LAYOUTS:
            layout = f"p{parallelism}" + (f" + {surge} surge nodes" if surge else "")
            for label, strategy, shared, join_room in RUNS:
                if maintenance is not None and strategy == "kubectl":
                    continue  # a NodeMaintenance drains with drainsafe's engine
                r = simulate(variant(base, strategy=strategy, shared=shared,
                                     join_room=join_room, parallelism=parallelism,
                                     surge=surge, maintenance=maintenance))
                table.add_row(label, layout, drain, *cells(r))
            table.add_section()
    console.print(table)
    console.print(f"{time.perf_counter() - began:.1f} s for the runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
