"""Nulls in PATCH bodies: they delete keys and are never stored.

Upstream: kubernetes/apimachinery pkg/util/strategicpatch/patch.go (mergeMap,
discardNullValuesFromPatch), evanphx/json-patch merge.go (pruneNulls), and the typed
decode in apiserver pkg/endpoints/handlers/patch.go, after which a null field is unset.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from drainsafe.lab.apiserver.patch import merge_patch, strategic_merge
from drainsafe.lab.controlplane import ControlPlane


def nulls_in(value: Any, path: str = "") -> list[str]:
    """Paths of every null stored as a map value, at any depth."""
    found: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            found += [f"{path}.{k}"] if v is None else nulls_in(v, f"{path}.{k}")
    elif isinstance(value, list):
        for n, v in enumerate(value):
            found += nulls_in(v, f"{path}[{n}]")
    return found


def running_pod() -> dict[str, Any]:
    return {"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "Ready", "status": "False",
                                "reason": "ContainersNotReady"}],
                "containerStatuses": [{"name": "c", "ready": False, "restartCount": 0,
                                       "state": {"waiting": {"reason": "ContainerCreating"}}}],
            }}


# What a kubelet sends on a status sync: the new containerStatuses (an atomic list in
# core/v1, so replaced whole) with explicit nulls for state kinds that are over, a new
# condition carrying a null, a cleared reason on an existing condition, a new podIPs item.
KUBELET_STATUS_PATCH: dict[str, Any] = {"status": {
    "phase": "Running",
    "podIP": "127.10.0.2",
    "podIPs": [{"ip": "127.10.0.2", "unused": None}],
    "conditions": [{"type": "Ready", "status": "True", "reason": None},
                   {"type": "ContainersReady", "status": "True", "reason": None,
                    "message": None}],
    "containerStatuses": [{"name": "c", "ready": True, "started": True, "restartCount": 0,
                           "state": {"waiting": None, "terminated": None,
                                     "running": {"startedAt": "2026-12-02T18:00:00Z"}},
                           "lastState": {"terminated": None}}],
}}


def test_kubelet_status_patch_stores_no_nulls() -> None:
    out = strategic_merge(running_pod(), KUBELET_STATUS_PATCH)
    assert nulls_in(out) == []
    status = out["status"]
    assert status["containerStatuses"] == [{
        "name": "c", "ready": True, "started": True, "restartCount": 0,
        "state": {"running": {"startedAt": "2026-12-02T18:00:00Z"}}, "lastState": {}}]
    # existing merge-list item: the null deletes the stored reason
    assert status["conditions"] == [{"type": "Ready", "status": "True"},
                                    {"type": "ContainersReady", "status": "True"}]
    assert status["podIPs"] == [{"ip": "127.10.0.2"}]


def test_strategic_merge_new_items_maps_and_replacements_drop_nulls() -> None:
    pod = running_pod()
    out = strategic_merge(pod, {"spec": {
        # merge list: "c" exists (a null deletes its image), "d" is new (nulls dropped,
        # also in its own merge list and in a nested map)
        "containers": [{"name": "c", "image": None},
                       {"name": "d", "image": None, "command": ["sleep"],
                        "env": [{"name": "X", "value": "1", "valueFrom": None}],
                        "resources": {"limits": None, "requests": {"cpu": "1"}}}],
        # key the object lacks: a new map
        "securityContext": {"runAsUser": None, "sysctls": [{"name": "a", "value": None}]},
        # list without a merge key: replaced whole
        "tolerations": [{"key": "k", "operator": "Exists", "effect": None}],
        # $patch: replace on a map
        "nodeSelector": {"$patch": "replace", "a": "1", "b": None},
    }})
    assert nulls_in(out) == []
    spec = out["spec"]
    assert spec["containers"] == [
        {"name": "c"},
        {"name": "d", "command": ["sleep"], "env": [{"name": "X", "value": "1"}],
         "resources": {"requests": {"cpu": "1"}}}]
    assert spec["securityContext"] == {"sysctls": [{"name": "a"}]}
    assert spec["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert spec["nodeSelector"] == {"a": "1"}
    assert pod == running_pod()  # the input is untouched


def test_json_merge_patch_nulls_remove_keys_also_in_new_objects() -> None:
    doc = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 2}}
    out = merge_patch(doc, {
        "metadata": {"labels": {"a": None, "c": None}},       # delete; absent: no-op
        "spec": {"template": {"x": None, "y": {"z": None, "w": 1}}},  # new object
        "status": {"conditions": [{"type": "A", "reason": None}]},    # new list
    })
    assert out == {"metadata": {"labels": {"b": "2"}},
                   "spec": {"replicas": 2, "template": {"y": {"w": 1}}},
                   "status": {"conditions": [{"type": "A"}]}}
    # RFC 7386 appendix A: a null inside a new object is not stored
    assert merge_patch({}, {"a": {"bb": {"ccc": None}}}) == {"a": {"bb": {}}}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}  # not ours to clean


SCALARS = hs.one_of(hs.integers(), hs.text(max_size=2), hs.booleans())
KEYS = hs.sampled_from(["name", "a", "b", "containers", "conditions", "state"])
STORED = hs.recursive(
    SCALARS, lambda inner: hs.one_of(hs.lists(inner, max_size=3),
                                     hs.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=10)
PATCH = hs.recursive(
    hs.one_of(SCALARS, hs.none()),
    lambda inner: hs.one_of(
        hs.lists(inner, max_size=3),
        hs.dictionaries(KEYS, inner, max_size=3),
        # items of merge lists ("containers" by name, "conditions" by type)
        hs.lists(hs.fixed_dictionaries({"name": hs.sampled_from(["x", "y"])},
                                       optional={"a": inner, "b": inner}), max_size=3)),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(doc=hs.dictionaries(KEYS, STORED, max_size=4),
       patch=hs.dictionaries(KEYS, PATCH, max_size=4))
def test_patched_objects_never_hold_nulls(doc: dict[str, Any], patch: dict[str, Any]) -> None:
    assert nulls_in(strategic_merge(doc, patch)) == []
    assert nulls_in(merge_patch(doc, patch)) == []


# ---- through the API server: the crash kubectl get pods once hit --------------------

@pytest.fixture
async def api(control_plane: ControlPlane) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
            base_url=control_plane.url, timeout=10,
            verify=ssl.create_default_context(cafile=control_plane.ca_path),
            headers={"Authorization": f"Bearer {control_plane.token}"}) as c:
        yield c


async def test_status_patch_with_nulls_then_pods_as_table(api: httpx.AsyncClient) -> None:
    base = "/api/v1/namespaces/default/pods"
    pod = running_pod()
    del pod["status"]
    pod["spec"]["nodeName"] = "n1"
    assert (await api.post(base, json=pod)).status_code == 201
    smp = {"Content-Type": "application/strategic-merge-patch+json"}
    first = {"status": {"phase": "Pending", "containerStatuses": [
        {"name": "c", "ready": False, "restartCount": 0,
         "state": {"waiting": {"reason": "ContainerCreating"}}}]}}
    assert (await api.patch(f"{base}/p/status", json=first, headers=smp)).status_code == 200
    r = await api.patch(f"{base}/p/status", json=KUBELET_STATUS_PATCH, headers=smp)
    assert r.status_code == 200, r.text
    assert nulls_in(r.json()) == []
    assert r.json()["status"]["containerStatuses"][0]["state"] == {
        "running": {"startedAt": "2026-12-02T18:00:00Z"}}
    merge = {"Content-Type": "application/merge-patch+json"}
    r = await api.patch(f"{base}/p", headers=merge, json={
        "metadata": {"annotations": {"a": "1", "b": None}},
        "spec": {"tolerations": [{"key": "k", "operator": "Exists", "value": None}]}})
    assert r.status_code == 200, r.text
    assert nulls_in(r.json()) == []
    table = await api.get(base, headers={
        "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
    assert table.status_code == 200, table.text
    row = table.json()["rows"][0]["cells"]
    assert row[0] == "p" and row[1] == "1/1" and row[2] == "Running"
