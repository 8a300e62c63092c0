"""deploy/controller/rbac.yaml grants what the controller's code calls, and no more."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from drainsafe.drain.ownership import GUARDED_KINDS

ROOT = Path(__file__).resolve().parents[2]


def _rules() -> set[tuple[str, str, str]]:
    docs = list(yaml.safe_load_all((ROOT / "deploy/controller/rbac.yaml").read_text()))
    return {(g, r, v) for d in docs if d["kind"] in ("ClusterRole", "Role")
            for rule in d["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def _used() -> set[tuple[str, str]]:
    source = "\n".join(p.read_text() for p in (ROOT / "src/drainsafe/controller").glob("*.py"))
    used = set(re.findall(r'api_path\(\s*"([^"]+)",\s*"([a-z]+)"', source))
    # a subresource is granted by its own name: "nodemaintenances/status"
    used |= {(gv, f"{plural}/{sub}") for gv, plural, sub in re.findall(
        r'api_path\(\s*"([^"]+)",\s*"([a-z]+)"[^)]*subresource="([a-z]+)"', source)}
    # The surge goes through drain's engine (controller.engine -> drain.scale): the kinds
    # it scales, a custom resource's through its scale subresource.
    for kind in GUARDED_KINDS.values():
        used.add((kind.api_version, kind.plural))
        if kind.scale_subresource:
            used.add((kind.api_version, f"{kind.plural}/scale"))
    # Informer paths: "/api/v1/pods", "/apis/apps/v1/deployments"
    for gv, plural in re.findall(r'"/apis?/((?:[a-z.]+/)?v[0-9a-z]+)/([a-z]+)"', source):
        used.add((gv, plural))
    return used


def test_no_pod_delete_no_eviction_no_wildcards() -> None:
    rules = _rules()
    assert not any(v in ("delete", "deletecollection", "*") for _, _, v in rules)
    assert not any(r in ("pods/eviction",) or "*" in g + r for g, r, _ in rules)


def test_every_resource_the_code_reaches_is_granted_and_nothing_spare() -> None:
    used = _used()
    assert ("v1", "pods") in used and ("coordination.k8s.io/v1", "leases") in used
    rules = _rules()
    for gv, plural in used:
        group = "" if gv == "v1" else gv.split("/")[0]
        assert any(g == group and r == plural for g, r, _ in rules), (group, plural)
    for _, resource, _ in rules:
        assert any(p == resource for _, p in used), resource


def test_maintenance_drains_evict_only_through_the_eviction_api() -> None:
    """The NodeMaintenance reconciler runs drainsafe drain's engine: eviction (PDBs
    honoured), never a pod delete, no wildcard; granted apart from the guard's role."""
    docs = list(yaml.safe_load_all((ROOT / "deploy/controller/maintenance-rbac.yaml")
                                   .read_text()))
    rules = {(g, r, v) for d in docs if d["kind"] == "ClusterRole" for rule in d["rules"]
             for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert ("", "pods/eviction", "create") in rules
    assert not any(v in ("delete", "deletecollection", "*") for _, _, v in rules)
    assert not any(r == "pods" and v in ("create", "update", "patch") for _, r, v in rules)
    assert not any("*" in g + r for g, r, _ in rules)
