"""Builders of API objects (plain dicts, as the API server returns them) for plan tests."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def node(name: str, gpus: int = 1, *, unschedulable: bool = False,
         labels: dict[str, str] | None = None, taints: list[Obj] | None = None,
         cpu: str = "16", ready: bool = True) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "64Gi", "nvidia.com/gpu": str(gpus),
                            "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(name: str, node_name: str, *, ns: str = "ml", owner: tuple[str, str] | None = None,
        labels: dict[str, str] | None = None, gpus: int = 0, phase: str = "Running",
        ready: bool = True, grace: int | None = 30, empty_dir: bool = False,
        mirror: bool = False, node_selector: dict[str, str] | None = None,
        tolerations: list[Obj] | None = None, uid: str | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}",
                 "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1],
                                    "controller": True, "uid": f"uid-{owner[1]}"}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "x"}
    resources: Obj = {"requests": {"cpu": "1"}}
    if gpus:
        resources = {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                     "limits": {"nvidia.com/gpu": str(gpus)}}
    spec: Obj = {"nodeName": node_name,
                 "containers": [{"name": "c", "image": "x", "resources": resources}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if empty_dir:
        spec["volumes"] = [{"name": "cache", "emptyDir": {}}]
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": phase,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def deployment(name: str, replicas: int, ns: str = "ml") -> dict[str, Obj]:
    """The Deployment plus its ReplicaSet, keyed as ClusterState.controllers wants."""
    rs = f"{name}-rs"
    return {
        f"Deployment/{ns}/{name}": {"kind": "Deployment",
                                    "metadata": {"name": name, "namespace": ns},
                                    "spec": {"replicas": replicas}},
        f"ReplicaSet/{ns}/{rs}": {"kind": "ReplicaSet",
                                  "metadata": {"name": rs, "namespace": ns, "ownerReferences": [
                                      {"kind": "Deployment", "name": name, "controller": True}]},
                                  "spec": {"replicas": replicas}},
    }


def pdb(name: str, labels: dict[str, str], *, ns: str = "ml", min_available: Any = None,
        max_unavailable: Any = None, allowed: int | None = None) -> Obj:
    spec: Obj = {"selector": {"matchLabels": labels}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    obj: Obj = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": ns}, "spec": spec}
    if allowed is not None:
        obj["status"] = {"disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 1}
    return obj


def serving(name: str, nodes: list[str], *, replicas: int | None = None, gpus: int = 1,
            ns: str = "ml") -> tuple[list[Obj], dict[str, Obj]]:
    """A GPU Deployment with one pod on each of `nodes`."""
    pods = [pod(f"{name}-{i}", n, ns=ns, owner=("ReplicaSet", f"{name}-rs"),
                labels={"app": name}, gpus=gpus, grace=150) for i, n in enumerate(nodes)]
    return pods, deployment(name, replicas if replicas is not None else len(nodes), ns)
