"""Golden figures of `drainsafe simulate`: record a fixed set of runs, or check them.

A refactor of the engine (drainsafe.simulate.lifecycle and its parts) must not move one
figure: every figure the report prints (Result.summary, the timeline) and a digest of the
lifecycle's arrays, per run, with its seed. The fixed set: examples/scenarios/*.yaml, the
500 x 8 example under its three strategies (and as a NodeMaintenance), and the tests'
small scenarios under each strategy.

    python bench/sim_golden.py record golden.json
    python bench/sim_golden.py check golden.json     # exit 1 on any difference
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.simulate.scenarios import small  # noqa: E402

from drainsafe.simulate.maintenance import Maintenance  # noqa: E402
from drainsafe.simulate.scenario import (  # noqa: E402
    STRATEGIES,
    Scenario,
    load_scenario,
    parse_scenario,
)
from drainsafe.simulate.simulation import simulate  # noqa: E402


def digest(result: Any) -> dict[str, Any]:
    """Every figure of one run, and a hash of the lifecycle's arrays (bit-exact)."""
    lc = result.lifecycle
    h = hashlib.sha256()
    for name in ("deleted_at", "workload", "pod_rate", "accepted_rate", "propagation",
                 "gone_after", "ready_times", "ready_counts", "node_drain_started",
                 "node_empty", "node_back"):
        h.update(getattr(lc, name).tobytes())
    for name in ("workload", "group", "standin", "serving_from", "serving_until"):
        h.update(getattr(lc.groups, name).tobytes())
    summary = result.summary()
    summary.pop("wall_seconds")
    return {"seed": result.scenario.seed, "summary": summary,
            "timeline": result.timeline(), "lifecycle_sha256": h.hexdigest()}


def runs() -> dict[str, Scenario]:
    out: dict[str, Scenario] = {}
    for path in sorted((ROOT / "examples" / "scenarios").glob("*.yaml")):
        base = load_scenario(path)
        for strategy in STRATEGIES:
            out[f"{path.stem}/{strategy}"] = dataclasses.replace(
                base, upgrade=dataclasses.replace(base.upgrade, strategy=strategy))
    fleet = load_scenario(ROOT / "src" / "drainsafe" / "simulate" / "fleet-500x8.yaml")
    for strategy in STRATEGIES:
        out[f"fleet-500x8-maintenance/{strategy}"] = dataclasses.replace(
            fleet, upgrade=dataclasses.replace(
                fleet.upgrade, strategy=strategy, parallelism=8,
                maintenance=Maintenance(max_unavailable="1%")))
    for strategy in STRATEGIES:
        for surge in (0, 1):
            out[f"small/{strategy}/surge{surge}"] = parse_scenario(small(**{
                "upgrade.strategy": strategy, "upgrade.surge_nodes": surge,
                "upgrade.parallelism": 2}))
        data = small(**{"upgrade.strategy": strategy})
        data["upgrade"].pop("parallelism")
        data["upgrade"]["maintenance"] = {"max_parallel_nodes": 3, "max_unavailable": 2}
        out[f"small-maintenance/{strategy}"] = parse_scenario(data)
        for policy in ("RecreateGroupOnPodRestart", "None"):
            out[f"groups/{strategy}/{policy}"] = parse_scenario(groups(strategy, policy))
    return out


def groups(strategy: str, policy: str) -> dict[str, Any]:
    """Two LWS groups of 2 beside 1-GPU pods on 2-GPU nodes, two drains at once."""
    data = small(**{"upgrade.strategy": strategy, "upgrade.parallelism": 2,
                    "upgrade.surge_nodes": 1, "fleet.nodes": 8})
    data["workloads"].append({
        "name": "lws", "replicas": 2, "group_size": 2, "gpus": 1, "rate": 10,
        "durations": {"p50": 2, "p99": 8, "max": 12}, "startup": 15,
        "restart_policy": policy, "pdb": {"maxUnavailable": 2},
        "termination": {"grace": 30, "drain_delay": 0, "shutdown_deadline": 10}})
    return data


def main(argv: list[str]) -> int:
    mode, path = argv[0], Path(argv[1])
    only = set(argv[2:])
    got = {name: digest(simulate(s)) for name, s in runs().items()
           if not only or name in only}
    if mode == "record":
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(got)} runs in {path}")
        return 0
    want = json.loads(path.read_text())
    for name, run in got.items():
        # A figure added since the recording is new, not a difference.
        old = want.get(name, {}).get("summary", {})
        for key in set(run["summary"]) - set(old):
            run["summary"].pop(key)
    bad = [name for name in got if json.loads(json.dumps(got[name])) != want.get(name)]
    for name in bad:
        print(f"DIFFERS: {name}")
    print(f"{len(got) - len(bad)}/{len(got)} runs identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
