"""Structural schemas (pruning, defaulting, validation wording), printer-column JSONPath,
CRD naming: pure functions of drainsafe.lab.apiserver.crdschema and crd, against the
messages and rules of k8s.io/apiextensions-apiserver v0.33 and kube-openapi."""

from __future__ import annotations

from typing import Any

from drainsafe.lab.apiserver import crd, crdschema

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object", "required": ["size"],
            "properties": {
                "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
                "size": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                "mode": {"type": "string", "enum": ["Fast", "Safe"], "default": "Safe"},
                "port": {"x-kubernetes-int-or-string": True},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "items": {"type": "array", "maxItems": 2, "items": {
                    "type": "object", "properties": {"name": {"type": "string"}}}},
                "note": {"type": "string"},
                "at": {"type": "string", "format": "date-time"},
                "addr": {"type": "string", "format": "ipv4"},
                "tags": {"type": "array", "x-kubernetes-list-type": "set",
                         "items": {"type": "string"}},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "properties": {
                              "name": {"type": "string"}, "port": {"type": "integer"}}}},
            }},
        "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
    },
}


def widget(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.io/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"}, "spec": spec}


def test_prune_removes_unknown_fields_and_keeps_what_the_schema_allows() -> None:
    obj = widget(size="s", colour="red", extra={"anything": {"goes": 1}},
                 labels={"a": "b"}, items=[{"name": "x", "bogus": 1}])
    obj["junk"] = 1
    gone = crdschema.prune(obj, SCHEMA)
    assert gone == ["spec.colour", "spec.items[0].bogus", "junk"]
    assert obj["spec"]["extra"] == {"anything": {"goes": 1}}
    assert obj["spec"]["labels"] == {"a": "b"}
    assert obj["metadata"] == {"name": "w", "namespace": "default"}


def test_defaults_fill_absent_and_non_nullable_null_fields() -> None:
    obj = widget(size="s", mode=None, note=None)
    crdschema.default(obj, SCHEMA)
    crdschema.prune_nulls(obj, SCHEMA)
    assert obj["spec"] == {"size": "s", "mode": "Safe", "replicas": 1}


def messages(obj: dict[str, Any]) -> list[str]:
    return [str(e) for e in crdschema.validate(obj, SCHEMA)]


def test_validation_words_errors_as_the_api_server() -> None:
    assert messages(widget(size="s", replicas="3")) == [
        'spec.replicas: Invalid value: "string": spec.replicas in body must be of type '
        'integer: "string"']
    assert messages(widget(size="s", replicas=11)) == [
        "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or "
        "equal to 10"]
    assert messages(widget(size="s", replicas=-1)) == [
        "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or "
        "equal to 0"]
    assert messages(widget(size="s", mode="Slow")) == [
        'spec.mode: Unsupported value: "Slow": supported values: "Fast", "Safe"']
    assert messages(widget(size="Big")) == [
        "spec.size: Invalid value: \"Big\": spec.size in body should match '^[a-z]+$'"]
    assert messages(widget(size="abcdefghi")) == [
        "spec.size: Too long: may not be more than 8 bytes"]
    assert messages(widget()) == ["spec.size: Required value"]
    assert messages(widget(size="s", port=True)) == [
        'spec.port: Invalid value: "boolean": spec.port in body must be of type '
        'integer,string: "boolean"']
    assert messages(widget(size="s", port="http")) == messages(widget(size="s", port=80)) == []
    assert messages(widget(size="s", items=[{}, {}, {}])) == [
        "spec.items: Too many: 3: must have at most 2 items"]
    assert messages(widget(size="s", replicas=2.0)) == []  # an integral number is an integer
    assert messages(widget(size="s", tags=["a", "b", "a", "a"])) == [
        'spec.tags[2]: Duplicate value: "a"']
    assert messages(widget(size="s", ports=[{"name": "http", "port": 80},
                                            {"name": "http", "port": 81}, {"port": 1}])) == [
        'spec.ports[1]: Duplicate value: map[string]interface {}{"name":"http"}']


def test_printer_column_paths() -> None:
    obj = {"metadata": {"name": "w", "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"replicas": 3, "tags": ["a", "b"]},
           "status": {"conditions": [{"type": "Ready", "status": "True"},
                                     {"type": "Done", "status": "False"}]}}
    assert crd.find(obj, ".spec.replicas") == [3]
    assert crd.find(obj, ".spec.tags[1]") == ["b"]
    assert crd.find(obj, '.status.conditions[?(@.type=="Done")].status') == ["False"]
    assert crd.find(obj, ".status.missing") == []
    now = 1767225600.0 + 125  # 2026-01-01T00:02:05Z
    assert crd.cell({"type": "date", "jsonPath": ".metadata.creationTimestamp"}, obj,
                    now) == "2m5s"
    assert crd.cell({"type": "integer", "jsonPath": ".spec.replicas"}, obj, now) == 3
    assert crd.cell({"type": "string", "jsonPath": ".spec.replicas"}, obj, now) == "3"
    assert crd.cell({"type": "boolean", "jsonPath": ".spec.replicas"}, obj, now) is None


def _crd(name: str, kind: str, short: list[str] | None = None) -> dict[str, Any]:
    plural = name.split(".")[0]
    return {"metadata": {"name": name}, "spec": {
        "group": "example.io", "names": {"plural": plural, "singular": plural[:-1],
                                        "kind": kind, "listKind": f"{kind}List",
                                        "shortNames": short or []}}}


def test_naming_controller_refuses_names_another_crd_of_the_group_holds() -> None:
    first = _crd("widgets.example.io", "Widget", ["wd"])
    names, accepted, established = crd.names_and_conditions(first, [first], "t0")
    assert accepted["status"] == "True" and accepted["reason"] == "NoConflicts"
    assert established["reason"] == "Installing" and established["status"] == "False"
    first["status"] = {"acceptedNames": names}
    clash = _crd("gizmos.example.io", "Widget")
    _, accepted, established = crd.names_and_conditions(clash, [first, clash], "t0")
    # Kind and listKind both clash; the last check's reason stands, as upstream.
    assert (accepted["status"], accepted["reason"], accepted["message"]) == (
        "False", "ListKindConflict", '"WidgetList" is already in use')
    assert (established["status"], established["reason"]) == ("False", "NotAccepted")
    short = _crd("gadgets.example.io", "Gadget", ["wd"])
    _, accepted, _ = crd.names_and_conditions(short, [first, short], "t0")
    assert (accepted["reason"], accepted["message"]) == ("ShortNamesConflict",
                                                        '"wd" is already in use')


def test_crd_validation() -> None:
    bad = _crd("widgets.example.io", "Widget")
    bad["spec"].update(group="example", scope="Global", versions=[
        {"name": "v1", "served": True, "storage": False}])
    msgs = [str(e) for e in crd.validate_crd(bad, None)]
    assert msgs == [
        'metadata.name: Invalid value: "widgets.example.io": must be '
        'spec.names.plural+"."+spec.group',
        'spec.group: Invalid value: "example": should be a domain with at least one dot',
        'spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"',
        "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required",
        "spec.versions: Invalid value: []apiextensions.CustomResourceDefinitionVersion{...}: "
        "must have exactly one version marked as storage version"]


def test_ratcheting_forgives_only_what_an_update_left_unchanged() -> None:
    old = widget(size="s", replicas=20, mode="Slow")  # valid under an older, looser schema
    new = widget(size="s", replicas=20, mode="Fast", note="x")
    assert [str(e) for e in crdschema.ratchet(crdschema.validate(new, SCHEMA), new, old)] == []
    new = widget(size="s", replicas=30, mode="Slow")
    assert [str(e) for e in crdschema.ratchet(crdschema.validate(new, SCHEMA), new, old)] == [
        "spec.replicas: Invalid value: 30: spec.replicas in body should be less than or "
        "equal to 10"]
    old, new = widget(), widget(note="x")  # neither has the required size
    assert [str(e) for e in crdschema.ratchet(crdschema.validate(new, SCHEMA), new, old)] == [
        "spec.size: Required value"]  # spec changed: the missing field counts again


def test_string_formats_the_api_server_checks() -> None:
    for good in ("2026-12-05T09:00:00Z", "2026-12-05t09:00:00.123+01:00"):
        assert messages(widget(size="s", at=good)) == [], good
    assert messages(widget(size="s", at="2026-12-05 09:00")) == [
        'spec.at: Invalid value: "2026-12-05 09:00": spec.at in body must be of type '
        'date-time: "2026-12-05 09:00"']
    assert messages(widget(size="s", at="2026-13-05T09:00:00Z")) != []
    assert messages(widget(size="s", addr="10.0.0.1")) == []
    assert messages(widget(size="s", addr="10.0.0")) == [
        'spec.addr: Invalid value: "10.0.0": spec.addr in body must be of type ipv4: '
        '"10.0.0"']
