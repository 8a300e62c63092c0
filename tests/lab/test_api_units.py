"""Pure pieces of the API server: patches, field selectors, Status responses, Table ages."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from drainsafe.lab.apiserver import fields
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.patch import json_patch, merge_patch, strategic_merge
from drainsafe.lab.apiserver.server import status_response
from drainsafe.lab.apiserver.table import _hpa_row, human_duration

SCALARS = hs.one_of(hs.integers(), hs.text(max_size=3), hs.booleans())
KEYS = hs.sampled_from(["a", "b", "c", "spec", "replicas"])
# maps of maps and scalars, no lists: strategic merge must equal RFC 7386 there
DOCS = hs.recursive(SCALARS, lambda inner: hs.dictionaries(KEYS, inner, max_size=4),
                    max_leaves=12)
PATCHES = hs.recursive(hs.one_of(SCALARS, hs.none()),
                       lambda inner: hs.dictionaries(KEYS, inner, max_size=4), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(doc=hs.dictionaries(KEYS, DOCS, max_size=4), patch=hs.dictionaries(KEYS, PATCHES,
                                                                           max_size=4))
def test_strategic_merge_without_lists_is_json_merge(doc: dict, patch: dict) -> None:
    assert strategic_merge(doc, patch) == merge_patch(doc, patch)


def test_strategic_merge_lists_by_key_and_directives() -> None:
    pod = {"spec": {"containers": [{"name": "a", "image": "1", "env": [{"name": "X",
                                                                         "value": "1"}]},
                                   {"name": "b", "image": "1"}],
                    "tolerations": [{"key": "t"}]}}
    out = strategic_merge(pod, {"spec": {
        "containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]},
                       {"name": "b", "$patch": "delete"}, {"name": "c", "image": "3"}],
        "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
        "tolerations": [{"key": "u"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["c", "a"]
    assert out["spec"]["containers"][1]["env"] == [{"name": "X", "value": "1"},
                                                   {"name": "Y", "value": "2"}]
    assert out["spec"]["tolerations"] == [{"key": "u"}]  # no merge key: replaced
    # uncordon as kubectl sends it
    assert strategic_merge({"spec": {"unschedulable": True}},
                           {"spec": {"unschedulable": None}}) == {"spec": {}}
    assert strategic_merge({"metadata": {"finalizers": ["a"]}},
                           {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"],
                                         "finalizers": ["b"]}}) == {
        "metadata": {"finalizers": ["b"]}}
    assert strategic_merge({"spec": {"x": {"a": 1, "b": 2}}},
                           {"spec": {"x": {"$patch": "replace", "c": 3}}}) == {
        "spec": {"x": {"c": 3}}}
    svc = strategic_merge({"spec": {"ports": [{"port": 80, "name": "http"}]}},
                          {"spec": {"ports": [{"port": 80, "targetPort": 8000}]}})
    assert svc["spec"]["ports"] == [{"port": 80, "name": "http", "targetPort": 8000}]


def test_json_patch_operations_and_errors() -> None:
    doc = {"a": [1, 2], "b": {"c": 1}}
    out = json_patch(doc, [{"op": "add", "path": "/a/-", "value": 3},
                           {"op": "move", "from": "/b/c", "path": "/d"},
                           {"op": "test", "path": "/d", "value": 1},
                           {"op": "replace", "path": "/a/0", "value": 0},
                           {"op": "copy", "from": "/a", "path": "/e"}])
    assert out == {"a": [0, 2, 3], "b": {}, "d": 1, "e": [0, 2, 3]}
    assert doc == {"a": [1, 2], "b": {"c": 1}}  # the input is untouched
    with pytest.raises(st.StatusError) as err:
        json_patch(doc, [{"op": "remove", "path": "/nope"}])
    assert err.value.code == 422
    with pytest.raises(st.StatusError):
        json_patch(doc, [{"op": "test", "path": "/a/0", "value": 9}])
    with pytest.raises(st.StatusError) as err:
        json_patch(doc, {"op": "add"})
    assert err.value.code == 400


def test_field_selectors() -> None:
    pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ml"},
                           "spec": {"nodeName": "n1", "hostNetwork": False},
                           "status": {"phase": "Running"}}
    assert fields.parse("spec.nodeName=n1,status.phase!=Succeeded").matches(pod)
    assert fields.parse("metadata.name==p,metadata.namespace=ml").matches(pod)
    assert not fields.parse("spec.nodeName=n2").matches(pod)
    assert fields.parse("spec.hostNetwork=false").matches(pod)
    assert fields.parse("spec.schedulerName=").matches(pod)  # absent reads as empty
    assert fields.parse("spec.nodeName=n1").value_of("spec.nodeName") == "n1"
    for bad in ("spec.nodeName", "=x"):
        with pytest.raises(st.StatusError) as err:
            fields.parse(bad)
        assert err.value.code == 400


def test_status_response_sets_retry_after_from_details() -> None:
    err = st.StatusError(429, "TooManyRequests", "slow down", retry_after=10)
    response = status_response(err)
    assert response.status_code == 429 and response.headers["retry-after"] == "10"
    assert json.loads(bytes(response.body)) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "slow down", "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": 10}, "code": 429}
    assert "retry-after" not in status_response(st.not_found("", "pods", "x")).headers


@pytest.mark.parametrize(("seconds", "text"), [(5, "5s"), (119, "119s"), (125, "2m5s"),
                                               (600, "10m"), (3 * 3600 + 60, "3h1m"),
                                               (30 * 3600, "30h"), (3 * 86400, "3d"),
                                               (10 * 86400, "10d")])
def test_ages_read_like_kubectl(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_hpa_targets_column_reads_each_metric_type_as_kubectl_prints_it() -> None:
    def metric(kind: str, source: dict) -> dict:
        return {"type": kind, {"Resource": "resource", "Pods": "pods",
                               "External": "external", "Object": "object"}[kind]: source}

    hpa = {"metadata": {"name": "llm", "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "llm"}, "maxReplicas": 8,
                    "metrics": [
                        metric("Resource", {"name": "memory",
                                            "target": {"type": "AverageValue",
                                                       "averageValue": "2Gi"}}),
                        metric("Pods", {"metric": {"name": "queue"},
                                        "target": {"type": "AverageValue",
                                                   "averageValue": "10"}}),
                        metric("External", {"metric": {"name": "lag"},
                                            "target": {"type": "Value", "value": "5"}})]},
           "status": {"currentReplicas": 3, "currentMetrics": [
               {"type": "Resource", "resource": {"name": "memory",
                                                 "current": {"averageValue": "1Gi"}}}]}}
    row = _hpa_row(hpa, now=0.0)
    assert row[:2] == ["llm", "Deployment/llm"]
    assert row[2] == "memory: 1Gi/2Gi, <unknown>/10 + 1 more..."  # two shown, then a count
    assert row[3:6] == ["<unset>", 8, 3]


def test_event_field_selectors_as_the_server_reads_them() -> None:
    # kubectl describe of a cluster-scoped object: involvedObject.namespace= (empty)
    event = {"involvedObject": {"kind": "NodeMaintenance", "name": "m", "uid": "u"},
             "reason": "NodeStarted", "source": {"component": "drainsafe-controller"},
             "reportingComponent": "drainsafe-controller", "type": "Normal"}
    assert fields.parse("involvedObject.kind=NodeMaintenance,involvedObject.name=m,"
                        "involvedObject.namespace=,involvedObject.uid=u", "events").matches(event)
    assert not fields.parse("involvedObject.namespace=default", "events").matches(event)
    # `source` is source.component (reportingComponent when that is empty), not a path
    assert fields.parse("source=drainsafe-controller", "events").matches(event)
    assert fields.parse("source=r", "events").matches({"reportingComponent": "r"})
    assert not fields.parse("source=x", "events").matches(event)
    # escaped commas and equals signs in a value (fields.EscapeValue)
    assert fields.parse(r"reason=a\,b\=c", "events").matches({"reason": "a,b=c"})
    assert fields.parse(r"metadata.name=x\\y").matches({"metadata": {"name": "x\\y"}})
    with pytest.raises(Exception, match="escape"):
        fields.parse(r"reason=a\qb", "events")
