"""What the lab returns for an input, field by field, against what kube-apiserver v1.31
returns for the same input. The expected objects are written here from the upstream
sources named beside each one (kubernetes/kubernetes unless said otherwise); the 422
messages are the ones the real server builds (apimachinery field/errors.go ErrorBody
before v1.34, api/errors NewInvalid, and the validation function named per case)."""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from conftest import Kubectl
from drainsafe.lab.controlplane import ControlPlane

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture
async def api(control_plane: ControlPlane) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
            base_url=control_plane.url,
            verify=ssl.create_default_context(cafile=control_plane.ca_path),
            headers={"Authorization": f"Bearer {control_plane.token}"}, timeout=10) as c:
        yield c


def path_of(obj: dict[str, Any], name: str | None = None) -> str:
    group, _, version = obj["apiVersion"].rpartition("/")
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    plural = {"Pod": "pods", "Deployment": "deployments", "Service": "services",
              "DaemonSet": "daemonsets", "ReplicaSet": "replicasets", "Node": "nodes",
              "PodDisruptionBudget": "poddisruptionbudgets", "EndpointSlice": "endpointslices",
              "HorizontalPodAutoscaler": "horizontalpodautoscalers"}[obj["kind"]]
    ns = "" if obj["kind"] == "Node" else "/namespaces/default"
    return f"{base}{ns}/{plural}" + (f"/{name}" if name else "")


# ---- defaulting ---------------------------------------------------------------------

SERVER = {
    "name": "server", "image": "example/llm:1.0", "command": ["python", "-m", "http.server"],
    "ports": [{"containerPort": 8000}],
    "readinessProbe": {"httpGet": {"path": "/health", "port": 8000},
                       "periodSeconds": 1, "failureThreshold": 1},
    "livenessProbe": {"tcpSocket": {"port": 8000}},
    "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "2"}},
    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
    "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": 8000}}},
}
SIDECAR = {"name": "sidecar", "image": "busybox", "command": ["sleep", "inf"]}


def server_defaulted(*, pod: bool) -> dict[str, Any]:
    """SERVER as the server stores it. core/v1/defaults.go: SetDefaults_Container
    (imagePullPolicy by tag, terminationMessagePath/Policy), SetDefaults_Probe (timeout 1,
    period 10, success 1, failure 3), SetDefaults_HTTPGetAction (scheme HTTP),
    SetDefaults_ObjectFieldSelector (apiVersion v1); zz_generated.defaults.go (port
    protocol TCP); SetDefaults_Pod (requests from limits: Pods only, not templates);
    a Quantity always serialises as a string."""
    c: dict[str, Any] = {
        "name": "server", "image": "example/llm:1.0",
        "command": ["python", "-m", "http.server"],
        "ports": [{"containerPort": 8000, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000, "scheme": "HTTP"},
                           "periodSeconds": 1, "failureThreshold": 1, "timeoutSeconds": 1,
                           "successThreshold": 1},
        "livenessProbe": {"tcpSocket": {"port": 8000}, "timeoutSeconds": 1,
                          "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2"}},
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                              "fieldPath": "status.podIP"}}}],
        "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": 8000,
                                              "scheme": "HTTP"}}},
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if pod:
        c["resources"]["requests"] = {"nvidia.com/gpu": "1", "cpu": "2"}
    return c


def sidecar_defaulted() -> dict[str, Any]:
    # "busybox" has no tag: ParseImageName reads it as :latest, so Always.
    return {**SIDECAR, "imagePullPolicy": "Always", "resources": {},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File"}


# SetDefaults_PodSpec: for pods and templates alike.
POD_SPEC_DEFAULTS = {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                     "dnsPolicy": "ClusterFirst", "securityContext": {},
                     "schedulerName": "default-scheduler"}


def without_token_volume(spec: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Take out the ServiceAccount plugin's volume (its name ends in 5 random letters)."""
    [volume] = [v for v in spec.pop("volumes") if v["name"].startswith("kube-api-access-")]
    name = volume["name"]
    assert re.fullmatch(r"kube-api-access-[a-z0-9]{5}", name)
    # plugin/pkg/admission/serviceaccount/admission.go TokenVolumeSource
    assert volume["projected"] == {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt",
                                                               "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
            "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}
    for c in spec["containers"]:
        assert c.pop("volumeMounts") == [{"name": name, "readOnly": True,
                                          "mountPath": TOKEN_PATH}]
    return spec, name


async def test_a_pod_comes_back_defaulted_as_the_real_server_returns_it(
        api: httpx.AsyncClient) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llm"},
           "spec": {"containers": [SERVER, SIDECAR]}}
    r = await api.post(path_of(pod), json=pod)
    assert r.status_code == 201, r.text
    got = r.json()
    spec, _ = without_token_volume(got["spec"])
    assert spec == {
        "containers": [server_defaulted(pod=True), sidecar_defaulted()],
        **POD_SPEC_DEFAULTS,
        "enableServiceLinks": True,  # SetDefaults_Pod
        # ServiceAccount admission; v1 conversion mirrors it in the deprecated field
        "serviceAccountName": "default", "serviceAccount": "default",
        # Priority admission without a class and without a default class
        "priority": 0, "preemptionPolicy": "PreemptLowerPriority",
        # DefaultTolerationSeconds admission
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300}],
    }
    # pkg/registry/core/pod/strategy.go PrepareForCreate; qos.go (cpu limit, no memory)
    assert got["status"] == {"phase": "Pending", "qosClass": "Burstable"}


async def test_admission_respects_what_the_pod_already_says(api: httpx.AsyncClient) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "own"}, "spec": {
        "containers": [dict(SIDECAR, image="busybox:latest",
                            livenessProbe={"grpc": {"port": 9000}})],
        "serviceAccountName": "runner", "automountServiceAccountToken": False,
        "priorityClassName": "system-node-critical",
        "tolerations": [{"operator": "Exists"}],
        "volumes": [{"name": "scratch"}]}}
    got = (await api.post(path_of(pod), json=pod)).json()
    spec = got["spec"]
    assert spec["serviceAccount"] == "runner" and "volumeMounts" not in spec["containers"][0]
    assert spec["volumes"] == [{"name": "scratch", "emptyDir": {}}]  # SetDefaults_Volume
    assert spec["priority"] == 2000001000  # the built-in system-node-critical class
    assert spec["tolerations"] == [{"operator": "Exists"}]  # tolerates every taint already
    assert spec["containers"][0]["imagePullPolicy"] == "Always"
    assert spec["containers"][0]["livenessProbe"]["grpc"] == {"port": 9000, "service": ""}

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "prio"},
           "spec": {"containers": [SIDECAR], "priority": 7}}
    r = await api.post(path_of(pod), json=pod)
    assert r.status_code == 403 and r.json()["message"] == (
        'pods "prio" is forbidden: the integer value of priority (7) must not be provided in '
        "pod spec; priority admission controller computed 0 from the given PriorityClass name")


DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
              "spec": {"selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [SERVER],
                                             "serviceAccountName": "web"}}}}


async def test_workloads_services_and_autoscalers_are_defaulted(api: httpx.AsyncClient) -> None:
    got = (await api.post(path_of(DEPLOYMENT), json=DEPLOYMENT)).json()
    assert got["spec"] == {
        # apps/v1/defaults.go SetDefaults_Deployment
        "replicas": 1, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
        "strategy": {"type": "RollingUpdate",
                     "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
        "selector": {"matchLabels": {"app": "web"}},
        # a template gets SetDefaults_PodSpec and the container defaults, but neither
        # SetDefaults_Pod (no requests from limits) nor pod admission
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
            "containers": [server_defaulted(pod=False)], **POD_SPEC_DEFAULTS,
            "serviceAccountName": "web", "serviceAccount": "web"}},
    }

    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
          "spec": {"selector": {"matchLabels": {"app": "agent"}},
                   "template": {"metadata": {"labels": {"app": "agent"}},
                                "spec": {"containers": [SIDECAR]}}}}
    got = (await api.post(path_of(ds), json=ds)).json()
    # SetDefaults_DaemonSet
    assert got["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {
        "maxUnavailable": 1, "maxSurge": 0}}
    assert got["spec"]["revisionHistoryLimit"] == 10

    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
           "spec": {"type": "NodePort", "selector": {"app": "web"},
                    "ports": [{"name": "http", "port": 80}]}}
    got = (await api.post(path_of(svc), json=svc)).json()
    spec = got["spec"]
    [port] = spec.pop("ports")
    assert 30000 <= port.pop("nodePort") <= 32767  # allocated from the default range
    assert port == {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}
    ip = spec.pop("clusterIP")
    assert spec == {  # SetDefaults_Service; ipFamilies from the (single-stack) allocator
        "type": "NodePort", "selector": {"app": "web"}, "sessionAffinity": "None",
        "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster",
        "clusterIPs": [ip], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"}

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-9"},
            "status": {"capacity": {"cpu": 8, "nvidia.com/gpu": 2, "memory": "64Gi"}}}
    got = (await api.post(path_of(node), json=node)).json()
    # SetDefaults_NodeStatus: allocatable = capacity; Quantities serialise as strings
    assert got["status"]["capacity"] == got["status"]["allocatable"] == {
        "cpu": "8", "nvidia.com/gpu": "2", "memory": "64Gi"}

    eps = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": "web-1"}, "addressType": "IPv4", "endpoints": [],
           "ports": [{"port": 8000}]}
    got = (await api.post(path_of(eps), json=eps)).json()
    # discovery/v1/defaults.go SetDefaults_EndpointPort: name "" and protocol TCP
    assert got["ports"] == [{"port": 8000, "name": "", "protocol": "TCP"}]

    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "web"},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                       "name": "web"}, "maxReplicas": 4,
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}}
    got = (await api.post(path_of(hpa), json=hpa)).json()
    # autoscaling/v2/defaults.go: minReplicas 1, CPU 80 %, behavior rules filled in
    assert got["spec"]["minReplicas"] == 1
    assert got["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
    assert got["spec"]["behavior"] == {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15}]},
        "scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": [
            {"type": "Percent", "value": 100, "periodSeconds": 15}]}}


# ---- validation ---------------------------------------------------------------------

def deployment(**spec: Any) -> dict[str, Any]:
    base = {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {**base, **spec}}


def pdb(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}}


INVALID = [
    pytest.param(  # ValidatePodTemplateSpecForReplicaSet
        deployment(template={"metadata": {"labels": {"app": "other"}},
                             "spec": {"containers": [{"name": "c", "image": "x:1"}]}}),
        [("spec.template.metadata.labels", "FieldValueInvalid",
          'Invalid value: map[string]string{"app":"other"}: `selector` does not match '
          "template `labels`")],
        'Deployment.apps "web" is invalid: spec.template.metadata.labels: Invalid value: '
        'map[string]string{"app":"other"}: `selector` does not match template `labels`',
        id="selector-mismatch"),
    pytest.param(  # ValidateDeploymentSpec -> ValidateNonnegativeField
        deployment(replicas=-1),
        [("spec.replicas", "FieldValueInvalid",
          "Invalid value: -1: must be greater than or equal to 0")],
        'Deployment.apps "web" is invalid: spec.replicas: Invalid value: -1: must be greater '
        "than or equal to 0", id="negative-replicas"),
    pytest.param(  # validateContainers: name required; two errors aggregate in brackets
        deployment(replicas=-2, template={"metadata": {"labels": {"app": "web"}},
                                          "spec": {"containers": [{"image": "x:1"}]}}),
        [("spec.replicas", "FieldValueInvalid",
          "Invalid value: -2: must be greater than or equal to 0"),
         ("spec.template.spec.containers[0].name", "FieldValueRequired", "Required value")],
        'Deployment.apps "web" is invalid: [spec.replicas: Invalid value: -2: must be greater '
        "than or equal to 0, spec.template.spec.containers[0].name: Required value]",
        id="nameless-container"),
    pytest.param(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
         "spec": {"containers": [{"image": "x:1"}]}},
        [("spec.containers[0].name", "FieldValueRequired", "Required value")],
        'Pod "p" is invalid: spec.containers[0].name: Required value', id="pod-nameless"),
    pytest.param(  # ValidatePodDisruptionBudgetSpec: the Go struct with its pointers
        pdb(minAvailable=1, maxUnavailable=1),
        [("spec", "FieldValueInvalid", re.compile(
            r"Invalid value: policy\.PodDisruptionBudgetSpec\{MinAvailable:"
            r"\(\*intstr\.IntOrString\)\(0xc[0-9a-f]+\), Selector:\(\*v1\.LabelSelector\)"
            r"\(0xc[0-9a-f]+\), MaxUnavailable:\(\*intstr\.IntOrString\)\(0xc[0-9a-f]+\), "
            r"UnhealthyPodEvictionPolicy:\(\*policy\.UnhealthyPodEvictionPolicyType\)\(nil\)"
            r"\}: minAvailable and maxUnavailable cannot be both set"))],
        re.compile(r'PodDisruptionBudget\.policy "web" is invalid: spec: Invalid value: '
                   r"policy\.PodDisruptionBudgetSpec\{.*\}: minAvailable and maxUnavailable "
                   r"cannot be both set"), id="pdb-min-and-max"),
    pytest.param(  # extensions validation IsNotMoreThan100Percent
        pdb(maxUnavailable="150%"),
        [("spec.maxUnavailable", "FieldValueInvalid",
          'Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"150%"}: must not be '
          "greater than 100%")],
        'PodDisruptionBudget.policy "web" is invalid: spec.maxUnavailable: Invalid value: '
        'intstr.IntOrString{Type:1, IntVal:0, StrVal:"150%"}: must not be greater than 100%',
        id="pdb-percent"),
    pytest.param(  # ValidateDeploymentSpec: empty selector
        deployment(selector={}),
        [("spec.selector", "FieldValueInvalid",
          "Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), "
          "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid "
          "for deployment")],
        'Deployment.apps "web" is invalid: spec.selector: Invalid value: v1.LabelSelector{'
        "MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement"
        "(nil)}: empty selector is invalid for deployment", id="empty-selector"),
]


def matches(expected: str | re.Pattern[str], got: str) -> bool:
    return bool(expected.fullmatch(got)) if isinstance(expected, re.Pattern) else expected == got


@pytest.mark.parametrize(("obj", "causes", "message"), INVALID)
async def test_invalid_objects_get_the_real_servers_422(
        api: httpx.AsyncClient, obj: dict[str, Any], causes: list[tuple[str, str, Any]],
        message: str | re.Pattern[str]) -> None:
    r = await api.post(path_of(obj), json=obj)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["reason"] == "Invalid" and body["code"] == 422
    assert matches(message, body["message"]), body["message"]
    group = obj["apiVersion"].rpartition("/")[0]
    assert body["details"]["kind"] == obj["kind"] and body["details"].get("group", "") == group
    assert body["details"]["name"] == obj["metadata"]["name"]
    got = body["details"]["causes"]
    assert [(c["field"], c["reason"]) for c in got] == [(f, t) for f, t, _ in causes]
    for cause, (_, _, text) in zip(got, causes, strict=True):
        assert matches(text, cause["message"]), cause["message"]
    assert (await api.get(path_of(obj, obj["metadata"]["name"]))).status_code == 404


async def test_immutable_fields_are_refused_on_update(api: httpx.AsyncClient) -> None:
    assert (await api.post(path_of(DEPLOYMENT), json=deployment())).status_code == 201
    change = {"spec": {"selector": {"matchLabels": {"v": "2"}},
                       "template": {"metadata": {"labels": {"v": "2"}}}}}
    r = await api.patch(path_of(DEPLOYMENT, "web"), json=change,
                        headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 422
    # the apps strategies' ValidateUpdate: ValidateImmutableField(spec.selector)
    assert r.json()["message"] == (
        'Deployment.apps "web" is invalid: spec.selector: Invalid value: v1.LabelSelector{'
        'MatchLabels:map[string]string{"app":"web", "v":"2"}, '
        "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable")

    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
           "spec": {"selector": {"app": "db"}, "ports": [{"port": 5432}]}}
    ip = (await api.post(path_of(svc), json=svc)).json()["spec"]["clusterIP"]
    other = "127.96.255.254" if ip != "127.96.255.254" else "127.96.255.253"
    r = await api.patch(path_of(svc, "db"), json={"spec": {"clusterIP": other}},
                        headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 422
    # ValidateServiceUpdate -> validateUpgradeDowngradeClusterIPs
    assert r.json()["message"] == (
        f'Service "db" is invalid: spec.clusterIPs[0]: Invalid value: []string{{"{other}"}}: '
        "may not change once set")
    unchanged = (await api.get(path_of(svc, "db"))).json()["spec"]
    assert unchanged["clusterIP"] == ip and unchanged["clusterIPs"] == [ip]


async def test_kubectl_describe_prints_the_probe_defaults(kubectl: Kubectl) -> None:
    """The case that started it: a probe given without timeout and success threshold."""
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probed"},
                "spec": {"containers": [{
                    "name": "server", "image": "example/llm:1.0",
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 8000},
                                       "periodSeconds": 1, "failureThreshold": 1}}]}}
    await kubectl.ok("create", "-f", "-", stdin=json.dumps(manifest))
    out = await kubectl.ok("describe", "pod", "probed")
    assert re.search(r"Readiness:\s+http-get http://:8000/health delay=0s timeout=1s "
                     r"period=1s #success=1 #failure=1\n", out), out


# ---- field validation ---------------------------------------------------------------

def with_unknown_fields() -> dict[str, Any]:
    d = deployment()
    d["spec"]["paused_"] = True
    d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    return d


# in document order, as sigs.k8s.io/json reports them
UNKNOWN = ['unknown field "spec.template.spec.containers[0].imagePullPolicyy"',
           'unknown field "spec.paused_"']


async def test_unknown_fields_follow_the_field_validation_directive(
        api: httpx.AsyncClient) -> None:
    url = path_of(DEPLOYMENT)
    r = await api.post(url, params={"fieldValidation": "Strict"}, json=with_unknown_fields())
    assert r.status_code == 400 and r.json()["reason"] == "BadRequest"
    # handlers/create.go transformDecodeError over runtime.StrictDecodingError
    assert r.json()["message"] == (
        'Deployment in version "v1" cannot be handled as a Deployment: strict decoding '
        "error: " + ", ".join(UNKNOWN))
    assert (await api.get(path_of(DEPLOYMENT, "web"))).status_code == 404

    r = await api.post(url, json=with_unknown_fields())  # no directive: Warn (v1.27+)
    assert r.status_code == 201
    assert r.headers.get_list("warning") == [
        '299 - "unknown field \\"spec.template.spec.containers[0].imagePullPolicyy\\""',
        '299 - "unknown field \\"spec.paused_\\""']
    stored = r.json()  # decoding into the Go type dropped them
    assert "paused_" not in stored["spec"]
    assert "imagePullPolicyy" not in stored["spec"]["template"]["spec"]["containers"][0]

    r = await api.patch(path_of(DEPLOYMENT, "web"), params={"fieldValidation": "Strict"},
                        json={"spec": {"replicaz": 2}},
                        headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 400  # handlers/patch.go: the bare strict decoding error
    assert r.json()["message"] == 'strict decoding error: unknown field "spec.replicaz"'
    r = await api.patch(path_of(DEPLOYMENT, "web"), params={"fieldValidation": "Ignore"},
                        json={"spec": {"replicaz": 2}},
                        headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200 and "warning" not in r.headers
    assert "replicaz" not in r.json()["spec"]


async def test_kubectl_refuses_unknown_fields_as_a_real_cluster_does(kubectl: Kubectl) -> None:
    r = await kubectl("create", "-f", "-", stdin=json.dumps(with_unknown_fields()))
    assert r.returncode != 0
    assert ('Deployment in version "v1" cannot be handled as a Deployment: strict decoding '
            'error: unknown field "spec.paused_"') in r.stderr, r.stderr
    out = await kubectl.ok("create", "--validate=warn", "-f", "-",
                           stdin=json.dumps(with_unknown_fields()))
    assert "deployment.apps/web created" in out


# ---- server-side apply ----------------------------------------------------------------

APPLY = {"content-type": "application/apply-patch+yaml"}


def applied(replicas: int, labels: dict[str, str]) -> str:
    return json.dumps({"apiVersion": "apps/v1", "kind": "Deployment",
                       "metadata": {"name": "web", "labels": labels},
                       "spec": {"replicas": replicas,
                                "selector": {"matchLabels": {"app": "web"}},
                                "template": {"metadata": {"labels": {"app": "web"}},
                                             "spec": {"containers": [
                                                 {"name": "c", "image": "x:1"}]}}}})


def owners(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["manager"]: e for e in obj["metadata"].get("managedFields") or []}


async def test_server_side_apply_creates_merges_and_reports_conflicts(
        api: httpx.AsyncClient, control_plane: ControlPlane) -> None:
    url = path_of(DEPLOYMENT, "web")
    r = await api.patch(url, params={"fieldManager": "ci"}, headers=APPLY,
                        content=applied(2, {"app": "web", "team": "ml"}))
    assert r.status_code == 201, r.text  # created by the apply
    entry = owners(r.json())["ci"]
    assert entry["operation"] == "Apply" and entry["fieldsType"] == "FieldsV1"
    fields = entry["fieldsV1"]
    assert fields["f:spec"]["f:replicas"] == {}
    assert fields["f:spec"]["f:selector"] == {}  # a LabelSelector is atomic
    assert fields["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"c"}'] == {
        ".": {}, "f:image": {}, "f:name": {}}
    assert r.json()["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == "25%"  # defaulted

    # another manager changes replicas and adds a label (an Update operation)
    r = await api.patch(url, params={"fieldManager": "oncall"},
                        json={"spec": {"replicas": 5}, "metadata": {"labels": {"pager": "y"}}},
                        headers={"content-type": "application/merge-patch+json"})
    update = owners(r.json())["oncall"]
    assert update["operation"] == "Update" and update["apiVersion"] == "apps/v1"
    assert "f:replicas" in update["fieldsV1"]["f:spec"]
    assert "f:replicas" not in owners(r.json())["ci"]["fieldsV1"]["f:spec"]

    r = await api.patch(url, params={"fieldManager": "ci"}, headers=APPLY,
                        content=applied(2, {"app": "web"}))
    assert r.status_code == 409
    body = r.json()
    assert body["reason"] == "Conflict"
    assert body["message"] == ('Apply failed with 1 conflict: conflict with "oncall" using '
                               "apps/v1: .spec.replicas")
    assert body["details"]["causes"] == [{"reason": "FieldManagerConflict",
                                          "message": 'conflict with "oncall" using apps/v1',
                                          "field": ".spec.replicas"}]

    r = await api.patch(url, params={"fieldManager": "ci", "force": "true"}, headers=APPLY,
                        content=applied(2, {"app": "web"}))
    assert r.status_code == 200
    got = r.json()
    assert got["spec"]["replicas"] == 2
    # `team` was applied by ci before and not now: removed; `pager` is oncall's: kept
    assert got["metadata"]["labels"] == {"app": "web", "pager": "y"}
    assert "f:spec" not in owners(got)["oncall"]["fieldsV1"]

    writes: list[Any] = []  # the controllers keep writing status meanwhile: not counted
    unlisten = control_plane.store.listen(
        lambda ev: writes.append(ev) if ev.resource == "apps/deployments" and (
            ev.obj.get("spec") != (ev.old or {}).get("spec")
            or ev.obj["metadata"].get("managedFields")
            != (ev.old or {}).get("metadata", {}).get("managedFields")) else None)
    try:
        r = await api.patch(url, params={"fieldManager": "ci"}, headers=APPLY,
                            content=applied(2, {"app": "web"}))
    finally:
        unlisten()
    assert r.status_code == 200 and writes == []  # the same apply again writes nothing

    r = await api.patch(url, params={"fieldManager": "ci"}, headers=APPLY,
                        content=applied(2, {"app": "web"}).replace('"spec"', '"spec_"', 1))
    assert r.status_code == 400
    assert r.json()["message"] == ("failed to create typed patch object (apps/v1, "
                                   "Kind=Deployment): .spec_: field not declared in schema")


SSA_MANIFEST = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: %d
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: server, image: example/llm:1.0}]
"""


async def test_kubectl_apply_server_side_with_conflicts(kubectl: Kubectl) -> None:
    out = await kubectl.ok("apply", "--server-side", "-f", "-", stdin=SSA_MANIFEST % 2)
    assert "deployment.apps/web serverside-applied" in out
    await kubectl.ok("patch", "deployment", "web", "-p", '{"spec":{"replicas":3}}')
    r = await kubectl("apply", "--server-side", "-f", "-", stdin=SSA_MANIFEST % 2)
    assert r.returncode != 0
    assert ('Apply failed with 1 conflict: conflict with "kubectl-patch" using apps/v1: '
            ".spec.replicas") in r.stderr, r.stderr
    out = await kubectl.ok("apply", "--server-side", "--force-conflicts", "-f", "-",
                           stdin=SSA_MANIFEST % 2)
    assert "serverside-applied" in out
    got = json.loads(await kubectl.ok("get", "deployment", "web", "-o", "json",
                                      "--show-managed-fields"))
    assert got["spec"]["replicas"] == 2
    assert [e["manager"] for e in got["metadata"]["managedFields"]
            if e["operation"] == "Apply"] == ["kubectl"]


async def test_apply_reads_yaml_as_the_server_does_and_creates_record_their_manager(
        api: httpx.AsyncClient) -> None:
    manifest = """
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, annotations: {built: 2026-12-01T10:00:00Z}}
data: {mode: fast}
"""
    r = await api.patch("/api/v1/namespaces/default/configmaps/cfg", content=manifest,
                        params={"fieldManager": "kustomize"}, headers=APPLY)
    assert r.status_code == 201, r.text
    assert r.json()["metadata"]["annotations"] == {"built": "2026-12-01T10:00:00Z"}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "cfg-"},
          "data": {"a": "b"}}
    r = await api.post("/api/v1/namespaces/default/configmaps", json=cm,
                       headers={"user-agent": "helm/3.14.0 (linux/amd64)"})
    [entry] = r.json()["metadata"]["managedFields"]  # the User-Agent's first part
    assert (entry["manager"], entry["operation"]) == ("helm", "Update")
    assert entry["fieldsV1"] == {"f:data": {".": {}, "f:a": {}}}
