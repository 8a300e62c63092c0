"""A NodeMaintenance's spec and status, read and written as typed values."""

from __future__ import annotations

import re

import pytest

from drainsafe.maintenance.progress import NodeProgress, phase_of, status_of
from drainsafe.maintenance.spec import SpecError, parse_spec


def test_selector_becomes_the_label_selector_query() -> None:
    spec = parse_spec({"spec": {"nodeSelector": {
        "matchLabels": {"pool": "a100"},
        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b", "a"]},
                             {"key": "spot", "operator": "DoesNotExist"}]},
        "maxUnavailable": "25%", "uncordon": "WhenMaintained",
        "drain": {"strategy": "evict", "timeoutSeconds": 60}}})
    assert spec.label_selector == "pool=a100,zone in (a,b),!spot"
    assert spec.unavailable_budget(6) == 2  # 1.5 rounded up
    settings = spec.drain_settings("maint")
    assert settings.options.strategy == "evict" and settings.timeout == 60.0


@pytest.mark.parametrize("spec", [
    {"nodeSelector": {}},  # an empty selector would be every node
    {},
    {"nodeNames": ["a"], "uncordon": "Later"},
    {"nodeNames": ["a"], "maxUnavailable": "lots"},
    {"nodeNames": ["a"], "maxParallelNodes": 0},
])
def test_a_spec_that_would_act_wrongly_is_refused(spec: dict[str, object]) -> None:
    with pytest.raises(SpecError):
        parse_spec({"spec": spec})


def test_phase_and_counts() -> None:
    a, b = NodeProgress("a"), NodeProgress("b")
    assert phase_of([a, b], "Immediately", paused=False) == "Pending"
    assert phase_of([a, b], "Immediately", paused=True) == "Paused"
    a = a.to("Draining", "Evicting", started="2026-01-01T00:00:00Z")
    assert phase_of([a, b], "Immediately", paused=False) == "Running"
    a = a.to("Uncordoned", "Maintained", finished="2026-01-01T00:01:00Z")
    b = b.to("Failed", "DrainTimedOut")
    status = status_of([a, b], "Immediately", paused=True, current_wave=2, generation=3)
    assert status["phase"] == "Failed" and (status["done"], status["failed"]) == (1, 1)
    assert status["nodes"][0]["started"] == "2026-01-01T00:00:00Z"
    # uncordon: Never leaves drained nodes cordoned, and that is success
    assert phase_of([a.to("Drained", "Drained")], "Never", paused=False) == "Succeeded"


def test_capacity_floor_defaults_to_desired_and_reads_per_workload_floors() -> None:
    from drainsafe.kube.objects import WorkloadRef
    chat = WorkloadRef("Deployment", "ml", "chat")
    spec = parse_spec({"spec": {"nodeNames": ["a"]}})
    assert spec.drain_settings("m").options.floors is not None
    assert spec.capacity_floors.floor(chat, {}, 4) == 4  # never below desired by default
    # an explicit evict strategy asks for break before make: no floor unless given
    evict = parse_spec({"spec": {"nodeNames": ["a"], "drain": {"strategy": "evict"}}})
    assert evict.capacity_floors.floor(chat, {}, 4) == 0
    spec = parse_spec({"spec": {"nodeNames": ["a"], "capacityFloor": {
        "default": "75%", "workloads": [
            {"kind": "Deployment", "namespace": "ml", "name": "chat", "floor": 1},
            {"selector": {"matchLabels": {"tier": "batch"}}, "floor": "0%"}]}}})
    floors = spec.drain_settings("m").options.floors
    assert floors is not None
    assert floors.floor(chat, {}, 4) == 1
    assert floors.floor(WorkloadRef("StatefulSet", "x", "y"), {"tier": "batch"}, 4) == 0
    assert floors.floor(WorkloadRef("StatefulSet", "x", "y"), {}, 4) == 3


@pytest.mark.parametrize(("floor", "says"), [
    ({"default": "lots"}, "capacityFloor.default"),
    ({"default": "150%"}, "outside 0..100%"),
    ({"default": -1}, "capacityFloor.default"),
    ({"default": True}, "capacityFloor.default"),
    ({"workloads": [{"floor": 1}]}, "capacityFloor.workloads[0]: name a kind"),
    ({"workloads": [{"name": "x"}]}, "capacityFloor.workloads[0]: floor is required"),
    ({"workloads": [{"name": "x", "floor": "1/2"}]}, "capacityFloor.workloads[0].floor"),
    ({"workloads": [{"name": "x", "floor": 1, "replicas": 2}]}, "unknown field(s) replicas"),
    ({"workloads": [{"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]},
                     "floor": 1}]}, "capacityFloor.workloads[0].selector"),
])
def test_a_capacity_floor_that_cannot_be_read_is_refused_naming_the_field(
        floor: dict[str, object], says: str) -> None:
    with pytest.raises(SpecError, match=re.escape(says)):
        parse_spec({"spec": {"nodeNames": ["a"], "capacityFloor": floor}})
