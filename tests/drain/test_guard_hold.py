"""drainsafe's own Evictor meets the eviction guard's hold: a 429 with the cause
drainsafe.io/EvictionGuardHold is reported as "held by the eviction guard", counted apart
from a budget's 429 and from API throttling, and retried until the guard allows.

The hold comes from a real HTTPS admission webhook pod (tests/drain/guard_peer.py, the
guard's answer without its decision) through the lab API server, which passes the
webhook's Status through with its details as kube-apiserver does (apiserver
pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr).
"""

from __future__ import annotations

import base64
import json
import pathlib
import sys
from typing import Any

import pytest

from drainsafe.controller.certs import make_serving_cert, service_dns_names
from drainsafe.drain.execute import DrainSettings, NodeDrainer
from drainsafe.drain.filters import DrainOptions
from drainsafe.kube import KubeClient, api_path
from drainsafe.lab.cluster import virtual_deployment

from .labkit import gpu_lab, node_of, pods_of

PEER = pathlib.Path(__file__).with_name("guard_peer.py")
HOLDS = 2

pytestmark = pytest.mark.e2e


def peer(cert_dir: pathlib.Path, log: pathlib.Path, node: str) -> list[dict[str, Any]]:
    labels = {"app": "guard"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "hooks"}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "guard", "namespace": "hooks"},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [{
                 "name": "guard", "image": "lab/python",
                 "command": [sys.executable, str(PEER)],
                 "args": ["--host", "$(POD_IP)", "--port", "8443", "--hold", str(HOLDS),
                          "--cert", str(cert_dir / "tls.crt"),
                          "--key", str(cert_dir / "tls.key"), "--log", str(log)],
                 "env": [{"name": "POD_IP",
                          "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                 "ports": [{"name": "https", "containerPort": 8443}],
                 "readinessProbe": {"tcpSocket": {"port": 8443}, "periodSeconds": 1},
             }]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "guard", "namespace": "hooks"},
         "spec": {"selector": labels,
                  "ports": [{"name": "https", "port": 443, "targetPort": "https"}]}},
    ]


def webhook(ca: bytes) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "guard"},
            "webhooks": [{
                "name": "evictions.drainsafe.io", "admissionReviewVersions": ["v1"],
                "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 5,
                "clientConfig": {"service": {"namespace": "hooks", "name": "guard",
                                             "path": "/review"},
                                 "caBundle": base64.b64encode(ca).decode()},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""],
                           "apiVersions": ["v1"], "resources": ["pods/eviction"]}]}]}


async def test_a_guard_hold_is_reported_as_held_not_as_throttling(
        tmp_path: pathlib.Path) -> None:
    cert = make_serving_cert(service_dns_names("guard", "hooks"))
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    (cert_dir / "tls.crt").write_bytes(cert.cert_pem)
    (cert_dir / "tls.key").write_bytes(cert.key_pem)
    log = tmp_path / "reviews.jsonl"
    async with gpu_lab(tmp_path, nodes=3) as lab, \
            KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        nodes, _ = await client.list(api_path("v1", "nodes"))
        hooks_node = sorted(n["metadata"]["name"] for n in nodes)[0]
        await lab.apply(*peer(cert_dir, log, hooks_node))
        w = virtual_deployment("w", replicas=2)
        # Keep the workload off the webhook's node, so draining it leaves the webhook up.
        w["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                      "values": [hooks_node]}]}]}}}
        await lab.apply(w)
        await lab.wait_available("hooks", "guard", timeout=60)
        await lab.wait_available("default", "w", timeout=60)
        await lab.apply(webhook(cert.ca_pem))
        node = await node_of(client, "w")
        [old] = [p for p in await pods_of(client, "w") if p["spec"]["nodeName"] == node]
        said: list[str] = []
        settings = DrainSettings(options=DrainOptions(strategy="evict"), timeout=120)
        report = await NodeDrainer(client, node, settings, on_progress=said.append).run()
        assert report.ok, report.failure
        [rep] = [p for p in report.pods if p.name == old["metadata"]["name"]]
        assert rep.outcome == "evicted"
        assert rep.guard_holds == HOLDS
        assert rep.rate_429s == 0 and rep.budget_429s == 0 and rep.transient_errors == 0
        assert rep.detail.startswith("held by the eviction guard: held until a stand-in")
        assert any(m.startswith(f"default/{rep.name}: held by the eviction guard")
                   for m in said), said
        reviews = [json.loads(line) for line in log.read_text().splitlines()]
        assert [r["pod"] for r in reviews] == [rep.name] * (HOLDS + 1)
