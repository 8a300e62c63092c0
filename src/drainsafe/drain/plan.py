"""The drain plan: a pure function of cluster state (plain API dicts) and options.

`plan_drain` composes the parts, each in its own module:
- drain.filters: kubectl's pod filters (pkg/drain/filters.go), a typed verdict per pod;
- drain.workloads: each pod's workload, its scale and its selector, resolved once;
- drain.pods: the plan's line per pod, and what one pod blocks (several budgets);
- drain.strategy: surge (make before break) or evict (break before make) per workload,
  with the Ready floor and the expected time of each; independent workloads in parallel;
- drain.budgets: whether each budget can ever allow a disruption at the scale the drain
  runs it at (a wedge would retry forever);
- here: room for every replacement (or surge pod) on the other schedulable nodes
  (drain.room; for a LeaderWorkerSet with exclusive placement, whole free topology
  domains: drain.domains), and the order of evictions (one queue per workload).
What kubectl drain (pkg/drain/drain.go) checks only while it evicts, refused here before
anything changes (drain.blockers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from drainsafe.drain import domains
from drainsafe.drain.blockers import Blocker
from drainsafe.drain.budgets import BudgetPlan, matching_pdbs, plan_budgets
from drainsafe.drain.filters import DrainOptions as DrainOptions  # demo imports it from here
from drainsafe.drain.filters import classify
from drainsafe.drain.ownership import guard_surged
from drainsafe.drain.pods import PodPlan, pod_blockers, pod_plan
from drainsafe.drain.room import Placement, place_replacements
from drainsafe.drain.strategy import WorkloadPlan, plan_workloads
from drainsafe.drain.workloads import (
    ClusterState,
    Workload,
    WorkloadSelector,
    resolve_workload,
    workload_selector,
)
from drainsafe.kube.objects import (
    WorkloadRef,
    is_active,
    key_of,
    lws_exclusive_topology,
    lws_group_of,
    meta,
    node_of,
)

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Queue:
    """Pods evicted strictly one after another (one workload); queues run in parallel."""

    workload: str | None
    pods: tuple[str, ...]


@dataclass(frozen=True)
class DrainPlan:
    nodes: tuple[str, ...]
    pods: tuple[PodPlan, ...]
    budgets: tuple[BudgetPlan, ...]
    workloads: Mapping[str, Workload]
    queues: tuple[Queue, ...]
    blockers: tuple[Blocker, ...]
    warnings: tuple[str, ...]
    placements: tuple[Placement, ...] = field(default=())
    workload_plans: tuple[WorkloadPlan, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())
    # How the drain's watch tells each affected workload's pods, resolved here once.
    selectors: Mapping[str, WorkloadSelector] = field(default_factory=dict)

    def workload_plan(self, key: str | None) -> WorkloadPlan | None:
        for w in self.workload_plans:
            if w.workload == key:
                return w
        return None

    @property
    def ok(self) -> bool:
        return not self.blockers

    @property
    def to_evict(self) -> tuple[PodPlan, ...]:
        return tuple(p for p in self.pods if p.action == "evict")

    @property
    def longest_grace(self) -> int:
        return max((p.grace_seconds for p in self.pods if p.action in ("evict", "wait")),
                   default=0)

    @property
    def longest_queue_grace(self) -> int:
        """Upper bound on termination time along the slowest queue (sum of graces)."""
        by_key = {p.key: p for p in self.pods}
        return max(
            (sum(by_key[k].grace_seconds for k in q.pods) for q in self.queues), default=0
        )

    def pod(self, key: str) -> PodPlan:
        for p in self.pods:
            if p.key == key:
                return p
        raise KeyError(key)

    @property
    def namespaces(self) -> list[str]:
        """The namespaces the drain watches: of the pods it moves or waits for, and of
        the workloads it surges or restores."""
        found = {p.namespace for p in self.pods if p.action in ("evict", "wait")}
        found |= {WorkloadRef.parse(w.workload).namespace for w in self.workload_plans}
        return sorted(found)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["selectors"]  # for the watch; the JSON plan names the workloads already
        out["ok"] = self.ok
        out["longest_grace_seconds"] = self.longest_grace
        out["longest_queue_grace_seconds"] = self.longest_queue_grace
        return out


def plan_drain(
    state: ClusterState,
    nodes: Iterable[str],
    options: DrainOptions | None = None,
    *,
    pod_filter: Callable[[Obj], bool] | None = None,
    draining: Iterable[str] = (),
    evict_first: frozenset[str] = frozenset(),
) -> DrainPlan:
    """Plan draining `nodes` (together) from a snapshot of the cluster. Pure.

    `draining` names further nodes of the same fleet run: no room is counted there.
    With capacity floors (options.floors), a surge without room is planned again
    evict-first where the workload's floor allows it (`evict_first`: those workloads).
    """
    options = options or DrainOptions()
    targets = tuple(dict.fromkeys(nodes))
    draining = tuple(draining)
    target_set = set(targets)
    known_nodes = {str(meta(n).get("name")) for n in state.nodes}
    blockers: list[Blocker] = []
    warnings: list[str] = []
    for name in targets:
        if name not in known_nodes:
            blockers.append(Blocker("no-node", f"Node {name}", "node not found",
                                    "check the node name (kubectl get nodes)"))
    on_nodes = [
        p for p in state.pods
        if (p.get("spec") or {}).get("nodeName") in target_set
        and (pod_filter is None or pod_filter(p))
    ]
    on_nodes.sort(key=key_of)

    workloads: dict[str, Workload] = {}
    pods: list[PodPlan] = []
    pdbs_of: dict[str, list[Obj]] = {}
    for pod in on_nodes:
        verdict = classify(pod, options)
        workload = resolve_workload(pod, state.controllers) if verdict.action != "skip" else None
        if workload is not None:
            workloads.setdefault(workload.key, workload)
        matched = matching_pdbs(pod, state.pdbs) if verdict.action == "evict" else []
        pdbs_of[key_of(pod)] = matched
        pods.append(pod_plan(pod, verdict, workload, matched))
        blockers += pod_blockers(pod, verdict, matched)

    notes: list[str] = []
    workload_plans = plan_workloads(state, targets, pods, workloads, options, blockers,
                                    evict_first, sharing=tuple(draining))
    budgets = plan_budgets(state, pods, pdbs_of, blockers, warnings, workload_plans, notes)
    placements = _plan_room(state, (*targets, *draining), pods, on_nodes, blockers,
                            workload_plans, notes)
    by_key = {p.key: p for p in pods}
    pods = [
        _with_placement(by_key[p.key], placements) for p in pods
    ]
    for w in workloads.values():
        status = (state.controllers.get(w.key) or {}).get("status") or {}
        ready = status.get("readyReplicas")
        if w.replicas and isinstance(ready, int) and ready < w.replicas:
            warnings.append(
                f"{w.kind} {w.namespace}/{w.name} has {ready}/{w.replicas} Ready replicas now; "
                "its pods are evicted only once it is fully Ready (replacement first)"
            )
        if w.replicas == 1 and any(p.workload == w.key and p.action == "evict" for p in pods):
            warnings.append(
                f"{w.kind} {w.namespace}/{w.name} has 1 replica: it serves nothing between the "
                "eviction and its replacement becoming Ready (scale it to 2 first)"
            )
    fallback = _evict_first_within_floor(state, options, pods, blockers, workload_plans)
    if fallback - evict_first:
        return plan_drain(state, nodes, options, pod_filter=pod_filter, draining=draining,
                          evict_first=evict_first | fallback)
    queues = _queues(pods)
    return DrainPlan(
        nodes=targets,
        pods=tuple(pods),
        budgets=tuple(budgets),
        workloads=workloads,
        queues=queues,
        blockers=tuple(blockers),
        warnings=tuple(warnings),
        placements=tuple(placements),
        workload_plans=tuple(workload_plans),
        notes=tuple(notes),
        selectors=_selectors(state, workloads, workload_plans),
    )


def _evict_first_within_floor(state: ClusterState, options: DrainOptions,
                              pods: Sequence[PodPlan], blockers: Sequence[Blocker],
                              workload_plans: Sequence[WorkloadPlan]) -> frozenset[str]:
    """Surged workloads refused for room whose capacity floor allows evict-first."""
    if options.floors is None:
        return frozenset()
    by_pod = {f"Pod {p.key}": p.workload for p in pods}
    short = {by_pod.get(b.object) for b in blockers if b.kind == "no-room"}
    out = set()
    for w in workload_plans:
        if w.strategy != "surge" or w.resumed or w.workload not in short or not w.replicas:
            continue
        obj = state.controllers.get(w.workload) or {}
        if options.floors.allows_evict_first(WorkloadRef.parse(w.workload),
                                             meta(obj).get("labels") or {}, w.replicas):
            out.add(w.workload)
    return frozenset(out)


def _with_placement(pod: PodPlan, placements: Sequence[Placement]) -> PodPlan:
    for p in placements:
        if p.pod == pod.key and p.node is not None:
            return PodPlan(**{**asdict(pod), "replacement_on": p.node})
    return pod


def _plan_room(
    state: ClusterState,
    targets: Sequence[str],
    pods: Sequence[PodPlan],
    raw: Sequence[Obj],
    blockers: list[Blocker],
    workload_plans: Sequence[WorkloadPlan] = (),
    notes: list[str] | None = None,
) -> list[Placement]:
    specs = {key_of(p): p.get("spec") or {} for p in raw}
    # Exclusive placement: room in whole topology domains, not node by node.
    exclusive = {w.workload for w in workload_plans if w.group_size is not None
                 and lws_exclusive_topology(state.controllers.get(w.workload) or {})}
    for w in workload_plans:
        if w.workload in exclusive:
            _domain_room(state, targets, pods, w, blockers, notes if notes is not None else [])
    workload_plans = [w for w in workload_plans if w.workload not in exclusive]
    pods = [p for p in pods if p.workload not in exclusive]
    grouped = {w.workload: w for w in workload_plans
               if w.strategy == "surge" and w.identity == "group"}
    # A workload needs room for as many new pods as it lacks off the drained nodes: all of
    # its pods here on a first run, none on a rerun whose surge pods already run elsewhere.
    lacking = {w.workload: _lacking(state, w, targets) for w in workload_plans
               if w.workload not in grouped}
    # A surged StatefulSet pod needs room twice while it moves: for its stand-in (a new
    # ordinal, counted as lacking above) and for itself, recreated under its name while
    # the stand-in still runs (the drained nodes are cordoned).
    stable = {w.workload for w in workload_plans
              if w.strategy == "surge" and w.identity == "stable"}
    wanted = _group_room(state, targets, pods, specs, grouped)
    for p in pods:
        if not p.needs_replacement or p.workload in grouped:
            continue
        if p.workload in stable:
            wanted.append((p.key, specs[p.key]))  # its recreation
        if p.workload in lacking:
            if lacking[p.workload] <= 0:
                continue
            lacking[p.workload] -= 1
        wanted.append((p.key, specs[p.key]))
    if not wanted:
        return []
    placements = place_replacements(wanted, state.nodes, state.pods, excluded=targets)
    by_key = {p.key: p for p in pods}
    refused: set[str] = set()
    for placement in placements:
        if placement.node is not None or placement.pod in refused:
            continue
        refused.add(placement.pod)
        pod = by_key[placement.pod]
        needs = ", ".join(f"{k}: {v}" for k, v in pod.gpus.items()) or "its CPU/memory requests"
        reasons = "; ".join(f"{n}: {r}" for n, r in sorted(placement.reasons.items()))
        if pod.workload in grouped:
            w = grouped[pod.workload]
            what = (f"a stand-in group of {w.group_size} pods and for its group's pods "
                    "here, recreated under their names while the stand-ins serve (group "
                    f"{pod.group} cannot surge; evict-first would leave "
                    f"{max((w.replicas or 1) - 1, 0)}/{w.replicas} groups Ready while it "
                    "reloads)")
        elif pod.workload in stable:
            what = ("its stand-in and for itself, recreated under its name (a StatefulSet "
                    "pod needs both while it moves)")
        else:
            what = "its replacement"
        blockers.append(
            Blocker(
                "no-room",
                f"Pod {pod.key}",
                f"no other schedulable node has room for {what} (needs {needs}): "
                f"{reasons or 'no other nodes'}",
                "add a node first (drainsafe drain --surge waits for one) or free capacity "
                "elsewhere; evicting now would leave the replacement Pending",
            )
        )
    return placements


def _group_room(state: ClusterState, targets: Sequence[str], pods: Sequence[PodPlan],
                specs: Mapping[str, Obj], grouped: Mapping[str, WorkloadPlan]
                ) -> list[tuple[str, Obj]]:
    """Room a group surge needs, as (the pod on the nodes it is counted for, a pod spec):
    a whole stand-in group (one pod per member of the affected group, leader and workers,
    each placed on its own: with one GPU per node, on distinct nodes) for each group the
    LWS lacks off the drained nodes, and, while the stand-ins serve, the recreation of each
    of the group's pods here and on the other nodes being drained (`targets` includes them:
    their room is cordoned); its pods elsewhere are recreated in the room they free."""
    wanted: list[tuple[str, Obj]] = []
    excluded = set(targets)
    for key, w in sorted(grouped.items()):
        here = [p for p in pods if p.workload == key and p.needs_replacement]
        planned = {p.key for p in here}
        members = _group_members(state, key)
        lacking = _lacking_groups(state, w, targets)
        for group in w.groups:
            first = next(p for p in here if p.group == group)
            if lacking > 0:
                lacking -= 1
                wanted += [(first.key, m.get("spec") or {}) for m in members.get(group, [])]
            wanted += [(p.key, specs[p.key]) for p in here if p.group == group]
            wanted += [(first.key, m.get("spec") or {}) for m in members.get(group, [])
                       if node_of(m) in excluded and key_of(m) not in planned]
    return wanted


def _domain_room(state: ClusterState, targets: Sequence[str], pods: Sequence[PodPlan],
                 w: WorkloadPlan, blockers: list[Blocker], notes: list[str]) -> None:
    """An exclusive-topology LWS: a whole free domain per stand-in and recreated group."""
    here: dict[int, str] = {}  # the first pod (by name) of each group on the nodes
    for p in sorted(pods, key=lambda p: p.key):
        if p.workload == w.workload and p.needs_replacement and p.group is not None:
            here.setdefault(p.group, p.key)
    stand_ins = _lacking_groups(state, w, targets) if w.strategy == "surge" else 0
    found, said = domains.plan_exclusive(
        state.nodes, state.pods, w, lws_exclusive_topology(
            state.controllers.get(w.workload) or {}) or "",
        _group_members(state, w.workload), here, targets, stand_ins=stand_ins)
    blockers += found
    notes += said


def _group_members(state: ClusterState, workload: str) -> dict[int, list[Obj]]:
    """The active pods of the LeaderWorkerSet's groups, by group index."""
    ref = WorkloadRef.parse(workload)
    out: dict[int, list[Obj]] = {}
    for p in state.pods:
        group = lws_group_of(p)
        if group is not None and group[0] == ref.name and is_active(p) \
                and meta(p).get("namespace") == ref.namespace:
            out.setdefault(group[1], []).append(p)
    return out


def _lacking_groups(state: ClusterState, plan: WorkloadPlan, targets: Sequence[str]) -> int:
    """How many whole groups the LeaderWorkerSet lacks off the drained nodes."""
    if plan.replicas is None:
        return len(plan.groups)
    excluded = set(targets)
    whole = sum(1 for ps in _group_members(state, plan.workload).values()
                if len(ps) >= (plan.group_size or 1)
                and all(node_of(p) is not None and node_of(p) not in excluded for p in ps))
    return min(len(plan.groups), max(0, plan.replicas - whole))


def _queues(pods: Sequence[PodPlan]) -> tuple[Queue, ...]:
    by_workload: dict[str | None, list[str]] = {}
    singles: list[Queue] = []
    for p in pods:
        if p.action != "evict":
            continue
        if p.workload is None or not p.needs_replacement:
            singles.append(Queue(workload=p.workload, pods=(p.key,)))
        else:
            by_workload.setdefault(p.workload, []).append(p.key)
    queues = [Queue(workload=w, pods=tuple(keys)) for w, keys in sorted(
        by_workload.items(), key=lambda kv: str(kv[0]))]
    return tuple(queues + singles)


def _lacking(state: ClusterState, plan: WorkloadPlan, targets: Sequence[str]) -> int:
    """How many pods the workload lacks off the drained nodes to be at its replicas."""
    if plan.replicas is None or guard_surged(state.controllers.get(plan.workload)):
        # The eviction guard's stand-ins run elsewhere but are not this drain's
        # replacements: its restore takes them away again.
        return len(plan.pods)
    if plan.group_size is not None:
        # Evict-first groups: the pods here are recreated (their groups' others in the
        # room they free) while the set lacks a whole group off the nodes.
        return len(plan.pods) if _lacking_groups(state, plan, targets) > 0 else 0
    excluded = set(targets)
    elsewhere = sum(
        1 for p in state.pods
        if is_active(p) and node_of(p) is not None and node_of(p) not in excluded
        and (w := resolve_workload(p, state.controllers)) is not None and w.key == plan.workload
    )
    return min(len(plan.pods), max(0, plan.replicas - elsewhere))


def _selectors(state: ClusterState, workloads: Mapping[str, Workload],
               workload_plans: Sequence[WorkloadPlan]) -> dict[str, WorkloadSelector]:
    """Each affected workload's selector and the Ready count the drain waits for: the
    plan's replicas (the recorded ones on a rerun), else the controller's."""
    by_key = {w.workload: w for w in workload_plans}
    out: dict[str, WorkloadSelector] = {}
    for key, workload in workloads.items():
        wplan = by_key.get(key)
        replicas = wplan.replicas if wplan is not None else workload.replicas
        found = workload_selector(key, state.controllers.get(key), replicas)
        if found is not None:
            out[key] = found
    for w in workload_plans:  # a restore left by an earlier run has no pod on the nodes
        if w.workload not in out:
            found = workload_selector(w.workload, state.controllers.get(w.workload) or {},
                                      w.replicas)
            if found is not None:
                out[w.workload] = found
    return out
