"""Golden figures: small runs under every strategy give exactly the figures recorded in
golden_small.json (every figure the report prints and a hash of the lifecycle's arrays),
so a refactor of the engine that moves one draw fails here. The big comparison (the
examples, the 500 x 8 fleet) is bench/sim_golden.py. A change meant to move figures
re-records them: python bench/sim_golden.py record tests/simulate/golden_small.json
$(python -c 'import json; print(*json.load(open("tests/simulate/golden_small.json")))')
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden_small.json")


def _golden_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sim_golden", ROOT / "bench" / "sim_golden.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WANT = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(WANT))
def test_a_small_run_gives_its_recorded_figures(name: str) -> None:
    golden = _golden_module()
    got = golden.digest(golden.simulate(golden.runs()[name]))
    assert json.loads(json.dumps(got)) == WANT[name]
