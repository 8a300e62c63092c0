"""Server-side apply and field sets as pure functions (drainsafe.lab.apiserver.apply, .schema)."""

from __future__ import annotations

import json

import pytest

from drainsafe.lab.apiserver import apply, schema
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.status import StatusError

DEPLOYMENTS = BY_KEY["apps/deployments"]


def dep(containers: list[dict], **meta: object) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", **meta},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": containers}}}}


def test_fields_v1_round_trip_and_path_text() -> None:
    obj = dep([{"name": "c", "image": "x:1", "ports": [{"containerPort": 80}]}],
              labels={"app": "web"}, finalizers=["a/b"])
    paths = apply.fieldset(obj, "V1Deployment")
    tree = apply.to_fields_v1(paths)
    assert apply.from_fields_v1(tree) == paths
    item = tree["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"c"}']
    # a list-map key with a schema default counts with it (protocol TCP)
    assert item["f:ports"] == {'k:{"containerPort":80,"protocol":"TCP"}': {
        ".": {}, "f:containerPort": {}}}
    assert tree["f:metadata"]["f:finalizers"] == {'v:"a/b"': {}}
    assert tree["f:metadata"]["f:labels"] == {"f:app": {}}
    port = next(p for p in paths if p[-1] == "f:containerPort")
    assert apply.path_text(port) == (
        '.spec.template.spec.containers[name="c"].ports[containerPort=80,protocol="TCP"]'
        ".containerPort")


def test_apply_merges_lists_by_key_and_drops_what_it_no_longer_applies() -> None:
    first = apply.apply(DEPLOYMENTS, None, dep([
        {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
        {"name": "b", "image": "b:1"}]), "ci", force=False, now=0)
    live = json.loads(json.dumps(first))
    # someone else adds an env var to container a (an Update of its own)
    live["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "Y", "value": "2"})
    writer = apply.Writer("apps/deployments", "default", "web", "oncall")
    apply.record_update(DEPLOYMENTS, live, first, writer, now=1)
    again = apply.apply(DEPLOYMENTS, live, dep([{"name": "a", "image": "a:2"}]), "ci",
                        force=False, now=2)
    [a] = again["spec"]["template"]["spec"]["containers"]  # b is no longer applied: gone
    assert a["image"] == "a:2"
    assert a["env"] == [{"name": "Y", "value": "2"}]  # X dropped, oncall's Y kept


def test_conflicts_name_every_manager_and_field() -> None:
    live = apply.apply(DEPLOYMENTS, None, dep([{"name": "a", "image": "a:1"}]), "one",
                       force=False, now=0)
    with pytest.raises(StatusError) as err:
        apply.apply(DEPLOYMENTS, live, dep([{"name": "a", "image": "a:2"}],
                                           labels={"x": "y"}), "two", force=False, now=1)
    assert err.value.code == 409
    # an Apply manager is printed without an apiVersion (conflict.go printManager)
    assert err.value.message == (
        'Apply failed with 1 conflict: conflict with "one": '
        '.spec.template.spec.containers[name="a"].image')
    ok = apply.apply(DEPLOYMENTS, live, dep([{"name": "a", "image": "a:2"}]), "two",
                     force=True, now=1)
    owners = {e["manager"]: e["fieldsV1"] for e in ok["metadata"]["managedFields"]}
    assert "f:image" not in owners["one"]["f:spec"]["f:template"]["f:spec"]["f:containers"][
        'k:{"name":"a"}']


def test_unknown_fields_are_found_in_document_order() -> None:
    obj = dep([{"name": "c", "imagePullPolicyy": "x"}])
    obj["spec"]["foo"] = 1
    assert schema.unknown_fields(DEPLOYMENTS, obj) == [
        "spec.template.spec.containers[0].imagePullPolicyy", "spec.foo"]
    dropped = schema.drop_unknown_fields(DEPLOYMENTS, obj)
    assert len(dropped) == 2 and schema.unknown_fields(DEPLOYMENTS, obj) == []


def test_the_schema_file_is_what_the_installed_client_generates() -> None:
    kubernetes = pytest.importorskip("kubernetes")
    shipped = json.loads(schema.SCHEMA_FILE.read_text())
    if not shipped["source"].endswith(f" {kubernetes.__version__} models"):
        pytest.skip(f"schema.json comes from another client version: {shipped['source']}")
    assert schema.generate() == shipped


@pytest.mark.parametrize("change", [
    lambda d: d["spec"].update(replicas=3),
    lambda d: d["spec"]["template"]["spec"]["containers"].append({"name": "z", "image": "z"}),
    lambda d: d["spec"]["template"]["spec"]["containers"][0].update(image="x:2"),
    lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("env"),
    lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"][0].update(value="9"),
    lambda d: d["spec"]["template"]["spec"]["containers"].pop(0),
    lambda d: d["spec"]["selector"]["matchLabels"].update(x="y"),
    lambda d: d["metadata"].update(finalizers=["a/b", "c/d"]),
])
def test_the_one_pass_diff_agrees_with_comparing_field_sets(change: object) -> None:
    old = dep([{"name": "c", "image": "x:1", "env": [{"name": "A", "value": "1"}]}],
              finalizers=["a/b"])
    new = json.loads(json.dumps(old))
    change(new)  # type: ignore[operator]
    touched, gone = apply.diff(old, new, "V1Deployment")
    new_set, old_set = apply.fieldset(new, "V1Deployment"), apply.fieldset(old, "V1Deployment")
    assert touched == apply.changed(old, new, new_set)
    assert gone == old_set - new_set
    assert touched or gone
