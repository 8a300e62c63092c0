"""`kubectl apply -k deploy/controller` on the lab: two controller replicas as lab pods,
the real webhook path (Service -> ready endpoint -> HTTPS with the controller's own CA)."""

from __future__ import annotations

import asyncio
import base64
import os
import pathlib
import ssl
import time

import httpx
import pytest

from drainsafe.kube import GuardHeld, KubeClient
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab
from drainsafe.lab.node.volumes import pod_dir

from .guardlab import (
    DEPLOY,
    KUBECTL_DIR,
    guarded_deployment,
    kubectl,
    lab_path_env,
    pdb,
    ready_pods,
    until,
)

pytestmark = pytest.mark.e2e
VWC = BY_KEY["admissionregistration.k8s.io/validatingwebhookconfigurations"]
LEASES = BY_KEY["coordination.k8s.io/leases"]
SECRETS = BY_KEY["secrets"]
SLICES = BY_KEY["discovery.k8s.io/endpointslices"]
EVENTS = BY_KEY["events"]
PODS = BY_KEY["pods"]


@pytest.fixture
async def guard_lab(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    async with Lab(tmp_path / "lab", nodes=3, gpus_per_node=1, propagation_seconds=0.2,
                   restart_backoff=0.5) as lab:
        code, out = await kubectl(lab, "1.33", "apply", "-k", str(DEPLOY))
        assert code == 0, out
        await lab.wait_available("drainsafe-system", "drainsafe-controller", timeout=90)
        yield lab


async def _ca_written(lab: Lab) -> None:
    assert lab.control_plane is not None
    store = lab.control_plane.store

    def written() -> bool:
        config = store.peek(VWC, "", "drainsafe-guard")
        return bool(config and config["webhooks"][0]["clientConfig"].get("caBundle"))

    await until(written, timeout=30, what="the controller's CA in the webhook configuration")
    secret = store.get(SECRETS, "drainsafe-system", "drainsafe-controller-tls")
    config = store.get(VWC, "", "drainsafe-guard")
    assert config["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert base64.b64decode(secret["data"]["ca.crt"]).startswith(b"-----BEGIN CERTIFICATE")


async def evict(lab: Lab, pod: str, namespace: str = "default", *,
                dry_run: bool = False) -> tuple[int, str]:
    """POST the Eviction, as every drainer sends it; (HTTP code, decoded message)."""
    cp = lab.control_plane
    assert cp is not None
    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(cp.ca_path)),
                                 headers={"Authorization": f"Bearer {cp.token}"}) as client:
        resp = await client.post(
            f"{cp.url}/api/v1/namespaces/{namespace}/pods/{pod}/eviction",
            params={"dryRun": "All"} if dry_run else None,
            json={"apiVersion": "policy/v1", "kind": "Eviction",
                  "metadata": {"name": pod, "namespace": namespace}}, timeout=30)
    return resp.status_code, str(resp.json().get("message", ""))


async def test_installed_with_kubectl_apply_k_holds_a_guarded_eviction(guard_lab: Lab) -> None:
    lab = guard_lab
    await _ca_written(lab)
    assert lab.control_plane is not None
    store = lab.control_plane.store
    await until(lambda: bool((store.peek(LEASES, "drainsafe-system", "drainsafe-controller")
                              or {}).get("spec", {}).get("holderIdentity")),
                timeout=30, what="a leader")
    # Three GPU pods on three one-GPU nodes: no room for a stand-in, so the guard holds
    # (until --hold-limit) whether or not this build can surge.
    await lab.apply(guarded_deployment(replicas=3), pdb())
    await lab.wait_available("default", "llm", timeout=60)
    victim = ready_pods(lab, "llm")[0]["metadata"]["name"]
    code, message = await evict(lab, victim)
    assert code == 429, message
    assert message.startswith('admission webhook "guard.drainsafe.io" denied the request: '
                              "drainsafe guard: no room for a stand-in of deployment "
                              f"default/llm on another node; holding the eviction of "
                              f"default/{victim}")
    held = store.get(PODS, "default", victim)
    assert "drainsafe.io/eviction-held-since" in held["metadata"]["annotations"]
    # drainsafe's own client tells the guard's hold from API throttling: the cause in the
    # webhook's Status comes through the API server's denial.
    async with KubeClient.from_kubeconfig(str(lab.kubeconfig)) as client:
        with pytest.raises(GuardHeld) as info:
            await client.evict("default", victim, uid=None)
    assert info.value.code == 429
    assert info.value.hold_message.startswith(
        "drainsafe guard: no room for a stand-in of deployment default/llm")
    # Prometheus metrics of the replicas: one first hold, counted by whichever answered.
    holds = 0.0
    async with httpx.AsyncClient(timeout=10) as client:
        for pod in store.items(PODS, "drainsafe-system"):
            text = (await client.get(f"http://{pod['status']['podIP']}:9090/metrics")).text
            holds += sum(float(line.split()[-1]) for line in text.splitlines()
                         if line.startswith("drainsafe_guard_holds_total "))
    assert holds == 1
    # A pod that did not opt in is let through at once (its PDB allows one).
    plain = guarded_deployment("plain", replicas=2, gpus=0)
    del plain["spec"]["template"]["metadata"]["labels"]["drainsafe.io/guard"]
    await lab.apply(plain, pdb("plain"))
    await lab.wait_available("default", "plain", timeout=60)
    code, message = await evict(lab, ready_pods(lab, "plain")[0]["metadata"]["name"])
    assert code == 201, message


async def test_no_controller_running_means_plain_budget_behaviour(guard_lab: Lab) -> None:
    lab = guard_lab
    await lab.apply(guarded_deployment(replicas=2), pdb())
    await lab.wait_available("default", "llm", timeout=60)
    assert lab.control_plane is not None
    store = lab.control_plane.store
    # Dry-run evictions call the webhook (sideEffects NoneOnDryRun), so the API server
    # keeps connections alive to the replicas that answered.
    calls = lab.control_plane.api.webhooks.calls
    replicas = [(p["metadata"]["name"], p["metadata"]["uid"])
                for p in store.items(PODS, "drainsafe-system")]
    for pod in ready_pods(lab, "llm") * 3:
        code, message = await evict(lab, pod["metadata"]["name"], dry_run=True)
        assert code == 201, message
    assert lab.control_plane.api.webhooks.calls == calls + 6
    # Each replica's log, open before it stops: the kubelet removes the pod's directory
    # once the pod is gone, and an open file is still read whole.
    logs = {name: (pod_dir(lab.state_dir, "drainsafe-system", name, uid)
                   / "controller.log").open() for name, uid in replicas}
    code, out = await kubectl(lab, "1.33", "-n", "drainsafe-system", "scale",
                              "deployment/drainsafe-controller", "--replicas=0")
    assert code == 0, out
    await until(lambda: not any(ep.get("addresses") for es in store.items(
        SLICES, "drainsafe-system") for ep in es.get("endpoints") or []),
        timeout=60, what="the controller's endpoints to go")
    await until(lambda: not list(store.items(PODS, "drainsafe-system")), timeout=60,
                what="the controller pods gone")
    # Each replica stopped without waiting out its graceful-shutdown timeout for a
    # keep-alive connection the API server left open (as Go's transport would not).
    for name, log in logs.items():
        with log:
            assert "timeout graceful shutdown exceeded" not in log.read(), name
    first, second = (p["metadata"]["name"] for p in ready_pods(lab, "llm"))
    started = time.monotonic()
    code, message = await evict(lab, first)
    assert code == 201, message  # failurePolicy Ignore: the budget decides
    code, message = await evict(lab, second)
    assert code == 429 and "disruption budget" in message  # ... and it still does
    assert time.monotonic() - started < 5  # well within timeoutSeconds


async def test_a_hold_that_cannot_succeed_is_released_with_an_event(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(f"""
resources: [{os.path.relpath(DEPLOY, overlay)}]
patches:
  - target: {{kind: Deployment, name: drainsafe-controller}}
    patch: |
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --hold-limit=2
""")
    # Two GPU nodes, both taken: no room for a stand-in anywhere.
    async with Lab(tmp_path / "lab", nodes=2, gpus_per_node=1, propagation_seconds=0.2,
                   restart_backoff=0.5) as lab:
        code, out = await kubectl(lab, "1.33", "apply", "-k", str(overlay))
        assert code == 0, out
        await lab.wait_available("drainsafe-system", "drainsafe-controller", timeout=90)
        await _ca_written(lab)
        await lab.apply(guarded_deployment(replicas=2), pdb())
        await lab.wait_available("default", "llm", timeout=60)
        victim = ready_pods(lab, "llm")[0]["metadata"]["name"]
        code, message = await evict(lab, victim)
        assert code == 429 and "no room for a stand-in" in message, message
        await asyncio.sleep(2.5)
        code, message = await evict(lab, victim)
        assert code == 201, message  # released; the budget allowed one
        assert lab.control_plane is not None
        store = lab.control_plane.store
        reasons = [(e["involvedObject"]["kind"], e["reason"], e["message"])
                   for e in store.items(EVENTS, "default")
                   if e["reason"] == "EvictionHoldReleased"]
        await until(lambda: len([e for e in store.items(EVENTS, "default")
                                 if e["reason"] == "EvictionHoldReleased"]) >= 2,
                    timeout=10, what="the release events")
        reasons = [(e["involvedObject"]["kind"], e["message"])
                   for e in store.items(EVENTS, "default")
                   if e["reason"] == "EvictionHoldReleased"]
        assert {k for k, _ in reasons} == {"Pod", "Deployment"}
        assert all("no room for a stand-in" in m for _, m in reasons), reasons
