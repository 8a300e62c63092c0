"""deploy/rbac.yaml grants exactly the API calls the drain code makes (read from the code)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from drainsafe.drain.ownership import GUARDED_KINDS, SURGE_KINDS

ROOT = Path(__file__).resolve().parents[2]


def granted() -> set[tuple[str, str, str]]:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()))
    [role] = [d for d in docs if d["kind"] == "ClusterRole"]
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}


def test_no_delete_and_no_wildcards() -> None:
    rules = granted()
    assert not any(v in ("delete", "deletecollection", "*", "update") for _, _, v in rules)
    assert not any("*" in (g + r) for g, r, _ in rules)
    assert ("", "pods/eviction", "create") in rules


def test_every_path_the_drain_code_builds_is_granted() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "src/drainsafe/drain").glob("*.py"))
    used = set(re.findall(r'api_path\(\s*"([^"]+)",\s*"([a-z]+)"', source))
    assert used, "no api_path calls found"
    # read_cluster lists the apps/v1 controllers in a loop over (plural, Kind) pairs.
    used |= {("apps/v1", p) for p in re.findall(r'\("([a-z]+)", "[A-Z][A-Za-z]+"\)', source)}
    # The surge engine writes the workloads of the surgeable kinds (drain.scale), a custom
    # resource's scale through its scale subresource.
    used |= {(k.api_version, k.plural) for k in SURGE_KINDS.values()}
    rules = granted()
    for group_version, plural in used:
        group = "" if group_version == "v1" else group_version.split("/")[0]
        assert any(g == group and r == plural for g, r, _ in rules), (group, plural)
    # Every granted resource is used by the code (no spare grants).
    for group, resource, verb in rules:
        if resource.endswith("/scale"):  # the scale subresource of a surgeable kind
            assert any(k.scale_subresource and k.plural == resource.split("/")[0]
                       and k.api_version.split("/")[0] == group
                       for k in SURGE_KINDS.values()) and verb == "patch", resource
        base = resource.split("/")[0]
        assert any(p == base for _, p in used), resource


def test_every_resource_the_drain_watches_may_be_listed_and_watched() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "src/drainsafe/drain").glob("*.py"))
    watched = set(re.findall(r'Informer\(\s*client,\s*api_path\(\s*"([^"]+)",\s*"([a-z]+)"',
                             source))
    # The guard-surge wait watches the kinds the guard surges (drain.nodewatch,
    # drain.preflight).
    assert re.search(r"Informer\((self\._)?client, api_path\(\s*surge\.api_version, "
                     r"surge\.plural", source)
    watched |= {(k.api_version, k.plural) for k in GUARDED_KINDS.values()}
    rules = granted()
    for group_version, plural in watched:
        group = "" if group_version == "v1" else group_version.split("/")[0]
        for verb in ("list", "watch"):
            assert (group, plural, verb) in rules, (group, plural, verb)
