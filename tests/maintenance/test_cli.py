"""`drainsafe maintenance`'s pure parts: the object from flags, the done refusal, the rows
and lines a watch prints, and its exit code."""

from __future__ import annotations

from typing import Any

import pytest

from drainsafe.cli import main
from drainsafe.maintenance.cli import (
    CreateFlags,
    FlagError,
    changed_lines,
    done_refusal,
    label_selector,
    manifest_from_flags,
    manifest_yaml,
    node_rows,
    watch_exit,
)
from drainsafe.maintenance.spec import parse_spec, selector_string
from drainsafe.shell import EXIT_FAILED, EXIT_OK, EXIT_USAGE


@pytest.mark.parametrize("text", [
    "pool=a100", "pool==a100,zone in (a,b)", "gpu,!spot", "zone notin (c),tier!=low",
    "a.b/c=d,e in (x, y)"])
def test_selector_round_trips_through_the_reconcilers_reading(text: str) -> None:
    # what -l says is what the reconciler lists with (same requirements, canonical order)
    ours = selector_string(label_selector(text))
    assert sorted(ours.split(",")) == sorted(
        selector_string(label_selector(ours)).split(","))
    for req in _split(text):
        norm = req.replace("==", "=").replace(", ", ",").strip()
        if "!=" in norm:
            key, value = norm.split("!=")
            norm = f"{key} notin ({value})"
        assert norm in ours, (norm, ours)


def _split(text: str) -> list[str]:
    from drainsafe.maintenance.cli import _split_selector

    return _split_selector(text)


def test_flags_make_the_object_parse_spec_reads() -> None:
    obj = manifest_from_flags(CreateFlags(
        name="drv", selector="pool=a100", nodes=("gpu-9",), max_parallel_nodes=2,
        max_unavailable="25%", uncordon="WhenMaintained", reason="driver 570",
        strategy="evict"))
    assert obj["apiVersion"] == "drainsafe.io/v1alpha1" and obj["kind"] == "NodeMaintenance"
    spec = parse_spec(obj)
    assert (spec.label_selector, spec.node_names) == ("pool=a100", ("gpu-9",))
    assert (spec.max_parallel_nodes, spec.max_unavailable) == (2, "25%")
    assert (spec.uncordon, spec.reason, spec.strategy) == ("WhenMaintained", "driver 570",
                                                           "evict")
    assert manifest_from_flags(CreateFlags(name="n", nodes=("a",), max_unavailable="3")
                               )["spec"]["maxUnavailable"] == 3  # an int, not "3"


@pytest.mark.parametrize(("flags", "named"), [
    (CreateFlags(name="n"), "-l/--selector or --node"),
    (CreateFlags(name="n", nodes=("a",), max_unavailable="1.5"), "--max-unavailable"),
    (CreateFlags(name="n", nodes=("a",), max_unavailable="-1"), "--max-unavailable"),
    (CreateFlags(name="n", nodes=("a",), max_parallel_nodes=0), "--max-parallel-nodes"),
    (CreateFlags(name="n", selector="pool in a100"), "-l/--selector"),
])
def test_bad_flags_are_refused_naming_the_flag(flags: CreateFlags, named: str) -> None:
    with pytest.raises(FlagError) as err:
        manifest_from_flags(flags)
    assert str(err.value).startswith(named), err.value


def test_bad_flags_exit_2_before_any_connection(capsys: pytest.CaptureFixture[str]) -> None:
    # no kubeconfig is read: a flag error is found first
    assert main(["maintenance", "create", "n", "--kubeconfig", "/nonexistent"]) == EXIT_USAGE
    assert "-l/--selector or --node" in capsys.readouterr().err
    assert main(["maintenance", "create", "n", "--node", "a", "--max-unavailable", "x%",
                 "--kubeconfig", "/nonexistent"]) == EXIT_USAGE
    assert "--max-unavailable" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "strategy", "default"), [
    ("50%", "surge", "50%"), ("0", "surge", 0), ("2", "evict", 2), ("100%", "evict", "100%"),
    (None, "surge", "100%"), (None, "evict", 0)])
def test_capacity_floor_is_the_default_floor_parse_spec_reads(
        text: str | None, strategy: str, default: int | str) -> None:
    obj = manifest_from_flags(CreateFlags(name="n", nodes=("a",), capacity_floor=text,
                                          strategy=strategy))
    # no flag: no field, so the reconciler's own default (by strategy) applies
    assert ("capacityFloor" in obj["spec"]) == (text is not None)
    floors = parse_spec(obj).capacity_floors
    assert (floors.default, floors.rules) == (default, ())


@pytest.mark.parametrize("text", ["150%", "-1", "1.5", "half", "50 %"])
def test_a_bad_capacity_floor_is_refused_naming_the_flag(
        text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(FlagError) as err:
        manifest_from_flags(CreateFlags(name="n", nodes=("a",), capacity_floor=text))
    assert str(err.value).startswith("--capacity-floor: "), err.value
    assert main(["maintenance", "create", "n", "--node", "a", "--capacity-floor", text,
                 "--kubeconfig", "/nonexistent"]) == EXIT_USAGE
    assert "--capacity-floor" in capsys.readouterr().err


def test_dry_run_shows_the_capacity_floor(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    assert main(["maintenance", "create", "n", "--node", "a", "--capacity-floor", "75%",
                 "--dry-run", "--kubeconfig", "/nonexistent"]) == EXIT_OK
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["spec"]["capacityFloor"] == {"default": "75%"}
    assert parse_spec(printed).capacity_floors.default == "75%"


def _maint(uncordon: str, *nodes: tuple[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "drv"}, "spec": {"uncordon": uncordon},
            "status": {"nodes": [{"name": n, "state": s, "wave": 1, "reason": "r"}
                                 for n, s in nodes]}}


def test_done_is_allowed_only_when_awaiting_under_when_maintained() -> None:
    assert done_refusal(_maint("WhenMaintained", ("a", "AwaitingMaintenance")), "a") is None
    for state in ("Pending", "Cordoned", "Draining", "Drained", "Uncordoned", "Failed"):
        why = done_refusal(_maint("WhenMaintained", ("a", state)), "a")
        assert why is not None and state in why and "AwaitingMaintenance" in why
    why = done_refusal(_maint("Immediately", ("a", "AwaitingMaintenance")), "a")
    assert why is not None and "WhenMaintained" in why
    why = done_refusal(_maint("WhenMaintained", ("a", "AwaitingMaintenance")), "b")
    assert why is not None and "not part of" in why
    assert done_refusal({"metadata": {"name": "drv"}, "spec": {"uncordon": "WhenMaintained"}},
                        "a") is not None  # no status yet


def test_rows_and_pipe_lines_follow_the_status() -> None:
    old = {"phase": "Running", "done": 0, "total": 2, "currentWave": 1, "nodes": [
        {"name": "a", "state": "Draining", "wave": 1, "reason": "Draining",
         "started": "2026-12-05T23:00:00Z"},
        {"name": "b", "state": "Pending", "reason": ""}]}
    assert node_rows(old) == [
        ("a", "Draining", "1", "Draining", "2026-12-05T23:00:00Z", "-"),
        ("b", "Pending", "-", "", "-", "-")]
    new = {**old, "nodes": [{**old["nodes"][0], "state": "AwaitingMaintenance",
                             "reason": "Drained", "message": "mark it"}, old["nodes"][1]]}
    assert changed_lines("drv", old, new) == [
        "  a AwaitingMaintenance wave=1 reason=Drained: mark it"]
    first = changed_lines("drv", None, old)
    assert first[0] == "drv: Running done 0/2 failed 0 wave 1" and len(first) == 3
    assert changed_lines("drv", new, {**new, "phase": "Succeeded"}) == [
        "drv: Succeeded done 0/2 failed 0 wave 1"]


def test_watch_ends_on_terminal_phases_and_deletion() -> None:
    assert watch_exit({"status": {"phase": "Succeeded"}}) == EXIT_OK
    assert watch_exit({"status": {"phase": "Failed"}}) == EXIT_FAILED
    assert watch_exit(None) == EXIT_FAILED
    for phase in ("Pending", "Running", "Paused", None):
        assert watch_exit({"status": {"phase": phase}}) is None


def test_printed_yaml_quotes_what_kubectl_would_read_as_a_boolean() -> None:
    # found by the lab test: `tier in (x,y)` printed as `- y`, which kubectl apply sent as
    # true and the API server refused (values must be strings)
    obj = manifest_from_flags(CreateFlags(name="n", selector="tier in (x,y),on=off"))
    text = manifest_yaml(obj)
    assert '- "y"' in text and '"on": "off"' in text
    import yaml

    assert yaml.safe_load(text) == obj
