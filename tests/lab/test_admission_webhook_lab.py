"""Validating webhooks on pods/eviction in the lab, against a real HTTPS webhook pod.

The webhook server (tests/lab/admission_peer.py) runs as a lab pod behind a Service, with a
certificate for `peer.hooks.svc` made by drainsafe.controller.certs; the evictions are sent
over HTTPS to the lab API server, and by the real kubectl drain.
"""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
import ssl
import sys
import time
from typing import Any

import httpx
import pytest

from drainsafe.controller.certs import make_serving_cert, service_dns_names
from drainsafe.lab.apiserver import admission_webhook as aw
from drainsafe.lab.cluster import Lab, virtual_deployment

PEER = pathlib.Path(__file__).with_name("admission_peer.py")
KUBECTL = pathlib.Path("/usr/lib/google-cloud-sdk/bin")

pytestmark = pytest.mark.e2e


# ---- pure parts ----------------------------------------------------------------------

def _attrs(**kw: Any) -> aw.Attributes:
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "p", "namespace": "ns", **kw.pop("meta", {})}}
    return aw.eviction_attributes("ns", "p", eviction, dry_run=False)


@pytest.mark.parametrize(("resources", "expected"), [
    (["pods/eviction"], True), (["pods/*"], True), (["*/*"], True), (["*/eviction"], True),
    (["pods"], False), (["*"], False), (["pods/status"], False),
])
def test_rule_resource_and_subresource(resources: list[str], expected: bool) -> None:
    rule = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
            "resources": resources}
    assert aw.rule_matches(rule, _attrs()) is expected


def test_rule_operation_group_version_scope() -> None:
    base = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
            "resources": ["pods/eviction"]}
    assert aw.rule_matches({**base, "operations": ["*"]}, _attrs())
    assert not aw.rule_matches({**base, "operations": ["DELETE"]}, _attrs())
    assert not aw.rule_matches({**base, "apiGroups": ["policy"]}, _attrs())
    assert not aw.rule_matches({**base, "apiVersions": ["v1beta1"]}, _attrs())
    assert aw.rule_matches({**base, "scope": "Namespaced"}, _attrs())
    assert not aw.rule_matches({**base, "scope": "Cluster"}, _attrs())


def test_object_selector_sees_the_eviction_not_the_pod() -> None:
    hook = {"objectSelector": {"matchLabels": {"drainsafe.io/guard": "true"}}}
    assert not aw.object_matches(hook, _attrs())
    assert aw.object_matches(hook, _attrs(meta={"labels": {"drainsafe.io/guard": "true"}}))
    assert aw.object_matches({"objectSelector": {}}, _attrs())


def test_to_status_err_keeps_codes_from_400_and_prefixes_the_message() -> None:
    err = aw.denial("guard.example.io", {"code": 429, "reason": "TooManyRequests",
                                         "message": "wait",
                                         "details": {"retryAfterSeconds": 3}})
    assert (err.code, err.retry_after) == (429, 3)
    assert err.message == 'admission webhook "guard.example.io" denied the request: wait'
    assert aw.denial("h", {"code": 200, "message": "x"}).code == 400
    assert aw.denial("h", None).message == \
        'admission webhook "h" denied the request without explanation'
    assert aw.denial("h", {"reason": "Nope"}).message.endswith("request: Nope")


def test_response_checks() -> None:
    ok = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "response": {"uid": "u", "allowed": True, "warnings": ["w"]}}
    assert aw.read_response(ok, "u") == aw.Verdict(True, None, ("w",))
    with pytest.raises(aw.CallError, match=r"expected response\.uid"):
        aw.read_response(ok, "v")
    with pytest.raises(aw.CallError, match="Kind=AdmissionReview"):
        aw.read_response({**ok, "apiVersion": "admission.k8s.io/v1beta1"}, "u")
    with pytest.raises(aw.CallError, match="absent"):
        aw.read_response({**ok, "response": None}, "u")


# ---- against the lab -----------------------------------------------------------------

def _webhook_config(path: str, ca: bytes, **hook: Any) -> dict[str, Any]:
    webhook: dict[str, Any] = {
        "name": "peer.example.io",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 2,
        "clientConfig": {"service": {"namespace": "hooks", "name": "peer", "path": path},
                         "caBundle": base64.b64encode(ca).decode()},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": ["pods/eviction"]}],
        "namespaceSelector": {"matchLabels": {"guarded": "yes"}},
    }
    webhook.update(hook)
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "peer"}, "webhooks": [webhook]}


def _peer_manifests(cert_dir: pathlib.Path, log: pathlib.Path) -> list[dict[str, Any]]:
    labels = {"app": "peer"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "hooks"}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "peer", "namespace": "hooks"},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"containers": [{
                 "name": "peer", "image": "lab/python",
                 "command": [sys.executable, str(PEER)],
                 "args": ["--host", "$(POD_IP)", "--port", "8443",
                          "--cert", str(cert_dir / "tls.crt"),
                          "--key", str(cert_dir / "tls.key"), "--log", str(log)],
                 "env": [{"name": "POD_IP",
                          "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                 "ports": [{"name": "https", "containerPort": 8443}],
                 "readinessProbe": {"tcpSocket": {"port": 8443}, "periodSeconds": 1},
             }]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "peer", "namespace": "hooks"},
         "spec": {"selector": labels,
                  "ports": [{"name": "https", "port": 443, "targetPort": "https"}]}},
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": "guarded", "labels": {"guarded": "yes"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "open"}},
    ]


async def _running_pod(lab: Lab, namespace: str, app: str) -> str:
    cp = lab.control_plane
    assert cp is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while loop.time() < deadline:
        for pod in cp.store.items(aw.BY_KEY["pods"], namespace):
            if ((pod["metadata"].get("labels") or {}).get("app") == app
                    and not pod["metadata"].get("deletionTimestamp")
                    and pod.get("status", {}).get("phase") == "Running"):
                return str(pod["metadata"]["name"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"no running pod of {namespace}/{app}")


async def _evict(lab: Lab, namespace: str, pod: str, *, dry_run: bool = False
                 ) -> httpx.Response:
    cp = lab.control_plane
    assert cp is not None
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": pod, "namespace": namespace}}
    if dry_run:
        body["deleteOptions"] = {"dryRun": ["All"]}
    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(cp.ca_path)),
                                 headers={"Authorization": f"Bearer {cp.token}"}) as client:
        return await client.post(
            f"{cp.url}/api/v1/namespaces/{namespace}/pods/{pod}/eviction", json=body,
            timeout=30)


def _reviews(log: pathlib.Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


async def test_eviction_webhooks_as_kube_apiserver_calls_them(
        lab: Lab, tmp_path: pathlib.Path) -> None:
    cert = make_serving_cert(service_dns_names("peer", "hooks"))
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    (cert_dir / "tls.crt").write_bytes(cert.cert_pem)
    (cert_dir / "tls.key").write_bytes(cert.key_pem)
    log = tmp_path / "reviews.jsonl"
    await lab.apply(*_peer_manifests(cert_dir, log))
    await lab.apply(virtual_deployment("victim", namespace="guarded", replicas=2),
                    virtual_deployment("free", namespace="open", replicas=1))
    await lab.wait_available("hooks", "peer", timeout=60)
    await lab.wait_available("guarded", "victim", timeout=60)
    await lab.wait_available("open", "free", timeout=60)

    # A 429 denial keeps its code, message prefix and Retry-After; the review is v1.
    await lab.apply(_webhook_config("/deny429", cert.ca_pem))
    victim = await _running_pod(lab, "guarded", "victim")
    resp = await _evict(lab, "guarded", victim)
    assert resp.status_code == 429, resp.text
    status = resp.json()
    assert status["message"] == ('admission webhook "peer.example.io" denied the request: '
                                 "waiting for a stand-in")
    assert status["reason"] == "TooManyRequests"
    assert resp.headers["retry-after"] == "7"
    (sent,) = _reviews(log)
    assert sent["path"] == "/deny429" and sent["query"] == "timeout=2s"
    req = sent["body"]["request"]
    assert sent["body"]["apiVersion"] == "admission.k8s.io/v1"
    assert (req["operation"], req["subResource"], req["name"], req["namespace"]) == \
        ("CREATE", "eviction", victim, "guarded")
    assert req["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert req["kind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert req["object"]["kind"] == "Eviction" and req["oldObject"] is None
    assert req["dryRun"] is False
    assert lab.control_plane is not None
    assert lab.control_plane.store.peek(aw.BY_KEY["pods"], "guarded", victim) is not None

    # The namespaceSelector: a namespace without the label is not asked.
    free = await _running_pod(lab, "open", "free")
    resp = await _evict(lab, "open", free)
    assert resp.status_code == 201, resp.text
    assert len(_reviews(log)) == 1

    # An objectSelector on the pod's labels never matches an eviction (the object is the
    # Eviction): the webhook is not called and the eviction goes ahead.
    await lab.apply(_webhook_config("/deny429", cert.ca_pem, objectSelector={
        "matchLabels": {"app": "victim"}}))
    resp = await _evict(lab, "guarded", victim)
    assert resp.status_code == 201, resp.text
    assert len(_reviews(log)) == 1

    # A Status without a code becomes 400.
    await lab.apply(_webhook_config("/deny-no-code", cert.ca_pem, objectSelector=None))
    victim = await _running_pod(lab, "guarded", "victim")
    resp = await _evict(lab, "guarded", victim)
    assert resp.status_code == 400
    assert resp.json()["message"].endswith("denied the request: no")

    # Warnings come back as Warning headers on an allowed eviction.
    await lab.apply(_webhook_config("/warn", cert.ca_pem))
    resp = await _evict(lab, "guarded", victim, dry_run=True)
    assert resp.status_code == 201, resp.text
    assert resp.headers.get_list("warning") == [
        '299 - "first warning"', '299 - "second \\"quoted\\" warning"']
    assert _reviews(log)[-1]["body"]["request"]["dryRun"] is True

    # A webhook with side effects fails dry-run requests.
    await lab.apply(_webhook_config("/allow", cert.ca_pem, sideEffects="Some"))
    resp = await _evict(lab, "guarded", victim, dry_run=True)
    assert resp.status_code == 400
    assert "does not support dry run" in resp.json()["message"]

    # timeoutSeconds bounds the call: Ignore lets the eviction through, Fail answers 500.
    await lab.apply(_webhook_config("/slow", cert.ca_pem, sideEffects="None",
                                    timeoutSeconds=1, failurePolicy="Fail"))
    started = time.monotonic()
    resp = await _evict(lab, "guarded", victim, dry_run=True)
    assert time.monotonic() - started < 5  # cut at timeoutSeconds: /slow answers after 5 s
    assert resp.status_code == 500
    assert resp.json()["message"].startswith(
        'Internal error occurred: failed calling webhook "peer.example.io"')
    await lab.apply(_webhook_config("/slow", cert.ca_pem, timeoutSeconds=1,
                                    failurePolicy="Ignore"))
    started = time.monotonic()
    resp = await _evict(lab, "guarded", victim, dry_run=True)
    assert time.monotonic() - started < 5
    assert resp.status_code == 201

    # An answer for another request, and a certificate the caBundle does not vouch for,
    # are call failures.
    await lab.apply(_webhook_config("/bad-uid", cert.ca_pem, timeoutSeconds=2))
    resp = await _evict(lab, "guarded", victim, dry_run=True)
    assert resp.status_code == 500 and "expected response.uid" in resp.json()["message"]
    other = make_serving_cert(service_dns_names("peer", "hooks"))
    await lab.apply(_webhook_config("/allow", other.ca_pem))
    resp = await _evict(lab, "guarded", victim, dry_run=True)
    assert resp.status_code == 500 and "CERTIFICATE_VERIFY_FAILED" in resp.json()["message"]

    # No ready endpoint behind the Service: Fail answers 500 at once, Ignore goes ahead.
    await lab.apply(_webhook_config("/allow", cert.ca_pem))
    cp = lab.control_plane
    assert cp is not None
    (peer,) = [m for m in _peer_manifests(cert_dir, log) if m["kind"] == "Deployment"]
    peer["spec"]["replicas"] = 0
    await lab.apply(peer)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while any((ep.get("conditions") or {}).get("ready") is not False
              for es in cp.store.items(aw.SLICES, "hooks") for ep in es.get("endpoints") or []):
        assert loop.time() < deadline, "the peer's endpoints never went unready"
        await asyncio.sleep(0.05)
    resp = await _evict(lab, "guarded", victim, dry_run=True)
    assert resp.status_code == 500
    assert 'no endpoints available for service "peer"' in resp.json()["message"]
    await lab.apply(_webhook_config("/allow", cert.ca_pem, failurePolicy="Ignore"))
    resp = await _evict(lab, "guarded", victim)
    assert resp.status_code == 201


@pytest.mark.parametrize("version", ["1.27", "1.33"])
async def test_kubectl_drain_shows_the_webhooks_429_and_retries(
        lab: Lab, tmp_path: pathlib.Path, version: str) -> None:
    binary = KUBECTL / f"kubectl.{version}"
    if not binary.exists():
        pytest.skip(f"{binary} is not installed")
    cert = make_serving_cert(service_dns_names("peer", "hooks"))
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    (cert_dir / "tls.crt").write_bytes(cert.cert_pem)
    (cert_dir / "tls.key").write_bytes(cert.key_pem)
    log = tmp_path / "reviews.jsonl"
    await lab.apply(*_peer_manifests(cert_dir, log))
    await lab.wait_available("hooks", "peer", timeout=60)
    victim_deploy = virtual_deployment("victim", namespace="guarded", replicas=1)
    await lab.apply(victim_deploy)
    await lab.wait_available("guarded", "victim", timeout=60)
    # Without retryAfterSeconds: with a Retry-After header client-go itself sleeps and
    # resends (rest/request.go checkWait, up to 10 times) and kubectl prints nothing.
    await lab.apply(_webhook_config("/hold", cert.ca_pem))
    victim = await _running_pod(lab, "guarded", "victim")
    cp = lab.control_plane
    assert cp is not None
    node = cp.store.get(aw.BY_KEY["pods"], "guarded", victim)["spec"]["nodeName"]
    proc = await asyncio.create_subprocess_exec(
        str(binary), f"--kubeconfig={lab.kubeconfig}", f"--cache-dir={tmp_path / 'cache'}",
        "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
        "--pod-selector=app=victim", "--timeout=40s",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    # Let kubectl see the 429 once, then let the webhook allow.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not _reviews(log):
        assert loop.time() < deadline, "kubectl never reached the webhook"
        await asyncio.sleep(0.05)
    await lab.apply(_webhook_config("/allow", cert.ca_pem))
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    text = out.decode() + err.decode()
    assert proc.returncode == 0, text
    assert ('admission webhook "peer.example.io" denied the request: waiting for a stand-in'
            in text)
    assert "will retry after 5s" in text
    assert f"pod/{victim} evicted" in text
