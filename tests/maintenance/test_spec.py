"""A NodeMaintenance's spec and status, read and written as typed values."""

from __future__ import annotations

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
