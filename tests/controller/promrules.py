"""deploy/controller/prometheusrule.yaml under `promtool test rules` (Debian's prometheus
package), on series scraped from the controller's /metrics.

promtool 2.42's test clock starts at 0 (no start_timestamp before 2.49), so the scrape's
wall time W becomes test time 0: a `*_since_seconds` value S (unix time) becomes S - W, and
time() - (S - W) at test time t is the real age at W + t. Other values are kept as scraped.
The scraped value is held for the test's span: what the controller keeps exporting while
nothing changes on the cluster.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "controller" / "prometheusrule.yaml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
SPAN_MINUTES = 240
_LABEL = re.compile(r"\{\{ \$labels\.(\w+) \}\}")


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def drainsafe_samples(text: str, **extra: str) -> list[Sample]:
    """The drainsafe_* gauges of one scrape, with `extra` labels (instance, as Prometheus
    adds them)."""
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith(("drainsafe_node_", "drainsafe_surge_",
                                  "drainsafe_nodemaintenance_")):
                out.append(Sample(s.name, {**s.labels, **extra}, float(s.value)))
    return out


def rule_groups() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    assert doc["kind"] == "PrometheusRule"
    groups: list[dict[str, Any]] = doc["spec"]["groups"]
    return groups


def annotations(alert: str, labels: Mapping[str, str]) -> dict[str, str]:
    """The rule's annotations rendered for `labels` (they use only {{ $labels.x }})."""
    for group in rule_groups():
        for rule in group["rules"]:
            if rule.get("alert") == alert:
                out = {}
                for k, v in rule.get("annotations", {}).items():
                    rest = _LABEL.sub("", v)
                    assert "{{" not in rest, f"{alert}: a template beyond $labels: {v}"
                    out[k] = _LABEL.sub(lambda m: labels.get(m.group(1), ""), v)
                return out
    raise AssertionError(f"no alert {alert} in {RULES}")


def series(samples: Iterable[Sample], wall: float) -> list[dict[str, str]]:
    out = []
    for s in samples:
        value = s.value - wall if s.name.endswith("_since_seconds") else s.value
        labels = ", ".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        out.append({"series": f"{s.name}{{{labels}}}",
                    "values": f"{value:.0f}+0x{SPAN_MINUTES}"})
    return out


@dataclass(frozen=True)
class Expect:
    """At `minutes` into the test, `alert` fires exactly for these label sets."""

    minutes: int
    alert: str
    firing: tuple[Mapping[str, str], ...] = ()


def run_promtool(tmp: Path, samples: Iterable[Sample], wall: float,
                 expects: Iterable[Expect]) -> subprocess.CompletedProcess[str]:
    rules = tmp / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}))
    cases = [{"eval_time": f"{e.minutes}m", "alertname": e.alert,
              # Prometheus drops a label whose value is empty.
              "exp_alerts": [{"exp_labels": {**{k: v for k, v in labels.items() if v},
                                             "severity": "warning"},
                              "exp_annotations": annotations(e.alert, labels)}
                             for labels in e.firing]}
             for e in expects]
    test = tmp / "rules_test.yaml"
    test.write_text(yaml.safe_dump({
        "rule_files": [rules.name], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series(samples, wall),
                   "alert_rule_test": cases}]}, sort_keys=False))
    return subprocess.run([PROMTOOL, "test", "rules", str(test)], capture_output=True,
                          text=True, timeout=60, cwd=tmp)
