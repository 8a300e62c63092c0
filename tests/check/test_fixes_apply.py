"""Every fix snippet, applied as it stands, removes its finding and adds none.

Each snippet is applied to its object as a strategic merge patch (the lab's implementation of
kubernetes/apimachinery's strategicpatch); a snippet that is a whole object is added (and a
bare Pod's replacement takes its place). The result is checked again: the finding is gone
and no finding appears that was not there before. A snippet with no YAML in it (only
comments) is advice with no manifest change, and says so.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from check_manifests import (
    SLEEP10,
    check,
    container,
    deployment,
    hpa,
    lws,
    pdb,
    service,
)

from drainsafe.check.findings import Finding
from drainsafe.check.rules import all_rules
from drainsafe.lab.apiserver.patch import strategic_merge

Obj = dict[str, Any]
VLLM_ARGS = ["--model", "m", "--port", "8000"]
SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "m"]


def gpu(c: Obj) -> Obj:
    c["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    return c


def bare_pod() -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "solo", "namespace": "default", "labels": {"app": "solo"}},
            "spec": {"terminationGracePeriodSeconds": 60,
                     "containers": [container(pre_stop=SLEEP10)]}}


def scenarios() -> list[tuple[str, list[Obj], dict[str, Any]]]:
    """(rule, objects, context) for every rule."""
    return [
        ("grace-budget", [deployment(grace=60, containers=[container(
            command=["uvicorn", "app:app", "--timeout-graceful-shutdown", "90"],
            pre_stop=SLEEP10)]), service(), pdb()], {}),
        ("shutdown-deadline-short", [deployment(grace=200, containers=[container(
            image="nvcr.io/nvidia/tritonserver:24.08-py3",
            args=["tritonserver", "--model-repository=/m"], pre_stop=SLEEP10)]),
            service(), pdb()], {"max_request_seconds": 90}),
        ("shutdown-deadline-short", [deployment(grace=200, containers=[container(
            image="ghcr.io/huggingface/text-generation-inference:2.4.1",
            args=["--model-id", "m"], pre_stop=SLEEP10)]), service(), pdb()],
         {"max_request_seconds": 120}),
        ("grace-default", [deployment(), service(), pdb()], {"max_request_seconds": 90}),
        ("grace-default", [deployment(), service(), pdb()], {}),
        ("prestop-missing", [deployment(grace=60, containers=[container()]), service(), pdb()],
         {}),
        ("prestop-exceeds-grace", [deployment(grace=20, containers=[container(
            pre_stop={"exec": {"command": ["sleep", "30"]}})]), service(), pdb()], {}),
        ("sleep-action-unsupported", [deployment(grace=60), service(), pdb()],
         {"cluster_version": (1, 29)}),
        ("exec-sleep-no-shell", [deployment(grace=60, containers=[container(
            image="gcr.io/distroless/python3", pre_stop={"exec": {"command": [
                "sh", "-c", "sleep 10"]}})]), service(), pdb()], {}),
        ("signal-not-forwarded", [deployment(grace=60, containers=[container(
            command=["sh", "-c"], args=["pip install x; uvicorn app:app"],
            pre_stop=SLEEP10)]), service(), pdb()], {}),
        ("server-aborts-on-sigterm", [deployment(grace=120, containers=[container(
            image="vllm/vllm-openai:v0.18.0", args=VLLM_ARGS, pre_stop=SLEEP10)]),
            service(), pdb()], {}),
        ("server-aborts-on-sigterm", [deployment(grace=60, containers=[container(
            image="vllm/vllm-openai:v0.18.0", args=VLLM_ARGS, pre_stop=SLEEP10)]),
            service(), pdb()], {"max_request_seconds": 90}),
        ("server-aborts-on-sigterm", [deployment(grace=120, containers=[container(
            image="vllm/vllm-openai:v0.11.0", args=VLLM_ARGS,
            readiness={"tcpSocket": {"port": 8000}})]), service(), pdb()], {}),
        ("server-aborts-on-sigterm", [deployment(grace=120, containers=[container(
            command=["vllm", "serve"], args=VLLM_ARGS, pre_stop=SLEEP10)]),
            service(), pdb()], {}),
        ("server-aborts-on-sigterm", [deployment(grace=120, containers=[container(
            image="vllm/vllm-openai:v0.18.0", command=["/bin/sh", "-c"],
            args=["exec vllm serve m --port 8000"], pre_stop=SLEEP10)]), service(), pdb()],
         {}),
        ("shutdown-deadline-short", [deployment(grace=200, containers=[container(
            command=["vllm", "serve", "m", "--shutdown-timeout=30"], args=["--port", "8000"],
            pre_stop=SLEEP10)]), service(), pdb()], {"max_request_seconds": 90}),
        ("grace-exceeds-cap", [deployment(grace=900), service(), pdb()],
         {"max_grace_seconds": 600}),
        ("pdb-invalid", [deployment(grace=60), service(), {
            **pdb(), "spec": {"minAvailable": 1, "maxUnavailable": 1,
                              "selector": {"matchLabels": {"app": "web"}}}}], {}),
        ("pdb-wedge", [deployment(grace=60), service(), pdb(min_available=2)], {}),
        ("pdb-wedge", [deployment(grace=60), service(), pdb(max_unavailable=0)], {}),
        ("pdb-overlap", [deployment(grace=60), service(), pdb(), pdb("web-2",
                                                                      selector={"app": "web"})],
         {}),
        ("pdb-selects-nothing", [deployment(grace=60), service(),
                                 pdb(selector={"app": "wbe"})], {}),
        ("pdb-prefer-max-unavailable", [deployment(grace=60, replicas=3), service(),
                                        pdb(min_available=2)], {}),
        ("pdb-missing", [deployment(grace=60), service()], {}),
        ("single-replica", [deployment(grace=60, replicas=1), service(), pdb()], {}),
        ("single-replica", [deployment(grace=60, replicas=1), hpa(min_replicas=1), service(),
                            pdb()], {}),
        ("sidecar-ordering", [deployment(grace=60, containers=[
            container(pre_stop=SLEEP10),
            container("istio-proxy", image="istio/proxyv2:1.22", port=None)]),
            service(), pdb()], {}),
        ("sidecar-ordering", [deployment(grace=60, containers=[
            container(pre_stop=SLEEP10),
            container("istio-proxy", image="istio/proxyv2:1.22", port=None)]),
            service(), pdb()], {"cluster_version": (1, 28)}),
        ("emptydir-data", [deployment(grace=60, volumes=[{"name": "shm", "emptyDir": {}}]),
                           service(), pdb()], {}),
        ("unmanaged-pod", [bare_pod(), service("solo"), pdb("solo")], {}),
        ("readiness-missing", [deployment(grace=60, containers=[container(
            pre_stop=SLEEP10, ready_probe=False)]), service(), pdb()], {}),
        ("readiness-missing", [deployment(grace=120, containers=[container(
            image="vllm/vllm-openai:v0.18.0", args=[*VLLM_ARGS, "--shutdown-timeout=90"],
            pre_stop=SLEEP10, ready_probe=False)]), service(), pdb()], {}),
        ("readiness-slow", [deployment(grace=60, containers=[container(
            pre_stop={"exec": {"command": ["sleep", "1"]}},
            readiness={"httpGet": {"path": "/ready", "port": 8000}})]),
            service(type="LoadBalancer"), pdb()], {}),
        ("liveness-on-readiness", [deployment(grace=60, containers=[container(
            pre_stop=SLEEP10, readiness={"httpGet": {"path": "/ready", "port": 8000}},
            liveness={"httpGet": {"path": "/ready", "port": 8000}})]), service(), pdb()], {}),
        ("liveness-on-readiness", [deployment(grace=120, containers=[container(
            command=SGLANG, pre_stop=SLEEP10,
            readiness={"httpGet": {"path": "/v1/models", "port": 8000}},
            liveness={"httpGet": {"path": "/health", "port": 8000}})]), service(), pdb()],
         {"max_request_seconds": 90, "cluster_version": (1, 20)}),
        ("deadline-flag-unreleased", [deployment(grace=120, containers=[container(
            image="vllm/vllm-openai:v0.11.0", args=[*VLLM_ARGS, "--shutdown-timeout=90"],
            pre_stop=SLEEP10)]), service(), pdb()], {}),
        ("deadline-flag-unreleased", [deployment(grace=120, containers=[container(
            image="ghcr.io/huggingface/text-generation-inference:3.2.1",
            args=["--model-id", "m", "--graceful-termination-timeout", "60"],
            pre_stop=SLEEP10)]), service(), pdb()], {}),
        ("readiness-not-drain-aware", [deployment(grace=60, containers=[container(
            command=["drainsafe", "run", "--preset", "vllm", "--", "vllm", "serve", "m"],
            readiness={"tcpSocket": {"port": 8000}, "periodSeconds": 2})]), service(), pdb()],
         {}),
        ("rollout-unavailable", [deployment(grace=60, strategy={"type": "Recreate"}),
                                 service(), pdb()], {}),
        ("gpu-surge", [deployment(grace=60, containers=[gpu(container(pre_stop=SLEEP10))]),
                       service(), pdb()], {}),
        ("pdb-upgrade-slow", [
            deployment(grace=60, replicas=300, containers=[gpu(container(pre_stop=SLEEP10))],
                       strategy={"type": "RollingUpdate",
                                 "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                       annotations={"drainsafe.io/startup-seconds": "600"}),
            service(), pdb()], {}),
        ("lws-pdb-missing", [lws(), service("llm", selector={"role": "leader"})], {}),
        ("lws-pdb-partial-group", [lws(groups=3, size=4), service(
            "llm", selector={"role": "leader"}), pdb("llm", max_unavailable=6)], {}),
        ("lws-pdb-partial-group", [lws(groups=3, size=4), service(
            "llm", selector={"role": "leader"}), pdb("llm", min_available=6)], {}),
        ("lws-worker-grace", [lws(leader=[container(command=[
            "uvicorn", "app:app", "--timeout-graceful-shutdown", "90"], pre_stop=SLEEP10)],
            leader_grace=120, worker_grace=60), service("llm", selector={"role": "leader"}),
            pdb("llm")], {}),
    ]


def _key(f: Finding) -> tuple[str, str, str, str]:
    return (f.rule, f.object.kind, f.object.namespace, f.object.name)


def _same(obj: Obj, kind: str, namespace: str, name: str) -> bool:
    meta = obj.get("metadata") or {}
    return (obj.get("kind"), meta.get("namespace") or "default", meta.get("name")) == (
        kind, namespace or "default", name)


def apply(objects: list[Obj], finding: Finding) -> list[Obj] | None:
    """The objects with the finding's fix applied; None for advice with no YAML."""
    docs = [d for d in yaml.safe_load_all(finding.fix) if d is not None]
    if not docs:
        return None
    out = copy.deepcopy(objects)
    ref = finding.object
    for doc in docs:
        if "apiVersion" in doc and "kind" in doc:  # a whole object
            if ref.kind == "Pod" and doc["kind"] != "Pod":
                out = [o for o in out if not _same(o, ref.kind, ref.namespace, ref.name)]
            meta = doc["metadata"]
            out = [o for o in out if not _same(o, doc["kind"], meta.get("namespace", ""),
                                               meta["name"])]
            out.append(doc)
            continue
        targets = [i for i, o in enumerate(out) if _same(o, ref.kind, ref.namespace, ref.name)]
        assert len(targets) == 1, (ref, finding.fix)
        out[targets[0]] = strategic_merge(out[targets[0]], doc)
    return out


CASES = scenarios()


def test_every_rule_has_a_scenario() -> None:
    assert {rule for rule, _, _ in CASES} == set(all_rules())


@pytest.mark.parametrize("rule, objects, context", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_fix_applied_removes_finding_and_adds_none(rule: str, objects: list[Obj],
                                                   context: dict[str, Any]) -> None:
    before = check(*objects, **context)
    targets = [f for f in before if f.rule == rule]
    assert targets, f"scenario does not trigger {rule}: {[f.rule for f in before]}"
    for finding in targets:
        fixed = apply(objects, finding)
        if fixed is None:
            assert all(line.startswith("#") for line in finding.fix.splitlines()), finding.fix
            continue
        after = check(*fixed, **context)
        left = [f for f in after if _key(f) == _key(finding)]
        assert not left, (finding.fix, [f.message for f in left])
        new = {_key(f) for f in after} - {_key(f) for f in before}
        assert not new, (finding.fix, [f"{f.rule}: {f.message}" for f in after
                                       if _key(f) in new])
