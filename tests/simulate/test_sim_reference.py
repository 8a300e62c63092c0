"""The vectorised simulator against the per-request SimPy reference (bench/simpy_reference.py):
the same small scenario, many seeds each, means compared within their standard errors."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from drainsafe.simulate.scenario import parse_scenario
from drainsafe.simulate.simulation import simulate

from .scenarios import small

REFERENCE = Path(__file__).resolve().parents[2] / "bench" / "simpy_reference.py"


def _reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("simpy_reference", REFERENCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["simpy_reference"] = module
    spec.loader.exec_module(module)
    return module


def _agree(a: list[float], b: list[float], *, slack: float = 0.0) -> tuple[bool, str]:
    ma, mb = float(np.mean(a)), float(np.mean(b))
    se = math.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b))
    return abs(ma - mb) <= 4 * se + slack, f"reference {ma:.2f} vs simulator {mb:.2f} (se {se:.2f})"


@pytest.mark.parametrize(("strategy", "surge"), [("kubectl", 0), ("drainsafe", 0), ("surge", 1)])
def test_simulator_agrees_with_the_per_request_reference(strategy: str, surge: int) -> None:
    ref_mod = _reference()
    # Start-up times vary, so no two replacements become Ready at the same instant: the two
    # models order simultaneous events differently, and with a PDB that can matter.
    s = parse_scenario(small(**{"upgrade.strategy": strategy, "upgrade.surge_nodes": surge,
                                "workloads.0.startup": {"min": 8, "max": 12}}))
    refs = [ref_mod.run_reference(s, seed) for seed in range(10)]
    sims = [simulate(dataclasses.replace(s, seed=seed)) for seed in range(120)]

    assert all(r.finished for r in sims)
    assert {r.deletions for r in refs} == {len(m.lifecycle.deleted_at) for m in sims}
    for cause in ("race", "cut_deadline"):
        ok, why = _agree([r.failures[cause] for r in refs],
                         [m.counts.failures[cause] for m in sims])
        assert ok, f"{cause}: {why}"
        # Both models see this failure: the scenario is not trivially zero.
        assert np.mean([r.failures[cause] for r in refs]) > 5
    ok, why = _agree([r.upgrade_seconds for r in refs], [m.upgrade_time for m in sims],
                     slack=1.0)  # the reference polls node emptiness every 0.05 s
    assert ok, f"upgrade time: {why}"
    ok, why = _agree([float(np.mean(r.node_drain_seconds)) for r in refs],
                     [float(m.node_drain_seconds().mean()) for m in sims], slack=0.2)
    assert ok, f"node drain time: {why}"
    assert sum(r.failures["cut_sigkill"] for r in refs) == 0
    assert sum(m.counts.failures["cut_sigkill"] for m in sims) == 0
