"""The official Kubernetes Python client (kubernetes-client/python, typed pydantic models
that refuse unknown fields) against the lab: CRUD, the three patch types, watch from a
resourceVersion and its 410, eviction under a PDB, and every served kind read back into
its typed model with nothing lost.

The client is synchronous (urllib3); the lab's API server runs on the test's event loop,
so each client call runs in a worker thread."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import pathlib
import re
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import httpx
import pytest

from conftest import wait_until
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.controlplane import ControlPlane

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, watch  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

T = TypeVar("T")


class Clients:
    def __init__(self, cp: ControlPlane) -> None:
        cfg = client.Configuration(host=cp.url)
        cfg.ssl_ca_cert = str(cp.ca_path)
        cfg.api_key = {"BearerToken": f"Bearer {cp.token}"}
        self.api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.discovery = client.DiscoveryV1Api(self.api)
        self.coordination = client.CoordinationV1Api(self.api)
        self.autoscaling = client.AutoscalingV2Api(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)
        self.admission = client.AdmissionregistrationV1Api(self.api)
        self.ext = client.ApiextensionsV1Api(self.api)

    async def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)


@pytest.fixture
async def k8s(control_plane: ControlPlane) -> AsyncIterator[Clients]:
    clients = Clients(control_plane)
    try:
        yield clients
    finally:
        clients.api.close()


def deployment(name: str = "web") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "containers": [{"name": "server", "image": "example/llm:1.0",
                                         "env": [{"name": "A", "value": "1"}]}]}}}}


async def test_create_get_list_and_the_three_patch_types(k8s: Clients) -> None:
    created = await k8s(k8s.apps.create_namespaced_deployment, "default", deployment())
    assert isinstance(created, client.V1Deployment)
    assert created.spec.strategy.rolling_update.max_surge == "25%"
    await k8s(k8s.apps.create_namespaced_deployment, "default", deployment("other"))
    got = await k8s(k8s.apps.read_namespaced_deployment, "web", "default")
    assert got.metadata.uid == created.metadata.uid
    listed = await k8s(k8s.apps.list_namespaced_deployment, "default", label_selector="app=web")
    assert [d.metadata.name for d in listed.items] == ["web"]
    assert int(listed.metadata.resource_version) >= int(got.metadata.resource_version)

    # strategic merge: containers merge by name, so `env` of the named one is merged too
    smp = {"spec": {"template": {"spec": {"containers": [
        {"name": "server", "env": [{"name": "B", "value": "2"}]}]}}}}
    r = await k8s(k8s.apps.patch_namespaced_deployment, "web", "default", smp,
                  _content_type="application/strategic-merge-patch+json")
    [c] = r.spec.template.spec.containers
    assert c.image == "example/llm:1.0" and sorted(e.name for e in c.env) == ["A", "B"]
    # JSON merge patch: the list is replaced as a whole
    merge = {"spec": {"template": {"spec": {"containers": [
        {"name": "server", "image": "example/llm:2.0"}]}}}}
    r = await k8s(k8s.apps.patch_namespaced_deployment, "web", "default", merge,
                  _content_type="application/merge-patch+json")
    [c] = r.spec.template.spec.containers
    assert c.image == "example/llm:2.0" and c.env is None
    assert c.image_pull_policy == "IfNotPresent"  # re-defaulted after the patch
    # JSON patch (RFC 6902)
    ops = [{"op": "replace", "path": "/spec/replicas", "value": 3},
           {"op": "add", "path": "/metadata/labels/tier", "value": "gpu"}]
    r = await k8s(k8s.apps.patch_namespaced_deployment, "web", "default", ops,
                  _content_type="application/json-patch+json")
    assert r.spec.replicas == 3 and r.metadata.labels == {"app": "web", "tier": "gpu"}

    with pytest.raises(ApiException) as err:
        await k8s(k8s.apps.read_namespaced_deployment, "nope", "default")
    assert err.value.status == 404
    assert json.loads(err.value.body)["message"] == 'deployments.apps "nope" not found'

    bad = deployment("bad")
    bad["spec"]["replicas"] = -1
    with pytest.raises(ApiException) as err:
        await k8s(k8s.apps.create_namespaced_deployment, "default", bad)
    assert err.value.status == 422
    assert json.loads(err.value.body)["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "spec.replicas",
        "message": "Invalid value: -1: must be greater than or equal to 0"}]


async def test_watch_from_a_resource_version_then_410_gone(tmp_path: pathlib.Path) -> None:
    cp = ControlPlane(tmp_path / "state", history=4)
    await cp.start()
    k8s = Clients(cp)
    try:
        def pod(name: str) -> dict[str, Any]:
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                    "spec": {"containers": [{"name": "c", "image": "x:1"}]}}

        await k8s(k8s.core.create_namespaced_pod, "default", pod("a"))
        since = (await k8s(k8s.core.list_namespaced_pod, "default")).metadata.resource_version
        await k8s(k8s.core.create_namespaced_pod, "default", pod("b"))
        await k8s(k8s.core.delete_namespaced_pod, "a", "default")

        def events(rv: str) -> list[tuple[str, str, type]]:
            w = watch.Watch()
            seen = []
            for ev in w.stream(k8s.core.list_namespaced_pod, "default", resource_version=rv,
                               timeout_seconds=2):
                seen.append((ev["type"], ev["object"].metadata.name, type(ev["object"])))
                if seen[-1][:2] == ("DELETED", "a"):
                    w.stop()
            return seen

        # from `since` on: b's creation, then a's deletion last (the scheduler's status
        # writes on the unschedulable pods may come before, between and after: one on
        # a can land after the list that read `since`)
        seen = await k8s(events, since)
        assert [(kind, name) for kind, name, _ in seen if kind != "MODIFIED"] == [
            ("ADDED", "b"), ("DELETED", "a")]
        assert seen[-1] == ("DELETED", "a", client.V1Pod)
        assert all(cls is client.V1Pod for *_, cls in seen)
        for n in range(6):  # push `since` out of the 4-event window
            await k8s(k8s.core.create_namespaced_pod, "default", pod(f"c{n}"))
        with pytest.raises(ApiException) as err:
            await k8s(events, since)
        assert err.value.status == 410
        assert err.value.reason.startswith("Expired: too old resource version: ")
    finally:
        k8s.api.close()
        await cp.stop()


async def test_eviction_under_a_pdb_gets_429_then_201(k8s: Clients,
                                                      control_plane: ControlPlane) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "llm-0", "labels": {"app": "llm"}},
           "spec": {"nodeName": "node-a",
                    "containers": [{"name": "c", "image": "x:1"}]}}
    await k8s(k8s.core.create_namespaced_pod, "default", pod)
    # as the kubelet would: Running and Ready
    status = {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}}
    await k8s(k8s.core.patch_namespaced_pod_status, "llm-0", "default", status,
              _content_type="application/strategic-merge-patch+json")
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
              "metadata": {"name": "llm"},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "llm"}}}}
    await k8s(k8s.policy.create_namespaced_pod_disruption_budget, "default", budget)
    pdbs = BY_KEY["policy/poddisruptionbudgets"]

    def observed() -> bool:
        st = (control_plane.store.peek(pdbs, "default", "llm") or {}).get("status") or {}
        return st.get("observedGeneration") == 1 and st.get("currentHealthy") == 1

    await wait_until(control_plane, observed, what="the PDB observed")
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="llm-0",
                                                              namespace="default"))
    with pytest.raises(ApiException) as err:
        await k8s(k8s.core.create_namespaced_pod_eviction, "llm-0", "default", eviction)
    assert err.value.status == 429
    body = json.loads(err.value.body)
    assert body["reason"] == "TooManyRequests"
    assert body["details"]["causes"] == [{
        "reason": "DisruptionBudget",
        "message": "The disruption budget llm needs 1 healthy pods and has 1 currently"}]

    await k8s(k8s.policy.patch_namespaced_pod_disruption_budget, "llm", "default",
              {"spec": {"minAvailable": 0}},
              _content_type="application/merge-patch+json")
    await wait_until(control_plane, lambda: ((control_plane.store.peek(
        pdbs, "default", "llm") or {}).get("status") or {}).get("disruptionsAllowed") == 1,
        what="budget allows one")
    # 201 with a Status body, which the client (declaring V1Eviction) reads as an Eviction
    await k8s(k8s.core.create_namespaced_pod_eviction, "llm-0", "default", eviction)
    gone = await k8s(k8s.core.read_namespaced_pod, "llm-0", "default")
    assert gone.metadata.deletion_timestamp is not None
    assert any(c.type == "DisruptionTarget" for c in gone.status.conditions)


# ---- every kind, typed --------------------------------------------------------------

NOW = "2026-12-01T10:00:00Z"
KINDS: list[tuple[str, dict[str, Any], str, str]] = [
    # (store key, object, typed read method, typed list method)
    ("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "ml", "annotations": {"a": "b"}}},
     "core.read_namespace", "core.list_namespace"),
    ("nodes", {"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "gpu-0", "labels": {"nvidia.com/gpu.present": "true"}},
               "spec": {"taints": [{"key": "gpu", "value": "h100", "effect": "NoSchedule"}],
                        "podCIDR": "10.0.0.0/24"},
               "status": {"capacity": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "2"},
                          "conditions": [{"type": "Ready", "status": "True",
                                          "lastHeartbeatTime": NOW,
                                          "lastTransitionTime": NOW,
                                          "reason": "KubeletReady", "message": "ok"}],
                          "addresses": [{"type": "InternalIP", "address": "127.10.0.1"}],
                          "nodeInfo": {"kubeletVersion": "v1.31.0", "machineID": "m",
                                       "systemUUID": "s", "bootID": "b",
                                       "kernelVersion": "6", "osImage": "lab",
                                       "containerRuntimeVersion": "lab://1",
                                       "kubeProxyVersion": "", "operatingSystem": "linux",
                                       "architecture": "amd64"}}},
     "core.read_node", "core.list_node"),
    ("pods", {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "llm", "labels": {"app": "llm"},
                           "annotations": {"x": "y"}},
              "spec": {"containers": [{
                  "name": "server", "image": "example/llm:1.0",
                  "args": ["--port", "8000"],
                  "ports": [{"name": "http", "containerPort": 8000}],
                  "startupProbe": {"httpGet": {"path": "/health", "port": "http"},
                                   "failureThreshold": 60},
                  "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}},
                  "env": [{"name": "NODE", "valueFrom": {"fieldRef": {
                      "fieldPath": "spec.nodeName"}}}],
                  "lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}],
                  "affinity": {"nodeAffinity": {
                      "requiredDuringSchedulingIgnoredDuringExecution": {
                          "nodeSelectorTerms": [{"matchExpressions": [{
                              "key": "nvidia.com/gpu.present", "operator": "In",
                              "values": ["true"]}]}]}}},
                  "topologySpreadConstraints": [{"maxSkew": 1,
                                                 "topologyKey": "kubernetes.io/hostname",
                                                 "whenUnsatisfiable": "ScheduleAnyway",
                                                 "labelSelector": {
                                                     "matchLabels": {"app": "llm"}}}],
                  "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}]}},
     "core.read_namespaced_pod", "core.list_namespaced_pod"),
    ("services", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "llm"},
                  "spec": {"selector": {"app": "llm"}, "ports": [
                      {"name": "http", "port": 80, "targetPort": "http"}],
                      "publishNotReadyAddresses": True}},
     "core.read_namespaced_service", "core.list_namespaced_service"),
    ("endpoints", {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "manual"},
                   "subsets": [{"addresses": [{"ip": "127.10.0.5", "nodeName": "gpu-0"}],
                                "ports": [{"name": "http", "port": 8000}]}]},
     "core.read_namespaced_endpoints", "core.list_namespaced_endpoints"),
    ("events", {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "llm.1"},
                "involvedObject": {"kind": "Pod", "name": "llm", "namespace": "default"},
                "reason": "Killing", "message": "Stopping container server",
                "type": "Normal", "count": 1, "firstTimestamp": NOW, "lastTimestamp": NOW,
                "source": {"component": "kubelet", "host": "gpu-0"}},
     "core.read_namespaced_event", "core.list_namespaced_event"),
    ("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                    "data": {"model": "llama"}},
     "core.read_namespaced_config_map", "core.list_namespaced_config_map"),
    ("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": "runner"},
                         "automountServiceAccountToken": False},
     "core.read_namespaced_service_account", "core.list_namespaced_service_account"),
    ("apps/deployments", {**deployment("dep"), "spec": {
        **deployment("dep")["spec"], "minReadySeconds": 5,
        "strategy": {"type": "RollingUpdate",
                     "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}},
     "apps.read_namespaced_deployment", "apps.list_namespaced_deployment"),
    ("apps/replicasets", {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                          "metadata": {"name": "rs"},
                          "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "rs"}},
                                   "template": deployment("rs")["spec"]["template"]}},
     "apps.read_namespaced_replica_set", "apps.list_namespaced_replica_set"),
    ("apps/daemonsets", {"apiVersion": "apps/v1", "kind": "DaemonSet",
                         "metadata": {"name": "ds"},
                         "spec": {"selector": {"matchLabels": {"app": "ds"}},
                                  "template": deployment("ds")["spec"]["template"]}},
     "apps.read_namespaced_daemon_set", "apps.list_namespaced_daemon_set"),
    ("apps/statefulsets", {"apiVersion": "apps/v1", "kind": "StatefulSet",
                           "metadata": {"name": "sts"},
                           "spec": {"replicas": 0, "serviceName": "sts",
                                    "selector": {"matchLabels": {"app": "sts"}},
                                    "template": deployment("sts")["spec"]["template"],
                                    "updateStrategy": {"type": "RollingUpdate",
                                                       "rollingUpdate": {"partition": 1}},
                                    "volumeClaimTemplates": [{
                                        "metadata": {"name": "cache"},
                                        "spec": {"accessModes": ["ReadWriteOnce"],
                                                 "resources": {"requests": {
                                                     "storage": "1Gi"}}}}]}},
     "apps.read_namespaced_stateful_set", "apps.list_namespaced_stateful_set"),
    ("apps/controllerrevisions", {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                                  "metadata": {"name": "ds-1"}, "revision": 1,
                                  "data": {"spec": {"template": {"metadata": {}}}}},
     "apps.read_namespaced_controller_revision", "apps.list_namespaced_controller_revision"),
    ("policy/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb"},
        "spec": {"maxUnavailable": "25%", "selector": {"matchLabels": {"app": "llm"}},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"}},
     "policy.read_namespaced_pod_disruption_budget",
     "policy.list_namespaced_pod_disruption_budget"),
    ("discovery.k8s.io/endpointslices", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "manual-1", "labels": {"kubernetes.io/service-name": "manual"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.10.0.5"], "conditions": {
            "ready": True, "serving": True, "terminating": False}, "nodeName": "gpu-0",
            "targetRef": {"kind": "Pod", "name": "llm", "namespace": "default"}}],
        "ports": [{"name": "http", "port": 8000}]},
     "discovery.read_namespaced_endpoint_slice", "discovery.list_namespaced_endpoint_slice"),
    ("coordination.k8s.io/leases", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "gpu-0"},
        "spec": {"holderIdentity": "gpu-0", "leaseDurationSeconds": 40,
                 "renewTime": "2026-12-01T10:00:00.123456Z"}},
     "coordination.read_namespaced_lease", "coordination.list_namespaced_lease"),
    ("autoscaling/horizontalpodautoscalers", {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "llm"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                    "name": "dep"},
                 "minReplicas": 2, "maxReplicas": 8,
                 "metrics": [{"type": "Pods", "pods": {
                     "metric": {"name": "queue_depth"},
                     "target": {"type": "AverageValue", "averageValue": "10"}}}]}},
     "autoscaling.read_namespaced_horizontal_pod_autoscaler",
     "autoscaling.list_namespaced_horizontal_pod_autoscaler"),
    # Stored only (not enforced), so that install manifests such as deploy/controller apply.
    ("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"},
                 "type": "kubernetes.io/tls",
                 "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}},
     "core.read_namespaced_secret", "core.list_namespaced_secret"),
    ("rbac.authorization.k8s.io/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "lease"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "verbs": ["get", "update"]}]},
     "rbac.read_namespaced_role", "rbac.list_namespaced_role"),
    ("rbac.authorization.k8s.io/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "lease"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
        "subjects": [{"kind": "ServiceAccount", "name": "guard", "namespace": "default"}]},
     "rbac.read_namespaced_role_binding", "rbac.list_namespaced_role_binding"),
    ("rbac.authorization.k8s.io/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "guard"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
     "rbac.read_cluster_role", "rbac.list_cluster_role"),
    ("rbac.authorization.k8s.io/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "guard"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "guard"},
        "subjects": [{"kind": "ServiceAccount", "name": "guard", "namespace": "default"}]},
     "rbac.read_cluster_role_binding", "rbac.list_cluster_role_binding"),
    ("admissionregistration.k8s.io/validatingwebhookconfigurations", {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "guard"},
        "webhooks": [{"name": "guard.drainsafe.io", "admissionReviewVersions": ["v1"],
                      "sideEffects": "NoneOnDryRun", "failurePolicy": "Ignore",
                      "timeoutSeconds": 5,
                      "clientConfig": {"service": {"name": "guard", "namespace": "default",
                                                   "path": "/evict", "port": 443}},
                      "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                 "operations": ["CREATE"], "resources": ["pods/eviction"],
                                 "scope": "Namespaced"}]}]},
     "admission.read_validating_webhook_configuration",
     "admission.list_validating_webhook_configuration"),
    ("apiextensions.k8s.io/customresourcedefinitions", {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced",
                 "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "subresources": {"status": {}},
                               "additionalPrinterColumns": [
                                   {"name": "Size", "type": "string", "jsonPath": ".spec.size"}],
                               "schema": {"openAPIV3Schema": {
                                   "type": "object", "properties": {"spec": {
                                       "type": "object", "properties": {
                                           "size": {"type": "string", "default": "s"}}}}}}}]}},
     "ext.read_custom_resource_definition", "ext.list_custom_resource_definition"),
]
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def normalized(value: Any) -> Any:
    """Timestamps compared as instants (the client re-renders them with +00:00); a null
    (the server writes `lastProbeTime: null`, a zero metav1.Time) as absent, which is how
    the client serialises an unset field."""
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    if isinstance(value, str) and _TIME.match(value):
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k, "<absent>"), b.get(k, "<absent>"),
                                     f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for n, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{n}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_the_table_covers_every_served_kind() -> None:
    assert {key for key, *_ in KINDS} == set(BY_KEY)


async def test_every_kind_reads_back_into_its_typed_model_with_nothing_lost(
        k8s: Clients, control_plane: ControlPlane) -> None:
    async with httpx.AsyncClient(
            base_url=control_plane.url,
            verify=ssl.create_default_context(cafile=control_plane.ca_path),
            headers={"Authorization": f"Bearer {control_plane.token}"}, timeout=10) as raw:
        for key, obj, read, list_ in KINDS:
            rt = BY_KEY[key]
            base = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
            ns = "/namespaces/default" if rt.namespaced else ""
            url = f"{base}{ns}/{rt.plural}"
            r = await raw.post(url, json=obj)
            assert r.status_code == 201, (key, r.text)
            name = obj["metadata"]["name"]
            wire = (await raw.get(f"{url}/{name}")).json()

            api_name, method = read.split(".")
            fn = getattr(getattr(k8s, api_name), method)
            args = (name, "default") if rt.namespaced else (name,)
            typed = await k8s(fn, *args)
            assert type(typed).__name__.endswith(rt.kind), (key, type(typed))
            back = k8s.api.sanitize_for_serialization(typed)
            fresh = (await raw.get(f"{url}/{name}")).json()  # controllers may have written
            if normalized(back) != normalized(wire):
                assert differences(normalized(back), normalized(fresh)) == [], key

            api_name, method = list_.split(".")
            fn = getattr(getattr(k8s, api_name), method)
            listed = await k8s(fn, *(("default",) if rt.namespaced else ()))
            assert name in [i.metadata.name for i in listed.items], key
