"""Builders for test manifests (written here), and a helper that checks them end to end."""

from __future__ import annotations

from typing import Any

import yaml

from drainsafe.check.context import Context
from drainsafe.check.engine import check_documents
from drainsafe.check.findings import Finding
from drainsafe.check.load import Loaded, SourceText, parse


def container(name: str = "server", *, image: str = "example/server:1", port: int | None = 8000,
              command: list[str] | None = None, args: list[str] | None = None,
              pre_stop: dict[str, Any] | None = None, readiness: dict[str, Any] | None = None,
              liveness: dict[str, Any] | None = None, gpus: int = 0,
              ready_probe: bool = True) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image}
    if command is not None:
        c["command"] = command
    if args is not None:
        c["args"] = args
    if port is not None:
        c["ports"] = [{"containerPort": port}]
    if pre_stop is not None:
        c["lifecycle"] = {"preStop": pre_stop}
    if readiness is not None:
        c["readinessProbe"] = readiness
    elif ready_probe and port is not None:
        c["readinessProbe"] = {"httpGet": {"path": "/ready", "port": port},
                               "periodSeconds": 2, "failureThreshold": 1}
    if liveness is not None:
        c["livenessProbe"] = liveness
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return c


SLEEP10 = {"sleep": {"seconds": 10}}


def deployment(name: str = "web", *, replicas: int | None = 2, grace: int | None = None,
               containers: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None,
               strategy: dict[str, Any] | None = None, annotations: dict[str, str] | None = None,
               volumes: list[dict[str, Any]] | None = None, namespace: str = "default",
               kind: str = "Deployment", init_containers: list[dict[str, Any]] | None = None,
               ) -> dict[str, Any]:
    labels = labels or {"app": name}
    pod: dict[str, Any] = {"containers": containers or [container(pre_stop=SLEEP10)]}
    if grace is not None:
        pod["terminationGracePeriodSeconds"] = grace
    if volumes is not None:
        pod["volumes"] = volumes
    if init_containers is not None:
        pod["initContainers"] = init_containers
    spec: dict[str, Any] = {"selector": {"matchLabels": labels},
                            "template": {"metadata": {"labels": labels}, "spec": pod}}
    if replicas is not None:
        spec["replicas"] = replicas
    if strategy is not None:
        spec["strategy" if kind == "Deployment" else "updateStrategy"] = strategy
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}


def service(name: str = "web", *, selector: dict[str, str] | None = None, type: str = "ClusterIP",
            namespace: str = "default", etp: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": selector or {"app": name}, "type": type,
                            "ports": [{"port": 80, "targetPort": 8000}]}
    if etp:
        spec["externalTrafficPolicy"] = etp
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def pdb(name: str = "web", *, min_available: int | str | None = None,
        max_unavailable: int | str | None = 1, selector: dict[str, str] | None = None,
        namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"matchLabels": selector or {"app": name}}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    elif max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def hpa(target: str = "web", *, min_replicas: int = 2, namespace: str = "default"
        ) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": target, "namespace": namespace},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": target},
                     "minReplicas": min_replicas, "maxReplicas": 10}}


def to_yaml(*objs: dict[str, Any]) -> str:
    return yaml.safe_dump_all(objs, sort_keys=False)


def check_text(text: str, name: str = "test.yaml", **context: Any) -> list[Finding]:
    loaded = Loaded()
    parse(SourceText(name, text), loaded)
    assert not loaded.errors, loaded.errors
    findings, _ = check_documents(loaded.documents, Context(**context))
    return findings


def check(*objs: dict[str, Any], **context: Any) -> list[Finding]:
    return check_text(to_yaml(*objs), **context)


def rules(findings: list[Finding]) -> set[str]:
    return {f.rule for f in findings}


def of(findings: list[Finding], rule: str) -> list[Finding]:
    return [f for f in findings if f.rule == rule]


def lws(name: str = "llm", *, groups: int | None = 2, size: int | None = 2,
        leader: list[dict[str, Any]] | None = None, workers: list[dict[str, Any]] | None = None,
        leader_grace: int | None = None, worker_grace: int | None = None,
        restart_policy: str | None = None, leader_template: bool = True,
        namespace: str = "default") -> dict[str, Any]:
    """A LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, lws v0.10.0), leader and workers."""
    def template(containers: list[dict[str, Any]], grace: int | None,
                 role: str) -> dict[str, Any]:
        pod: dict[str, Any] = {"containers": containers}
        if grace is not None:
            pod["terminationGracePeriodSeconds"] = grace
        return {"metadata": {"labels": {"app": name, "role": role}}, "spec": pod}

    lwt: dict[str, Any] = {"workerTemplate": template(
        workers or [container("worker", port=None, ready_probe=False)], worker_grace,
        "worker")}
    if leader_template:
        lwt["leaderTemplate"] = template(leader or [container(pre_stop=SLEEP10)], leader_grace,
                                         "leader")
    if size is not None:
        lwt["size"] = size
    if restart_policy is not None:
        lwt["restartPolicy"] = restart_policy
    spec: dict[str, Any] = {"leaderWorkerTemplate": lwt}
    if groups is not None:
        spec["replicas"] = groups
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}
