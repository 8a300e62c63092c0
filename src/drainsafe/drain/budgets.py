"""PodDisruptionBudgets: which select a pod, and whether each can ever allow an eviction.

The eviction subresource (kubernetes pkg/registry/core/pod/storage/eviction.go) checks the
budgets whose selector matches the pod: a nil selector matches nothing, an empty one every
pod of the namespace (policy/v1); an invalid one is skipped. What kubectl drain does not
check before cordoning, and this module does: whether each budget can allow a disruption at
the scale the drain runs its workloads at (the disruption controller's expectedCount: the
sum of the scales of the workloads it selects, plus the surge while surged), through
drainsafe.pdb.best_case_disruptions. Zero is a wedge that would retry forever: refused with
the fix; a budget that wedges evict-first but allows the surge's evictions gets a note.
A budget over a LeaderWorkerSet's pods counts pods (the leader and worker StatefulSets'
scales add up to groups x size), but one eviction takes a whole group of `size` pods when
lws recreates groups (kubernetes-sigs/lws v0.10.0 pkg/controllers/pod_controller.go
handleRestartPolicy), so it is read in whole groups (drainsafe.pdb.group_disruptions): a
budget that lets fewer pods go than one group can never allow a group's eviction without
being broken by lws's own deletion of the rest of the group.
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drainsafe import pdb as pdbmath
from drainsafe.drain.blockers import Blocker
from drainsafe.drain.pods import PodPlan
from drainsafe.drain.strategy import WorkloadPlan
from drainsafe.drain.workloads import ClusterState, resolve_workload
from drainsafe.kube.objects import WorkloadRef, is_terminal, key_of, lws_is_leader_name, meta
from drainsafe.labels import Selector, SelectorError, from_label_selector

Obj = Mapping[str, Any]


def pdb_selector(pdb: Obj) -> Selector | None:
    """None for a nil selector, which matches nothing. An empty selector `{}` matches every
    pod of the namespace in policy/v1 (PDB v1 API reference); older eviction handlers
    skipped it (eviction.go getPodDisruptionBudgets, "should match nothing"), so treating
    it as matching errs on the side of refusing."""
    raw = (pdb.get("spec") or {}).get("selector")
    if raw is None:
        return None
    return from_label_selector(raw)


def matching_pdbs(pod: Obj, pdbs: Sequence[Obj]) -> list[Obj]:
    ns = meta(pod).get("namespace")
    labels = meta(pod).get("labels") or {}
    out = []
    for pdb in pdbs:
        if meta(pdb).get("namespace") != ns:
            continue
        try:
            selector = pdb_selector(pdb)
        except SelectorError:
            continue  # the handler skips PDBs with invalid selectors too
        if selector is not None and selector.matches(labels):
            out.append(pdb)
    return out


@dataclass(frozen=True)
class BudgetPlan:
    namespace: str
    name: str
    spec: Mapping[str, Any]
    replicas: int
    best_case_disruptions: int
    disruptions_allowed_now: int | None
    pods_on_node: tuple[str, ...]
    surge: int = 0  # extra pods of its workloads while they are surged
    best_case_with_surge: int = 0  # disruptions allowed with the surge Ready
    group_size: int | None = None  # over a LeaderWorkerSet whose evictions take groups

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def describe_budget(spec: pdbmath.PdbSpec, replicas: int) -> tuple[str, str]:
    if spec.max_unavailable is not None:
        what = f"maxUnavailable {spec.max_unavailable} with {replicas} replicas"
        fix = "set maxUnavailable to 1 (or a percentage that rounds up to at least 1)"
    elif spec.min_available is not None:
        what = f"minAvailable {spec.min_available} with {replicas} replicas"
        fix = (
            f"use maxUnavailable: 1 instead, or scale the workload above {replicas} replicas "
            "first"
        )
    else:
        what = "neither minAvailable nor maxUnavailable set"
        fix = "set maxUnavailable: 1"
    return what, fix


def plan_budgets(
    state: ClusterState,
    pods: Sequence[PodPlan],
    pdbs_of: Mapping[str, list[Obj]],
    blockers: list[Blocker],
    warnings: list[str],
    workload_plans: Sequence[WorkloadPlan] = (),
    notes: list[str] | None = None,
) -> list[BudgetPlan]:
    surged = {w.workload: w for w in workload_plans if w.strategy == "surge"}
    # One eviction takes a whole group: lws recreates groups, or (restartPolicy None) the
    # group's leader is on the nodes and takes its workers with it.
    grouped = {w.workload: w.group_size for w in workload_plans
               if w.group_size is not None and (w.recreates_group or any(
                   lws_is_leader_name(WorkloadRef.parse(w.workload).name, k.split("/", 1)[1])
                   for k in w.pods))}
    workload_of = {p.key: p.workload for p in pods}
    seen: dict[str, Obj] = {}
    for matched in pdbs_of.values():
        for b in matched:
            seen.setdefault(key_of(b), b)
    plans = []
    for bkey, pdb in sorted(seen.items()):
        on_node = tuple(p.key for p in pods if bkey in p.pdbs)
        try:
            spec = pdbmath.PdbSpec.from_manifest(dict(pdb.get("spec") or {}))
        except pdbmath.BudgetSpecError as exc:
            blockers.append(Blocker("bad-budget", f"PodDisruptionBudget {bkey}", str(exc),
                                    "fix the budget's spec"))
            continue
        replicas = budget_scale(state, pdb)
        best = pdbmath.best_case_disruptions(spec, replicas)
        status = pdb.get("status") or {}
        now = status.get("disruptionsAllowed")
        covered = {workload_of.get(k) for k in on_node}
        size = max((grouped[w] or 1 for w in covered if w in grouped), default=None)
        # In pods, as the disruption controller counts them (a group surge: size each).
        surge = sum(surged[w].surge * (surged[w].group_size or 1)
                    for w in covered if w in surged)
        all_surged = bool(covered) and all(w in surged for w in covered)
        best_surged = pdbmath.best_case_disruptions(spec, replicas + surge) if surge else best
        if size is not None:
            # Whole groups: one eviction takes `size` pods down.
            best = pdbmath.group_disruptions(spec, groups=replicas // size,
                                             size=size).groups_allowed
            best_surged = pdbmath.group_disruptions(
                spec, groups=(replicas + surge) // size, size=size).groups_allowed
        plans.append(
            BudgetPlan(
                namespace=str(meta(pdb).get("namespace")),
                name=str(meta(pdb).get("name")),
                spec=dict(pdb.get("spec") or {}),
                replicas=replicas,
                best_case_disruptions=best,
                disruptions_allowed_now=int(now) if isinstance(now, int) else None,
                pods_on_node=on_node,
                surge=surge,
                best_case_with_surge=best_surged,
                group_size=size,
            )
        )
        # An unready pod under AlwaysAllow is evictable whatever the budget says.
        evictable_anyway = spec.unhealthy_pod_eviction_policy == "AlwaysAllow" and all(
            not p.ready for p in pods if p.key in on_node
        )
        unit = "pod(s)" if size is None else f"group(s) of {size} pods"
        if best == 0 and best_surged > 0 and all_surged and notes is not None:
            what, _ = describe_budget(spec, replicas)
            notes.append(
                f"PodDisruptionBudget {bkey}: {what} allows no eviction evict-first (a wedge), "
                f"but with the surge of {surge} Ready pod(s) the same budget allows "
                f"{best_surged} {unit}; the budget is respected, not bypassed"
            )
        elif best_surged == 0 and not evictable_anyway:
            what, fix = describe_budget(spec, replicas)
            if surge:
                what += f" (and {replicas + surge} while surged)"
            if size is not None:
                what += (f", read in whole groups of {size} pods (one eviction takes its "
                         "group down: lws restartPolicy RecreateGroupOnPodRestart),")
                fix = _group_fix(spec, replicas // size, size)
            blockers.append(
                Blocker(
                    "wedged-budget",
                    f"PodDisruptionBudget {bkey}",
                    f"{what} allows no disruption even when every pod is ready, so the "
                    "eviction would be refused forever (kubectl drain would retry until "
                    "--timeout, which defaults to never)",
                    fix,
                )
            )
        elif isinstance(now, int) and now == 0:
            warnings.append(
                f"PodDisruptionBudget {bkey} allows 0 disruptions right now "
                f"({status.get('currentHealthy')}/{status.get('desiredHealthy')} healthy/desired);"
                " drainsafe waits for it"
            )
    return plans


def _group_fix(spec: pdbmath.PdbSpec, groups: int, size: int) -> str:
    """How to let one whole group go, in the budget's own field."""
    if spec.min_available is not None and not pdbmath.is_percent(spec.min_available):
        return (f"set minAvailable to at most {(groups - 1) * size} (one group of {size} "
                f"fewer than the {groups * size} pods), or scale the LeaderWorkerSet up first")
    return f"set maxUnavailable to {size} (one whole group of {size} pods)"


def budget_scale(state: ClusterState, pdb: Obj) -> int:
    """Sum of the scales of the workloads whose pods the budget selects (the disruption
    controller's expectedCount); the matched pod count when no controller is known."""
    ns = meta(pdb).get("namespace")
    try:
        selector = pdb_selector(pdb)
    except SelectorError:
        return 0
    if selector is None:
        return 0
    matched = [
        p for p in state.pods
        if meta(p).get("namespace") == ns and selector.matches(meta(p).get("labels") or {})
        and not is_terminal(p)
    ]
    scales: dict[str, int] = {}
    unknown = 0
    for pod in matched:
        w = resolve_workload(pod, state.controllers)
        if w is None or w.replicas is None:
            unknown += 1
        else:
            # A LeaderWorkerSet's groups are size pods each (its StatefulSets' scales).
            scales[w.key] = w.replicas * w.pods_per_replica
    return sum(scales.values()) + unknown
