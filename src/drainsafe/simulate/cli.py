"""`drainsafe simulate`: fleet-scale what-if of a drain or upgrade. Light imports only."""

from __future__ import annotations

import argparse
from typing import Any

from drainsafe.shell import EXIT_FAILED, EXIT_OK, EXIT_USAGE, exit_codes_text

EXAMPLE = "fleet-500x8.yaml"


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "simulate",
        help="what-if of a fleet upgrade in virtual time: failed requests, capacity, duration",
        description="Simulate draining every node of a GPU fleet (cluster upgrade) in virtual "
        "time: failed requests by cause (race, cut at the deadline or by SIGKILL, no "
        "capacity), serving capacity over time and the total upgrade time. --sweep searches "
        "drain delay, grace period, parallelism, surge nodes and strategy for zero failures "
        "at the shortest upgrade. Scenario format and limits (10,000 nodes, 100,000 "
        "replicas, durations up to 30 days): docs/simulate.md. " + exit_codes_text(
            (EXIT_OK, "no request lost"),
            (EXIT_FAILED, "requests fail or the upgrade wedges (with --sweep: no setting "
             "loses nothing)"),
            (EXIT_USAGE, "bad scenario or usage (the message names the field)")),
    )
    p.add_argument("scenario", nargs="?", metavar="SCENARIO.yaml", help="the scenario file")
    p.add_argument("--example", action="store_true",
                   help="use the built-in 500-node x 8-GPU example scenario")
    p.add_argument("--sweep", action="store_true",
                   help="search the settings that lose no request at the shortest upgrade")
    p.add_argument("--seed", type=int, help="override the scenario's random seed")
    p.add_argument("--maintenance", metavar="NODEMAINTENANCE.yaml",
                   help="run the upgrade as this NodeMaintenance would (its maxParallelNodes "
                   "and maxUnavailable, its controller's wave planner) over the scenario's "
                   "fleet")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text",
                   help="text tables (default) or JSON")
    p.add_argument("--out", metavar="DIR",
                   help="write the picture (capacity and failures over time, PNG) here")
    p.add_argument("--print-example", action="store_true",
                   help="print the built-in example scenario (a starting point) and exit")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    from dataclasses import replace
    from importlib.resources import files

    from drainsafe.shell import console, output_dir_problem
    from drainsafe.simulate.scenario import ScenarioError, load_scenario, parse_scenario

    err = console(stderr=True)
    example = files("drainsafe.simulate").joinpath(EXAMPLE)
    if args.print_example:
        sys.stdout.write(example.read_text(encoding="utf-8"))
        return EXIT_OK
    if bool(args.scenario) == bool(args.example):
        err.print("drainsafe simulate: give a SCENARIO.yaml or --example (one of them)")
        return EXIT_USAGE
    try:
        if args.example:
            import yaml

            scenario = parse_scenario(yaml.safe_load(example.read_text(encoding="utf-8")))
        else:
            scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        where = args.scenario or EXAMPLE
        err.print(f"drainsafe simulate: bad scenario {where}: {exc}", markup=False)
        return EXIT_USAGE
    if args.seed is not None:
        scenario = replace(scenario, seed=args.seed)
    if args.maintenance:
        import yaml

        try:
            scenario = _as_maintenance(scenario, args.maintenance)
        except (OSError, ValueError, yaml.YAMLError) as exc:  # SpecError is a ValueError
            err.print(f"drainsafe simulate: --maintenance {args.maintenance}: {exc}",
                      markup=False)
            return EXIT_USAGE
    problem = output_dir_problem(args.out) if args.out else None
    if problem:  # before the run: a sweep takes minutes, and its picture would be lost
        err.print(f"drainsafe simulate: {problem}", markup=False)
        return EXIT_USAGE

    out = console() if args.output == "text" else None
    if args.sweep:
        return _sweep(scenario, args, out, err)

    from drainsafe.simulate.simulation import simulate

    try:
        result = simulate(scenario)
    except ValueError as exc:
        err.print(f"drainsafe simulate: {exc}", markup=False)
        return EXIT_USAGE
    picture = _picture(result, args.out)
    if out is None:
        summary = result.summary()
        summary["timeline"] = result.timeline()
        summary["picture"] = str(picture) if picture else None
        print(json.dumps(summary, indent=2))
    else:
        from drainsafe.simulate.report import print_result

        print_result(result, out)
        if picture:
            out.print(f"picture: {picture}")
    return EXIT_OK if result.failed == 0 and result.finished else EXIT_FAILED


def _as_maintenance(scenario: Any, path: str) -> Any:
    """The scenario with its upgrade run as the NodeMaintenance in `path`."""
    from dataclasses import replace
    from pathlib import Path

    import yaml

    from drainsafe.simulate.maintenance import from_manifest

    obj = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(obj, dict) or obj.get("kind") != "NodeMaintenance":
        raise ValueError("expected a NodeMaintenance object (kind: NodeMaintenance)")
    parallel, maintenance = from_manifest(obj)
    return replace(scenario, upgrade=replace(scenario.upgrade, parallelism=parallel,
                                             maintenance=maintenance))


def _picture(result: Any, out_dir: str | None) -> Any:
    if not out_dir:
        return None
    from pathlib import Path

    from drainsafe.simulate.picture import draw

    return draw(result, Path(out_dir) / f"simulate-{result.scenario.name}.png")


def _sweep(scenario: Any, args: argparse.Namespace, out: Any, err: Any) -> int:
    import json

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from drainsafe.simulate.report import print_sweep, sweep_json
    from drainsafe.simulate.sweep import planned_runs, sweep

    with Progress(TextColumn("sweep: {task.description}"), BarColumn(),
                  MofNCompleteColumn(), console=err, transient=True) as bar:
        task = bar.add_task("starting", total=planned_runs(scenario))

        def step(stage: str) -> None:
            bar.update(task, description=stage, advance=1)

        result = sweep(scenario, progress=step)
    picture = _picture(result.best, args.out) if result.best else None
    if out is None:
        data = sweep_json(result)
        data["picture"] = str(picture) if picture else None
        print(json.dumps(data, indent=2))
    else:
        print_sweep(result, out)
        if picture:
            out.print(f"picture of the best: {picture}")
    return EXIT_OK if result.best is not None else EXIT_FAILED
