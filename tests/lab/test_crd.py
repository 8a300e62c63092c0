"""CustomResourceDefinitions served by the lab, driven by the real kubectl (1.27, 1.33) and
the official Kubernetes Python client (ApiextensionsV1Api, CustomObjectsApi).

A tiny `widgets.example.io` (namespaced, scale and status subresources, printer columns,
defaults, validation) and a cluster-scoped `racks.example.io`: discovery and OpenAPI once
Established, create/get/list/watch/update/patch/delete/deletecollection, pruning,
422s naming the field, the status and scale subresources, `kubectl explain`, the 415 for
strategic merge patches, a CRD whose names clash (never served), and deleting a CRD."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import pytest
import yaml

from conftest import Kubectl, wait_until
from drainsafe.lab.apiserver.crd import CRDS, ESTABLISHED, is_true
from drainsafe.lab.cluster import Lab
from drainsafe.lab.controlplane import ControlPlane

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, watch  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

T = TypeVar("T")

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.io"},
    "spec": {
        "group": "example.io", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                  "shortNames": ["wd"], "categories": ["gadgets"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}, "scale": {
                "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector"}},
            "additionalPrinterColumns": [
                {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
                {"name": "Mode", "type": "string", "jsonPath": ".spec.mode", "priority": 1},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
            "schema": {"openAPIV3Schema": {
                "type": "object", "description": "A Widget is a tiny scalable thing.",
                "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "replicas": {"type": "integer", "minimum": 0, "maximum": 10,
                                     "default": 1,
                                     "description": "How many widgets to run."},
                        "size": {"type": "string", "pattern": "^[a-z]+$"},
                        "mode": {"type": "string", "enum": ["Fast", "Safe"],
                                 "default": "Safe"},
                        "port": {"x-kubernetes-int-or-string": True},
                        "extra": {"type": "object",
                                  "x-kubernetes-preserve-unknown-fields": True}}},
                    "status": {"type": "object", "properties": {
                        "replicas": {"type": "integer"},
                        "readyReplicas": {"type": "integer"},
                        "selector": {"type": "string"}}}}}},
        }],
    },
}

RACK_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "racks.example.io"},
    "spec": {
        "group": "example.io", "scope": "Cluster",
        "names": {"plural": "racks", "singular": "rack", "kind": "Rack"},
        "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {
                          "type": "object", "properties": {"spec": {
                              "type": "object", "properties": {
                                  "slots": {"type": "integer", "default": 4}}}}}}}],
    },
}


def widget(name: str = "w", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.io/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"size": "small", **spec}}


async def established(cp: ControlPlane, name: str) -> None:
    await wait_until(cp, lambda: (crd := cp.store.peek(CRDS, "", name)) is not None
                     and is_true(crd, ESTABLISHED), what=f"{name} Established")


# ---- kubectl --------------------------------------------------------------------------

async def test_kubectl_serves_a_custom_resource(control_plane: ControlPlane,
                                                kubectl: Kubectl) -> None:
    out = await kubectl.ok("apply", "-f", "-", stdin=yaml.safe_dump(WIDGET_CRD))
    assert "customresourcedefinition.apiextensions.k8s.io/widgets.example.io created" in out
    await kubectl.ok("wait", "--for=condition=Established", "crd/widgets.example.io",
                     "--timeout=30s")
    crd = json.loads(await kubectl.ok("get", "crd", "widgets.example.io", "-o", "json"))
    conditions = {c["type"]: (c["status"], c["reason"]) for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": ("True", "NoConflicts"),
                          "Established": ("True", "InitialNamesAccepted")}
    assert crd["status"]["acceptedNames"]["shortNames"] == ["wd"]
    assert crd["status"]["storedVersions"] == ["v1"]

    crds = (await kubectl.ok("get", "crds")).splitlines()
    assert crds[0].split() == ["NAME", "CREATED", "AT"]
    assert crds[1].split()[0] == "widgets.example.io" and crds[1].split()[1].endswith("Z")

    resources = await kubectl.ok("api-resources", "--api-group=example.io")
    assert "widgets" in resources and "wd" in resources and "Widget" in resources

    out = await kubectl.ok("apply", "-f", "-", stdin=yaml.safe_dump(widget(replicas=2)))
    assert "widget.example.io/w created" in out
    table = (await kubectl.ok("get", "widgets")).splitlines()
    assert table[0].split() == ["NAME", "DESIRED", "READY", "AGE"]
    row = table[1].split()
    assert row[:2] == ["w", "2"] and len(row) == 3  # no status yet: READY is blank
    wide = (await kubectl.ok("get", "wd", "-o", "wide")).splitlines()
    assert wide[0].split() == ["NAME", "DESIRED", "READY", "MODE", "AGE"]
    assert wide[1].split()[:3] == ["w", "2", "Safe"]  # defaulted (READY is blank)
    assert "w" in await kubectl.ok("get", "gadgets")  # the category
    got = yaml.safe_load(await kubectl.ok("get", "widget", "w", "-o", "yaml"))
    assert got["spec"] == {"size": "small", "replicas": 2, "mode": "Safe"}
    assert got["metadata"]["generation"] == 1
    out = await kubectl.ok("apply", "-f", "-",
                           stdin=yaml.safe_dump(widget(replicas=2, mode="Fast")))
    assert "widget.example.io/w configured" in out
    got = yaml.safe_load(await kubectl.ok("get", "widget", "w", "-o", "yaml"))
    assert got["spec"]["mode"] == "Fast" and got["metadata"]["generation"] == 2

    described = await kubectl.ok("describe", "widget", "w")
    assert "Kind:         Widget" in described and "Size:      small" in described

    explained = await kubectl.ok("explain", "widgets.spec.replicas")
    assert "How many widgets to run." in explained and "integer" in explained

    out = await kubectl.ok("scale", "widget", "w", "--replicas=3")
    assert "widget.example.io/w scaled" in out
    await kubectl.ok("patch", "widget", "w", "--subresource=status", "--type=merge", "-p",
                     json.dumps({"status": {"replicas": 3, "readyReplicas": 3,
                                            "selector": "app=w"}}))
    got = json.loads(await kubectl.ok("get", "widget", "w", "-o", "json"))
    assert got["spec"]["replicas"] == 3 and got["status"]["readyReplicas"] == 3
    assert got["metadata"]["generation"] == 3  # the scale, not the status write
    scale = json.loads(await kubectl.ok(
        "get", "--raw", "/apis/example.io/v1/namespaces/default/widgets/w/scale"))
    assert scale["spec"] == {"replicas": 3}
    assert scale["status"] == {"replicas": 3, "selector": "app=w"}
    assert (await kubectl.ok("get", "widgets")).splitlines()[1].split()[:3] == ["w", "3", "3"]

    # A status written through the main resource is ignored (status subresource).
    await kubectl.ok("patch", "widget", "w", "--type=merge", "-p",
                     json.dumps({"status": {"readyReplicas": 0}}))
    got = json.loads(await kubectl.ok("get", "widget", "w", "-o", "json"))
    assert got["status"]["readyReplicas"] == 3

    # Strategic merge patch (kubectl patch's default) is refused: 415.
    result = await kubectl("patch", "widget", "w", "-p", '{"spec":{"replicas":1}}')
    assert result.returncode != 0
    assert "the body of the request was in an unknown format - accepted media types " \
           "include: application/json-patch+json, application/merge-patch+json, " \
           "application/apply-patch+yaml" in result.stderr

    # 422 naming the field, as the API server words it.
    result = await kubectl("apply", "-f", "-",
                           stdin=yaml.safe_dump(widget("bad", replicas=20, mode="Slow")))
    assert result.returncode != 0
    assert 'The Widget "bad" is invalid: ' in result.stderr
    assert "spec.replicas: Invalid value: 20: spec.replicas in body should be less than or " \
           "equal to 10" in result.stderr
    assert 'spec.mode: Unsupported value: "Slow": supported values: "Fast", "Safe"' \
        in result.stderr
    # kubectl asks for strict field validation: an unknown field is refused ...
    result = await kubectl("apply", "-f", "-", stdin=yaml.safe_dump(widget("u", colour="red")))
    assert result.returncode != 0 and 'unknown field "spec.colour"' in result.stderr
    result = await kubectl("apply", "-f", "-", stdin=yaml.safe_dump(
        {**widget("u"), "metadata": {"name": "u", "lables": {"a": "b"}}}))
    assert result.returncode != 0 and 'unknown field "metadata.lables"' in result.stderr
    # ... and pruned without it.
    await kubectl.ok("create", "--validate=false", "-f", "-",
                     stdin=yaml.safe_dump(widget("u", colour="red")))
    got = json.loads(await kubectl.ok("get", "widget", "u", "-o", "json"))
    assert "colour" not in got["spec"]

    # Watch: kubectl get -w prints the change.
    watcher = await asyncio.create_subprocess_exec(
        str(kubectl.binary), f"--kubeconfig={kubectl.kubeconfig}",
        f"--cache-dir={kubectl.cache_dir}", "get", "widgets", "-w",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": str(kubectl.kubeconfig)})
    try:
        assert watcher.stdout is not None
        first = await asyncio.wait_for(watcher.stdout.readline(), 30)
        assert first.split()[0] == b"NAME"
        await kubectl.ok("scale", "widget", "w", "--replicas=5")
        seen = b""
        while b"5" not in seen.split()[1:2]:
            seen = await asyncio.wait_for(watcher.stdout.readline(), 30)
            assert seen, "kubectl get -w ended"
        assert seen.split()[0] == b"w"
    finally:
        watcher.kill()
        await watcher.wait()

    # Deleting the CRD deletes its resources and stops serving them.
    await kubectl.ok("delete", "crd", "widgets.example.io")
    result = await kubectl("get", "widgets")
    assert result.returncode != 0
    # (kubectl's discovery cache still knows the kind, so the server answers the list)
    assert "the server could not find the requested resource" in result.stderr
    assert control_plane.store.catalog.by_key("example.io/widgets") is None


# ---- the official client --------------------------------------------------------------

class Clients:
    def __init__(self, cp: ControlPlane) -> None:
        cfg = client.Configuration(host=cp.url)
        cfg.ssl_ca_cert = str(cp.ca_path)
        cfg.api_key = {"BearerToken": f"Bearer {cp.token}"}
        self.api = client.ApiClient(cfg)
        self.ext = client.ApiextensionsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    async def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)


@pytest.fixture
async def k8s(control_plane: ControlPlane) -> AsyncIterator[Clients]:
    clients = Clients(control_plane)
    try:
        yield clients
    finally:
        clients.api.close()


async def test_official_client_custom_objects(control_plane: ControlPlane,
                                              k8s: Clients) -> None:
    created = await k8s(k8s.ext.create_custom_resource_definition, WIDGET_CRD)
    assert created.spec.names.list_kind == "WidgetList"  # defaulted, read into the model
    await k8s(k8s.ext.create_custom_resource_definition, RACK_CRD)
    await established(control_plane, "widgets.example.io")
    await established(control_plane, "racks.example.io")
    read = await k8s(k8s.ext.read_custom_resource_definition, "widgets.example.io")
    assert {c.type for c in read.status.conditions} == {"NamesAccepted", "Established"}
    listed = await k8s(k8s.ext.list_custom_resource_definition)
    assert sorted(c.metadata.name for c in listed.items) == ["racks.example.io",
                                                           "widgets.example.io"]

    args = ("example.io", "v1", "default", "widgets")
    w = await k8s(k8s.custom.create_namespaced_custom_object, *args,
                  widget("a", status={"replicas": 9}, colour="red"))
    assert w["spec"] == {"size": "small", "replicas": 1, "mode": "Safe"}  # pruned, defaulted
    assert "status" not in w and w["metadata"]["generation"] == 1
    await k8s(k8s.custom.create_namespaced_custom_object, *args, widget("b", port="http"))

    with pytest.raises(ApiException) as err:
        await k8s(k8s.custom.create_namespaced_custom_object, *args,
                  widget("c", size=5, replicas="two"))
    assert err.value.status == 422
    body = json.loads(err.value.body)
    body["details"]["causes"].sort(key=lambda c: c["field"])  # upstream: Go map order
    assert body["details"] == {"name": "c", "group": "example.io", "kind": "Widget", "causes": [
        {"reason": "FieldValueTypeInvalid", "field": "spec.replicas",
         "message": 'Invalid value: "string": spec.replicas in body must be of type integer: '
                    '"string"'},
        {"reason": "FieldValueTypeInvalid", "field": "spec.size",
         "message": 'Invalid value: "integer": spec.size in body must be of type string: '
                    '"integer"'}]}
    with pytest.raises(ApiException) as err:
        await k8s(k8s.custom.create_namespaced_custom_object, *args,
                  {**widget("d"), "spec": {}})
    assert err.value.status == 422
    assert json.loads(err.value.body)["message"] == \
        'Widget.example.io "d" is invalid: spec.size: Required value'

    got = await k8s(k8s.custom.get_namespaced_custom_object, *args, "a")
    assert got["metadata"]["uid"] == w["metadata"]["uid"]
    items = (await k8s(k8s.custom.list_namespaced_custom_object, *args))["items"]
    assert [i["metadata"]["name"] for i in items] == ["a", "b"]
    assert (await k8s(k8s.custom.list_cluster_custom_object, "example.io", "v1",
                      "widgets"))["items"][0]["metadata"]["name"] == "a"

    # Watch from the list's resourceVersion sees the next change.
    rv = (await k8s(k8s.custom.list_namespaced_custom_object, *args))["metadata"][
        "resourceVersion"]
    events: list[tuple[str, int]] = []

    def follow() -> None:
        w = watch.Watch()
        for ev in w.stream(k8s.custom.list_namespaced_custom_object, *args,
                           resource_version=rv, timeout_seconds=20):
            events.append((ev["type"], ev["object"]["spec"]["replicas"]))
            w.stop()

    follower = asyncio.create_task(asyncio.to_thread(follow))
    patched = await k8s(k8s.custom.patch_namespaced_custom_object, *args, "a",
                        {"spec": {"replicas": 4}})
    assert patched["metadata"]["generation"] == 2
    await asyncio.wait_for(follower, 30)
    assert events == [("MODIFIED", 4)]

    status = await k8s(k8s.custom.patch_namespaced_custom_object_status, *args, "a",
                       {"status": {"replicas": 4, "readyReplicas": 2, "selector": "app=a"}})
    assert status["metadata"]["generation"] == 2 and status["status"]["readyReplicas"] == 2
    scale = await k8s(k8s.custom.get_namespaced_custom_object_scale, *args, "a")
    assert scale["spec"]["replicas"] == 4 and scale["status"]["selector"] == "app=a"
    scale = await k8s(k8s.custom.patch_namespaced_custom_object_scale, *args, "a",
                      {"spec": {"replicas": 6}})
    assert scale["spec"]["replicas"] == 6
    with pytest.raises(ApiException) as err:
        await k8s(k8s.custom.patch_namespaced_custom_object_scale, *args, "a",
                  {"spec": {"replicas": -1}})
    assert err.value.status == 422

    current = await k8s(k8s.custom.get_namespaced_custom_object, *args, "a")
    current["spec"]["mode"] = "Fast"
    replaced = await k8s(k8s.custom.replace_namespaced_custom_object, *args, "a", current)
    assert replaced["spec"]["mode"] == "Fast" and replaced["metadata"]["generation"] == 4
    with pytest.raises(ApiException) as err:  # stale resourceVersion
        await k8s(k8s.custom.replace_namespaced_custom_object, *args, "a", current)
    assert err.value.status == 409

    # Cluster-scoped.
    rack = await k8s(k8s.custom.create_cluster_custom_object, "example.io", "v1alpha1",
                     "racks", {"apiVersion": "example.io/v1alpha1", "kind": "Rack",
                               "metadata": {"name": "r1"}, "spec": {}})
    assert rack["spec"] == {"slots": 4} and "namespace" not in rack["metadata"]

    await k8s(k8s.custom.delete_namespaced_custom_object, *args, "b")
    await k8s(k8s.custom.delete_collection_namespaced_custom_object, *args)
    assert (await k8s(k8s.custom.list_namespaced_custom_object, *args))["items"] == []

    # Deleting the CRD deletes what it served: a watcher sees DELETED, then its watch ends.
    seen: list[str] = []
    listed_racks = await k8s(k8s.custom.list_cluster_custom_object, "example.io", "v1alpha1",
                             "racks")

    def follow_racks() -> None:
        for ev in watch.Watch().stream(
                k8s.custom.list_cluster_custom_object, "example.io", "v1alpha1", "racks",
                resource_version=listed_racks["metadata"]["resourceVersion"],
                timeout_seconds=30):
            seen.append(f'{ev["type"]} {ev["object"]["metadata"]["name"]}')

    racks_watch = asyncio.create_task(asyncio.to_thread(follow_racks))
    await wait_until(control_plane, lambda: control_plane.store.watching("example.io/racks")
                     > 0, what="the racks watch")
    await k8s(k8s.ext.delete_custom_resource_definition, "racks.example.io")
    await asyncio.wait_for(racks_watch, 20)  # ended by the server, well before its timeout
    assert seen == ["DELETED r1"]
    with pytest.raises(ApiException) as err:
        await k8s(k8s.custom.get_cluster_custom_object, "example.io", "v1alpha1", "racks",
                  "r1")
    assert err.value.status == 404


async def test_a_crd_whose_names_clash_is_never_established(control_plane: ControlPlane,
                                                            k8s: Clients) -> None:
    await k8s(k8s.ext.create_custom_resource_definition, WIDGET_CRD)
    await established(control_plane, "widgets.example.io")
    clash = json.loads(json.dumps(WIDGET_CRD))
    clash["metadata"]["name"] = "gizmos.example.io"
    clash["spec"]["names"] = {"plural": "gizmos", "singular": "gizmo", "kind": "Widget",
                              "listKind": "GizmoList"}
    await k8s(k8s.ext.create_custom_resource_definition, clash)

    def named() -> bool:
        crd = control_plane.store.peek(CRDS, "", "gizmos.example.io")
        return crd is not None and bool((crd.get("status") or {}).get("conditions"))

    await wait_until(control_plane, named, what="the naming controller")
    crd = await k8s(k8s.ext.read_custom_resource_definition, "gizmos.example.io")
    conditions = {c.type: (c.status, c.reason, c.message) for c in crd.status.conditions}
    assert conditions == {
        "NamesAccepted": ("False", "KindConflict", '"Widget" is already in use'),
        "Established": ("False", "NotAccepted", "not all names are accepted")}
    with pytest.raises(ApiException) as err:
        await k8s(k8s.custom.create_namespaced_custom_object, "example.io", "v1", "default",
                  "gizmos", {**widget("g"), "kind": "Widget"})
    assert err.value.status == 404
    groups = await k8s(client.ApisApi(k8s.api).get_api_versions)
    assert "example.io" in [g.name for g in groups.groups]
    resources = await k8s(k8s.custom.get_api_resources, "example.io", "v1")
    assert [r.name for r in resources.resources] == [
        "widgets", "widgets/status", "widgets/scale"]


async def test_server_side_apply_of_a_custom_resource(control_plane: ControlPlane,
                                                      kubectl: Kubectl) -> None:
    await kubectl.ok("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(WIDGET_CRD))
    await kubectl.ok("wait", "--for=condition=Established", "crd/widgets.example.io",
                     "--timeout=30s")
    out = await kubectl.ok("apply", "--server-side", "-f", "-",
                           stdin=yaml.safe_dump(widget(replicas=2, extra={"a": 1})))
    assert "widget.example.io/w serverside-applied" in out
    await kubectl.ok("label", "widget", "w", "team=a")
    await kubectl.ok("apply", "--server-side", "-f", "-",
                     stdin=yaml.safe_dump(widget(replicas=3)))
    got = json.loads(await kubectl.ok("get", "widget", "w", "-o", "json",
                                      "--show-managed-fields"))
    # Another manager's label stays; the field this manager no longer applies goes;
    # objects are granular maps, so the manager owns spec's fields one by one.
    assert got["metadata"]["labels"] == {"team": "a"}
    assert got["spec"] == {"size": "small", "replicas": 3, "mode": "Safe"}
    applied = next(e for e in got["metadata"]["managedFields"] if e["operation"] == "Apply")
    assert applied["fieldsV1"]["f:spec"] == {".": {}, "f:replicas": {}, "f:size": {}}
    # A field declared nowhere in the schema fails the typed patch, as upstream.
    result = await kubectl("apply", "--server-side", "-f", "-",
                           stdin=yaml.safe_dump(widget(colour="red")))
    assert result.returncode != 0
    assert ".spec.colour: field not declared in schema" in result.stderr
    # The merge patch of another manager takes replicas; applying it back conflicts.
    await kubectl.ok("patch", "widget", "w", "--type=merge", "-p",
                     '{"spec":{"replicas":4}}')
    result = await kubectl("apply", "--server-side", "-f", "-",
                           stdin=yaml.safe_dump(widget(replicas=3)))
    assert result.returncode != 0
    assert "conflict" in result.stderr and ".spec.replicas" in result.stderr


async def test_every_served_version_reads_the_same_objects(control_plane: ControlPlane,
                                                           k8s: Clients) -> None:
    two = json.loads(json.dumps(WIDGET_CRD))
    beta = json.loads(json.dumps(two["spec"]["versions"][0]))
    beta.update(name="v1beta1", storage=False, deprecated=True)
    two["spec"]["versions"].insert(0, beta)
    await k8s(k8s.ext.create_custom_resource_definition, two)
    await established(control_plane, "widgets.example.io")
    made = await k8s(k8s.custom.create_namespaced_custom_object, "example.io", "v1beta1",
                     "default", "widgets", {**widget("old"), "apiVersion": "example.io/v1beta1"})
    assert made["apiVersion"] == "example.io/v1beta1"
    _, code, headers = await k8s(
        k8s.custom.get_namespaced_custom_object_with_http_info, "example.io", "v1beta1",
        "default", "widgets", "old")
    assert code == 200
    assert headers["Warning"] == \
        '299 - "example.io/v1beta1 Widget is deprecated; use example.io/v1 Widget"'
    got = await k8s(k8s.custom.get_namespaced_custom_object, "example.io", "v1", "default",
                    "widgets", "old")
    assert got["apiVersion"] == "example.io/v1" and got["spec"]["mode"] == "Safe"
    group = await k8s(client.ApisApi(k8s.api).get_api_versions)
    example = next(g for g in group.groups if g.name == "example.io")
    assert [v.version for v in example.versions] == ["v1", "v1beta1"]
    assert example.preferred_version.version == "v1"

    # A default added to the schema later shows on objects written before (read-time
    # defaulting), and the object is stored at the storage version.
    crd = await k8s(k8s.ext.read_custom_resource_definition, "widgets.example.io")
    body = k8s.api.sanitize_for_serialization(crd)
    body["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["colour"] = {"type": "string", "default": "blue"}
    await k8s(k8s.ext.replace_custom_resource_definition, "widgets.example.io", body)
    got = await k8s(k8s.custom.get_namespaced_custom_object, "example.io", "v1", "default",
                    "widgets", "old")
    assert got["spec"]["colour"] == "blue"
    widgets = control_plane.store.catalog.by_key("example.io/widgets")
    assert widgets is not None
    stored = control_plane.store.peek(widgets, "default", "old")
    assert stored is not None and stored["apiVersion"] == "example.io/v1"
    assert "colour" not in stored["spec"]


async def test_an_hpa_scales_a_custom_resource_through_its_scale_paths(
        control_plane: ControlPlane, k8s: Clients, kubectl: Kubectl) -> None:
    await k8s(k8s.ext.create_custom_resource_definition, WIDGET_CRD)
    await established(control_plane, "widgets.example.io")
    await k8s(k8s.custom.create_namespaced_custom_object, "example.io", "v1", "default",
              "widgets", widget("h", replicas=1))
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "h", "namespace": "default"},
           "spec": {"minReplicas": 3, "maxReplicas": 5,
                    "scaleTargetRef": {"apiVersion": "example.io/v1", "kind": "Widget",
                                       "name": "h"}}}
    await kubectl.ok("apply", "-f", "-", stdin=yaml.safe_dump(hpa))
    widgets = control_plane.store.catalog.by_key("example.io/widgets")
    assert widgets is not None

    def replicas() -> int:
        found = control_plane.store.peek(widgets, "default", "h")
        return -1 if found is None else int(found["spec"]["replicas"])

    await wait_until(control_plane, lambda: replicas() == 3, what="the HPA's minReplicas")
    await kubectl.ok("scale", "widget", "h", "--replicas=8")
    await wait_until(control_plane, lambda: replicas() == 5, what="the HPA's maxReplicas")


async def test_a_custom_resource_owns_built_in_objects(control_plane: ControlPlane,
                                                       k8s: Clients) -> None:
    """Garbage collection through a custom owner (an LWS owns its StatefulSets): deleting
    the owner, or its CRD, deletes the dependents."""
    core = client.CoreV1Api(k8s.api)
    await k8s(k8s.ext.create_custom_resource_definition, WIDGET_CRD)
    await established(control_plane, "widgets.example.io")
    args = ("example.io", "v1", "default", "widgets")
    owners = [await k8s(k8s.custom.create_namespaced_custom_object, *args, widget(n))
              for n in ("a", "b")]
    for owner in owners:
        name = owner["metadata"]["name"]
        await k8s(core.create_namespaced_config_map, "default", {
            "metadata": {"name": f"cm-{name}", "ownerReferences": [{
                "apiVersion": "example.io/v1", "kind": "Widget", "name": name,
                "uid": owner["metadata"]["uid"], "controller": True}]}})

    def config_maps() -> list[str]:
        return sorted(o["metadata"]["name"] for o in control_plane.store.items(
            control_plane.store.catalog.by_key("configmaps"), "default")  # type: ignore[arg-type]
            if o["metadata"]["name"].startswith("cm-"))

    await k8s(k8s.custom.delete_namespaced_custom_object, *args, "a")
    await wait_until(control_plane, lambda: config_maps() == ["cm-b"], what="GC of cm-a")
    await k8s(k8s.ext.delete_custom_resource_definition, "widgets.example.io")
    await wait_until(control_plane, lambda: config_maps() == [], what="GC of cm-b")


async def test_finalizers_hold_a_deletion_until_they_are_removed(
        control_plane: ControlPlane, k8s: Clients, kubectl: Kubectl) -> None:
    """What a controller's cleanup relies on (issue 30: a NodeMaintenance deleted
    mid-operation): DELETE only marks the object; removing the last finalizer ends it."""
    await k8s(k8s.ext.create_custom_resource_definition, WIDGET_CRD)
    await established(control_plane, "widgets.example.io")
    args = ("example.io", "v1", "default", "widgets")
    held = widget("held")
    held["metadata"]["finalizers"] = ["example.io/cleanup"]
    await k8s(k8s.custom.create_namespaced_custom_object, *args, held)
    out = await kubectl.ok("delete", "widget", "held", "--wait=false")
    assert 'widget.example.io "held" deleted' in out
    got = await k8s(k8s.custom.get_namespaced_custom_object, *args, "held")
    assert got["metadata"]["deletionTimestamp"] and \
        got["metadata"]["deletionGracePeriodSeconds"] == 0
    assert got["metadata"]["generation"] == 2  # registry markAsDeleting bumps it once
    # A DELETE of a held object answers 200 with the object, marked, as the real API server
    # (apiserver endpoints/handlers/delete.go: 202 only for orphanDependents=false).
    body, code, _ = await k8s(k8s.custom.delete_namespaced_custom_object_with_http_info,
                              *args, "held")
    assert code == 200 and body["metadata"]["name"] == "held"
    assert body["metadata"]["deletionTimestamp"] == got["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiException) as err:
        await k8s(k8s.custom.patch_namespaced_custom_object, *args, "held",
                  {"metadata": {"finalizers": ["example.io/cleanup", "example.io/more"]}})
    assert err.value.status == 422
    assert "no new finalizers can be added if the object is being deleted" in err.value.body
    # A controller may still write the object (its status) while the finalizer holds it.
    await k8s(k8s.custom.patch_namespaced_custom_object_status, *args, "held",
              {"status": {"replicas": 0}})
    await k8s(k8s.custom.patch_namespaced_custom_object, *args, "held",
              {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        await k8s(k8s.custom.get_namespaced_custom_object, *args, "held")
    assert err.value.status == 404


async def test_lab_apply_takes_a_crd_and_its_custom_resources(lab: Lab) -> None:
    await lab.apply(WIDGET_CRD, RACK_CRD, widget("la", replicas=2), widget("lb"),
                    {"apiVersion": "example.io/v1alpha1", "kind": "Rack",
                     "metadata": {"name": "r"}, "spec": {}})
    await lab.apply(widget("la", replicas=4))  # exists: merge-patched
    store = lab.control_plane.store
    widgets = store.catalog.by_key("example.io/widgets")
    assert widgets is not None
    assert sorted((w["metadata"]["name"], w["spec"]["replicas"])
                  for w in store.items(widgets)) == [("la", 4), ("lb", 1)]
    racks = store.catalog.by_key("example.io/racks")
    assert racks is not None and store.peek(racks, "", "r") is not None
