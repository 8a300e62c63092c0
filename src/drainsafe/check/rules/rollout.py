"""Rollout rules: what a rolling update takes away, and what a surge pod needs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from drainsafe.check.context import Context
from drainsafe.check.findings import Finding, Severity
from drainsafe.check.model import Index, Workload, mapping, number
from drainsafe.check.rules.registry import rule
from drainsafe.check.snippets import dump
from drainsafe.pdb import BudgetSpecError, desired_healthy, scaled_value

_GPU = re.compile(r"(^|[./-])(gpu|mig-[^/]*)$|gpu", re.IGNORECASE)


def _int_or_percent(value: object, default: int | str) -> int | str:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        return default
    return value


def fenceposts(w: Workload, replicas: int) -> tuple[int, int] | None:
    """(maxSurge, maxUnavailable) pods for a Deployment rolling update, as the controller
    resolves them: surge rounds up, unavailable rounds down, and both zero means one
    unavailable (kubernetes/kubernetes pkg/controller/deployment/util ResolveFenceposts)."""
    rolling = mapping(w.strategy.get("rollingUpdate"))
    return _fenceposts(_int_or_percent(rolling.get("maxSurge"), "25%"),
                       _int_or_percent(rolling.get("maxUnavailable"), "25%"), replicas)


@lru_cache(maxsize=4096, typed=True)
def _fenceposts(max_surge: int | str, max_unavailable: int | str,
                replicas: int) -> tuple[int, int] | None:
    # A pure function of few distinct values (two rules ask for every Deployment).
    try:
        surge = scaled_value(max_surge, replicas, round_up=True)
        unavailable = scaled_value(max_unavailable, replicas, round_up=False)
    except BudgetSpecError:
        return None
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


ROLLOUT_UNAVAILABLE = rule(
    "rollout-unavailable", Severity.WARNING,
    "Recreate, or a rolling update that drops below what the PodDisruptionBudget promises.",
    """
PodDisruptionBudgets govern evictions, not rollouts: a Deployment's rolling update takes down
up to maxUnavailable pods (25 % by default, rounded down) whatever the budget says, and the
Recreate strategy stops every pod before starting new ones, an outage on each rollout. With a
long model load the gap lasts minutes. Use RollingUpdate with maxUnavailable small enough to
keep the budget's minimum serving (on GPUs, maxSurge 0 and maxUnavailable 1 with >= 2
replicas).

Sources: kubernetes.io/docs/concepts/workloads/controllers/deployment/#strategy;
kubernetes.io/docs/concepts/workloads/pods/disruptions/ (rollouts are not evictions and do
not consult budgets); kube-score deployment-strategy.
""")


_ROLLOUT_FIX = dump({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {
    "maxSurge": 0, "maxUnavailable": 1}}}})


@ROLLOUT_UNAVAILABLE.check
def _rollout(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        if w.ref.kind not in ("Deployment", "StatefulSet"):
            continue
        replicas = index.expected_replicas(w)
        if replicas is None or replicas < 1:
            continue
        kind = str(w.strategy.get("type") or "RollingUpdate")
        if kind == "Recreate":
            yield ROLLOUT_UNAVAILABLE.finding(
                w, f"strategy Recreate stops all {replicas} pod(s) before new ones start: "
                "every rollout is an outage", _ROLLOUT_FIX, path=("spec", "strategy", "type"))
            continue
        if kind != "RollingUpdate":
            continue
        if w.ref.kind == "Deployment":
            posts = fenceposts(w, replicas)
            if posts is None:
                continue
            down = posts[1]
        else:
            rolling = mapping(w.strategy.get("rollingUpdate"))
            try:
                down = scaled_value(_int_or_percent(rolling.get("maxUnavailable"), 1),
                                    replicas, round_up=False) or 1
            except BudgetSpecError:
                continue
        for pdb in index.pdbs_for(w):
            if pdb.spec is None:
                continue
            _, desired = desired_healthy(pdb.spec, expected_scale=replicas, matched_pods=replicas)
            if replicas - down >= desired or (replicas - down <= 0 and replicas == 1):
                continue
            yield ROLLOUT_UNAVAILABLE.finding(
                w, f"a rolling update may take {down} of {replicas} pod(s) down at once, "
                f"leaving {replicas - down}, below the {desired} PodDisruptionBudget "
                f"{pdb.ref.name} promises", _ROLLOUT_FIX,
                path=("spec", "strategy") if w.strategy else ("spec",))


def gpu_requests(w: Workload) -> dict[str, float]:
    """Extended GPU resources the pod requests, summed over its containers."""
    total: dict[str, float] = {}
    for c in w.containers:
        resources = mapping(c.spec.get("resources"))
        # Extended resources must have requests == limits; either one is enough to read.
        seen = {**mapping(resources.get("requests")), **mapping(resources.get("limits"))}
        for name, value in seen.items():
            if not _gpu(str(name)):
                continue  # cpu, memory: "64Gi" is no number, and float() raising is costly
            amount = number(value)
            if amount:
                total[str(name)] = total.get(str(name), 0.0) + amount
    return total


@lru_cache(maxsize=1024)
def _gpu(resource: str) -> bool:
    """Whether a resource name is a GPU's (a pod spec names a few, and every pod asks)."""
    return _GPU.search(resource) is not None


GPU_SURGE = rule(
    "gpu-surge", Severity.WARNING,
    "A GPU workload that surges on rollout: the surge pod needs a free GPU.",
    """
A rolling update with maxSurge > 0 (25 % by default, rounded up: at least one pod) starts new
pods before old ones stop. On a GPU pool running near capacity there is no free device for
them: the surge pod stays Pending and the rollout stalls. Roll GPU workloads with maxSurge: 0
and maxUnavailable: 1 (which needs >= 2 replicas to keep serving), or add a node first.

Sources: kubernetes.io/docs/concepts/workloads/controllers/deployment/#max-surge;
kubernetes/kubernetes pkg/controller/deployment/util (ResolveFenceposts);
kubernetes.io/docs/concepts/scheduling-eviction/ (a pod whose requested extended resources
no node has free stays Pending).
""")


@GPU_SURGE.check
def _gpu_surge(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        if w.ref.kind != "Deployment":
            continue
        gpus = gpu_requests(w)
        if not gpus or str(w.strategy.get("type") or "RollingUpdate") != "RollingUpdate":
            continue
        replicas = index.expected_replicas(w)
        posts = fenceposts(w, replicas if replicas and replicas > 0 else 1)
        if posts is None or posts[0] == 0:
            continue
        name, per_pod = next(iter(gpus.items()))
        yield GPU_SURGE.finding(
            w, f"maxSurge {posts[0]}: each rollout step starts {posts[0]} extra pod(s) needing "
            f"{per_pod:g} {name} each; with no free GPU they stay Pending and the rollout stalls",
            _ROLLOUT_FIX, path=("spec", "strategy") if w.strategy else ("spec",))
