"""The maintenance facts (maintenance.facts) as the controller exports them, and the alert
rules of deploy/controller/prometheusrule.yaml under `promtool test rules` on those series.

The objects carry records written by the project's own writers (drain.ownership's cordon
patch and surge record), as a drain and a NodeMaintenance leave them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from drainsafe.controller.metrics import MaintenanceCollector
from drainsafe.drain.ownership import (
    Progress,
    SurgeRecord,
    cordon_patch,
    maintenance_ref,
    surge_record_patch,
)
from drainsafe.kube.objects import rfc3339
from drainsafe.maintenance.facts import MaintenanceFacts, maintenance_facts

from .promrules import PROMTOOL, Expect, drainsafe_samples, run_promtool

WALL = 1_790_000_000.0  # the scrape's wall time


def _merge(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386), as the API server applies drainsafe's patches."""
    out = dict(obj)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            out[k] = _merge(out.get(k) or {}, v)
        else:
            out[k] = v
    return out


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {}}


def cordoned(name: str, at: float, operation: str = "") -> dict[str, Any]:
    n = node(name)
    return _merge(n, cordon_patch(n, actor="ops@laptop", reason="kernel", now=at,
                                  progress=Progress("interrupted"), operation=operation))


def workload(name: str, record: SurgeRecord | None, replicas: int) -> dict[str, Any]:
    w = {"metadata": {"name": name, "namespace": "ml", "resourceVersion": "1"},
         "spec": {"replicas": replicas}}
    return w if record is None else _merge(w, surge_record_patch(w, record))


def facts() -> MaintenanceFacts:
    nodes = [cordoned("gpu-1", WALL - 600), cordoned("gpu-2", WALL - 60, maintenance_ref("up")),
             {"metadata": {"name": "gpu-3"}, "spec": {"unschedulable": True}}, node("gpu-4")]
    deps = [workload("llm", SurgeRecord("gpu-1", 2, by="ops", at=rfc3339(WALL - 300)), 3),
            workload("idle", None, 2)]
    sts = [workload("db", SurgeRecord("gpu-4", 3, at=rfc3339(WALL - 30), guard=True), 4),
           workload("kv", SurgeRecord("gpu-2", 1, at=rfc3339(WALL - 50)), 2)]
    maint = [{"metadata": {"name": "up"}, "status": {"phase": "Succeeded", "nodes": [
                 {"name": "gpu-2", "state": "Drained"}]}},
             {"metadata": {"name": "bad"}, "status": {"phase": "Failed"}},
             {"metadata": {"name": "new"}}]
    return maintenance_facts(nodes=nodes, workloads={"Deployment": deps, "StatefulSet": sts},
                             maintenances=maint)


def scrape(f: MaintenanceFacts) -> str:
    registry = CollectorRegistry()
    registry.register(MaintenanceCollector(lambda: f))
    return generate_latest(registry).decode()


def test_facts_say_who_holds_each_cordon_and_surge() -> None:
    f = facts()
    assert [(n.node, n.by, n.maintenance, n.since) for n in f.cordons] == [
        ("gpu-1", "drain", "", WALL - 600), ("gpu-2", "nodemaintenance", "up", WALL - 60),
        ("gpu-3", "other", "", None)]
    assert [(str(s.workload), s.by, s.maintenance) for s in f.surges] == [
        ("Deployment/ml/llm", "drain", ""), ("StatefulSet/ml/db", "guard", ""),
        ("StatefulSet/ml/kv", "nodemaintenance", "up")]
    assert [(m.name, m.phase, m.nodes["Drained"]) for m in f.maintenances] == [
        ("up", "Succeeded", 1), ("bad", "Failed", 0), ("new", "Pending", 0)]
    assert f.forgotten  # audit's exit 1: gpu-3 has no record, and surges are left


def test_collector_exports_the_facts() -> None:
    text = scrape(facts())
    for line in (
        'drainsafe_node_cordoned{by="drain",node="gpu-1",nodemaintenance=""} 1.0',
        'drainsafe_node_cordoned{by="other",node="gpu-3",nodemaintenance=""} 1.0',
        'drainsafe_node_cordoned_since_seconds{by="nodemaintenance",node="gpu-2",'
        'nodemaintenance="up"} 1.78999994e+09',
        'drainsafe_surge_extra_replicas{by="drain",kind="Deployment",name="llm",'
        'namespace="ml",node="gpu-1",nodemaintenance=""} 1.0',
        'drainsafe_nodemaintenance_phase{name="bad",phase="Failed"} 1.0',
        'drainsafe_nodemaintenance_phase{name="up",phase="Failed"} 0.0',
    ):
        assert line in text, text
    assert 'node="gpu-4"' not in text.split("drainsafe_surge")[0]  # not cordoned
    assert "drainsafe_node_cordoned_since_seconds{by=\"other\"" not in text


needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None and
                                    not Path(PROMTOOL).exists(),
                                    reason="promtool (Debian's prometheus) not installed")


@needs_promtool
def test_promtool_fires_each_alert_after_its_threshold_and_not_before(
        tmp_path: Path) -> None:
    samples = [*drainsafe_samples(scrape(facts()), instance="10.0.0.1:9090"),
               *drainsafe_samples(scrape(facts()), instance="10.0.0.2:9090")]
    gpu1 = {"node": "gpu-1", "by": "drain", "nodemaintenance": ""}
    gpu2 = {"node": "gpu-2", "by": "nodemaintenance", "nodemaintenance": "up"}
    llm = {"namespace": "ml", "kind": "Deployment", "name": "llm", "node": "gpu-1",
           "by": "drain", "nodemaintenance": ""}
    # Ages at the scrape: gpu-1 10 min, gpu-2 1 min; llm's surge 5 min, db 0.5, kv ~1.
    # Ages at the scrape (test time 0): gpu-1 10 min, gpu-2 1 min; the surges of llm
    # 5 min, db 30 s, kv 50 s.
    expects = [
        Expect(100, "DrainsafeCordonTooOld"),  # gpu-1 is 1 h 50 min old
        Expect(113, "DrainsafeCordonTooOld"),  # over 2 h since 111, but `for: 5m`
        Expect(118, "DrainsafeCordonTooOld", (gpu1,)),
        Expect(130, "DrainsafeCordonTooOld", (gpu1, gpu2)),
        Expect(110, "DrainsafeCordonUnrecorded"),  # seen for less than 2 h
        Expect(125, "DrainsafeCordonUnrecorded", ({"node": "gpu-3"},)),
        Expect(50, "DrainsafeSurgeLeftInPlace"),  # llm's surge is 55 min old
        Expect(62, "DrainsafeSurgeLeftInPlace", (llm,)),
        Expect(2, "DrainsafeNodeMaintenanceFailed"),
        Expect(10, "DrainsafeNodeMaintenanceFailed", ({"name": "bad"},)),
    ]
    done = run_promtool(tmp_path, samples, WALL, expects)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    # The check can fail: the cordon alert expected 2 min early is a promtool failure.
    wrong = run_promtool(tmp_path, samples, WALL, [Expect(114, "DrainsafeCordonTooOld",
                                                          (gpu1,))])
    assert wrong.returncode != 0 and "FAILED" in wrong.stdout + wrong.stderr
