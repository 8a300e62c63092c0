"""The drain plan: a pure function of cluster state (plain API dicts) and options.

Pod classification follows kubectl's pkg/drain/filters.go (makeFilters): small filters
applied in order, each returning a verdict and a reason, the first verdict wins. Unlike
kubectl there is no --force and no --ignore-daemonsets: DaemonSet and mirror pods always
stay (the NVIDIA device plugin must be the last thing on a GPU node), unmanaged pods always
block (drainsafe never deletes a pod outside the Eviction API).

On top, what kubectl drain (pkg/drain/drain.go) does not check before cordoning:
- the PDBs each pod is under: several means the eviction API answers HTTP 500 ("This pod
  has more than one PodDisruptionBudget"), so refuse now, naming the budgets;
- whether each budget can ever allow a disruption at the scale the drain runs it at (its
  workload's, plus the surge while surged: drainsafe.pdb.best_case_disruptions); zero is a
  wedge that would retry forever;
- room for every replacement (or surge pod) on the other schedulable nodes (drain.room);
- the strategy per workload (plan_workloads): surge (make before break) for a Deployment
  not mid-rollout, evict (one pod at a time, each after the previous replacement is Ready)
  for the rest, with the Ready floor and the expected time of each; independent workloads
  in parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from drainsafe import pdb as pdbmath
from drainsafe.drain.ownership import SurgeRecord, guard_surged
from drainsafe.drain.room import Placement, gpu_requests, place_replacements
from drainsafe.kube.objects import (
    WorkloadRef,
    autoscaler_for,
    controller_ref,
    grace_seconds,
    is_active,
    is_ready,
    is_terminating,
    key_of,
    meta,
    node_of,
    rollout_in_progress,
    started_up_seconds,
)
from drainsafe.kube.objects import is_terminal as is_finished
from drainsafe.labels import Selector, SelectorError, from_label_selector

Obj = Mapping[str, Any]
Action = Literal["evict", "skip", "block", "wait"]
# Why a pod got its action (kubectl's PodDeleteStatus reason, typed): code decides, the
# message explains.
VerdictCode = Literal["finished", "terminating", "daemonset", "mirror", "local-data",
                      "unmanaged", "managed"]
Strategy = Literal["surge", "evict"]
BlockerKind = Literal["no-node", "unmanaged", "local-data", "multiple-pdbs", "wedged-budget",
                      "no-room", "bad-budget", "surge-owned"]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
REPLICATED_KINDS = ("ReplicaSet", "StatefulSet", "ReplicationController", "Job")


@dataclass(frozen=True)
class Verdict:
    action: Action
    code: VerdictCode
    reason: str


@dataclass(frozen=True)
class DrainOptions:
    delete_emptydir_data: bool = False
    # surge: make before break where the workload allows it (a Deployment not mid-rollout);
    # evict: break before make everywhere (one pod of a workload at a time).
    strategy: Strategy = "surge"


_meta = meta


# -- filters (kubectl pkg/drain/filters.go, in its order, plus "terminating" and "finished"
# first) --------------------------------------------------------------------------------------

PodFilter = Callable[[Obj, DrainOptions], Verdict | None]


def finished_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    # kubectl lets Succeeded/Failed pods through every filter: nothing is lost.
    if is_finished(pod):
        phase = (pod.get("status") or {}).get("phase")
        return Verdict("evict", "finished", f"finished ({phase}); no replacement needed")
    return None


def terminating_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    if is_terminating(pod):
        return Verdict("wait", "terminating", "already terminating; waiting for it to go")
    return None


def daemonset_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    ref = controller_ref(pod)
    if ref is not None and ref.get("kind") == "DaemonSet":
        return Verdict("skip", "daemonset", f"DaemonSet {ref.get('name')} pod stays on the node")
    return None


def mirror_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    if MIRROR_ANNOTATION in (_meta(pod).get("annotations") or {}):
        return Verdict("skip", "mirror", "mirror (static) pod stays; the kubelet owns it")
    return None


def local_storage_filter(pod: Obj, options: DrainOptions) -> Verdict | None:
    # Only emptyDir counts as local storage, as in kubectl (hostPath does not).
    volumes = [
        v.get("name") for v in (pod.get("spec") or {}).get("volumes") or [] if "emptyDir" in v
    ]
    if volumes and not options.delete_emptydir_data:
        return Verdict(
            "block", "local-data",
            f"emptyDir data ({', '.join(map(str, volumes))}) would be lost; "
            "pass --delete-emptydir-data if that is acceptable (model caches, /dev/shm)",
        )
    return None


def unreplicated_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    if controller_ref(pod) is None:
        return Verdict(
            "block", "unmanaged",
            "not managed by a controller: evicting it would lose it for good; delete or "
            "re-create it under a Deployment yourself (drainsafe has no --force)",
        )
    return None


# Terminating first: a pod being deleted is waited for, never sent an eviction, even when
# its containers have already finished (an evicted pod whose process exited is Succeeded
# and terminating at once; a second eviction of it would be one too many).
FILTERS: tuple[PodFilter, ...] = (
    terminating_filter,
    finished_filter,
    daemonset_filter,
    mirror_filter,
    local_storage_filter,
    unreplicated_filter,
)


def classify(pod: Obj, options: DrainOptions, filters: Sequence[PodFilter] = FILTERS) -> Verdict:
    for f in filters:
        verdict = f(pod, options)
        if verdict is not None:
            return verdict
    ref = controller_ref(pod) or {}
    return Verdict("evict", "managed", f"managed by {ref.get('kind')} {ref.get('name')}")


# -- workloads and budgets ------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    kind: str
    namespace: str
    name: str
    replicas: int | None  # desired; None when the controller is not known

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


def resolve_workload(pod: Obj, controllers: Mapping[str, Obj]) -> Workload | None:
    """The top controller (ReplicaSet -> Deployment) and its desired replicas."""
    ref = controller_ref(pod)
    if ref is None:
        return None
    ns = str(_meta(pod).get("namespace") or "")
    kind, name = str(ref.get("kind")), str(ref.get("name"))
    obj = controllers.get(f"{kind}/{ns}/{name}")
    if kind == "ReplicaSet" and obj is not None:
        parent = controller_ref(obj)
        if parent is not None and parent.get("kind") == "Deployment":
            dep = controllers.get(f"Deployment/{ns}/{parent.get('name')}")
            if dep is not None:
                obj, kind, name = dep, "Deployment", str(parent.get("name"))
    replicas = None
    if obj is not None:
        value = (obj.get("spec") or {}).get("replicas")
        replicas = int(value) if isinstance(value, int) else 1
    return Workload(kind=kind, namespace=ns, name=name, replicas=replicas)


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
    ns = _meta(pod).get("namespace")
    labels = _meta(pod).get("labels") or {}
    out = []
    for pdb in pdbs:
        if _meta(pdb).get("namespace") != ns:
            continue
        try:
            selector = pdb_selector(pdb)
        except SelectorError:
            continue  # the handler skips PDBs with invalid selectors too
        if selector is not None and selector.matches(labels):
            out.append(pdb)
    return out


# -- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Blocker:
    kind: BlockerKind
    object: str
    message: str
    fix: str


@dataclass(frozen=True)
class PodPlan:
    namespace: str
    name: str
    uid: str
    node: str
    action: Action
    reason: str
    workload: str | None
    pdbs: tuple[str, ...]
    code: VerdictCode
    grace_seconds: int
    gpus: Mapping[str, str]
    ready: bool
    replacement_on: str | None = None  # where the room check placed its replacement

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def needs_replacement(self) -> bool:
        return self.action == "evict" and self.workload is not None and self.code != "finished"


@dataclass(frozen=True)
class BudgetPlan:
    namespace: str
    name: str
    spec: Mapping[str, Any]
    replicas: int
    best_case_disruptions: int
    disruptions_allowed_now: int | None
    pods_on_node: tuple[str, ...]
    surge: int = 0  # extra replicas of its workloads while they are surged
    best_case_with_surge: int = 0  # disruptions allowed with the surge Ready

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class WorkloadPlan:
    """How one workload's pods leave the nodes, and what that costs in capacity and time.

    surge (make before break): scale up by `surge`, wait until that many new pods are Ready
    and Available on other nodes, evict the old pods, scale back. Ready never drops below
    `replicas`.
    evict (break before make): one pod at a time, each only when the workload is back at its
    Ready count; during each replacement's start-up Ready is `replicas - 1`.
    """

    workload: str
    strategy: Strategy
    pods: tuple[str, ...]  # its pods on the nodes that need a replacement
    replicas: int | None  # desired before the drain (the surge record's, on a rerun)
    surge: int  # extra replicas during the drain; 0 for evict
    floor: int | None  # lowest Ready count expected during the drain
    startup_seconds: float | None  # a replacement's start-up, as observed on its pods
    expected_seconds: float | None  # upper estimate: start-up(s) plus grace period(s)
    why: str
    autoscaler: str | None = None  # "ns/name" of the HPA that owns the scale
    resumed: bool = False  # a surge record of an earlier run on these nodes exists


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

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["longest_grace_seconds"] = self.longest_grace
        out["longest_queue_grace_seconds"] = self.longest_queue_grace
        return out


@dataclass(frozen=True)
class ClusterState:
    """What the planner reads. `controllers` maps "Kind/namespace/name" to the object
    (ReplicaSets, Deployments, StatefulSets, ...)."""

    nodes: Sequence[Obj]
    pods: Sequence[Obj]
    pdbs: Sequence[Obj] = ()
    controllers: Mapping[str, Obj] = field(default_factory=dict)
    autoscalers: Sequence[Obj] = ()  # HorizontalPodAutoscalers (autoscaling/v2)


def _describe_budget(spec: pdbmath.PdbSpec, replicas: int) -> tuple[str, str]:
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


def plan_drain(
    state: ClusterState,
    nodes: Iterable[str],
    options: DrainOptions | None = None,
    *,
    pod_filter: Callable[[Obj], bool] | None = None,
    draining: Iterable[str] = (),
) -> DrainPlan:
    """Plan draining `nodes` (together) from a snapshot of the cluster. Pure.

    `draining` names further nodes of the same fleet run: no room is counted there.
    """
    options = options or DrainOptions()
    targets = tuple(dict.fromkeys(nodes))
    target_set = set(targets)
    known_nodes = {str(_meta(n).get("name")) for n in state.nodes}
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
        meta = _meta(pod)
        pods.append(
            PodPlan(
                namespace=str(meta.get("namespace") or ""),
                name=str(meta.get("name")),
                uid=str(meta.get("uid") or ""),
                node=str((pod.get("spec") or {}).get("nodeName")),
                action=verdict.action,
                reason=verdict.reason,
                workload=workload.key if workload else None,
                pdbs=tuple(sorted(key_of(b) for b in matched)),
                code=verdict.code,
                grace_seconds=grace_seconds(pod),
                gpus={k: f"{v.normalize():f}" for k, v in gpu_requests(pod.get("spec") or {})
                      .items()},
                ready=is_ready(pod),
            )
        )
        if verdict.action == "block":
            kind: BlockerKind = "local-data" if verdict.code == "local-data" else "unmanaged"
            fix = (
                "pass --delete-emptydir-data" if kind == "local-data"
                else "move it under a controller or delete it yourself"
            )
            blockers.append(Blocker(kind, f"Pod {key_of(pod)}", verdict.reason, fix))
        if len(matched) > 1:
            names = ", ".join(key_of(b) for b in matched)
            blockers.append(
                Blocker(
                    "multiple-pdbs",
                    f"Pod {key_of(pod)}",
                    f"is selected by {len(matched)} PodDisruptionBudgets ({names}); the "
                    "eviction API refuses it with HTTP 500 \"This pod has more than one "
                    "PodDisruptionBudget, which the eviction subresource does not support\"",
                    "make the budgets' selectors disjoint or delete all but one of them",
                )
            )

    notes: list[str] = []
    workload_plans = plan_workloads(state, targets, pods, workloads, options, blockers)
    budgets = _plan_budgets(state, pods, pdbs_of, blockers, warnings, workload_plans, notes)
    placements = _plan_room(state, (*targets, *draining), pods, on_nodes, blockers,
                            workload_plans)
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
    )


def _with_placement(pod: PodPlan, placements: Sequence[Placement]) -> PodPlan:
    for p in placements:
        if p.pod == pod.key and p.node is not None:
            return PodPlan(**{**asdict(pod), "replacement_on": p.node})
    return pod


def _plan_budgets(
    state: ClusterState,
    pods: Sequence[PodPlan],
    pdbs_of: Mapping[str, list[Obj]],
    blockers: list[Blocker],
    warnings: list[str],
    workload_plans: Sequence[WorkloadPlan] = (),
    notes: list[str] | None = None,
) -> list[BudgetPlan]:
    surged = {w.workload: w for w in workload_plans if w.strategy == "surge"}
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
        replicas = _budget_scale(state, pdb)
        best = pdbmath.best_case_disruptions(spec, replicas)
        status = pdb.get("status") or {}
        now = status.get("disruptionsAllowed")
        covered = {workload_of.get(k) for k in on_node}
        surge = sum(surged[w].surge for w in covered if w in surged)
        all_surged = bool(covered) and all(w in surged for w in covered)
        best_surged = pdbmath.best_case_disruptions(spec, replicas + surge) if surge else best
        plans.append(
            BudgetPlan(
                namespace=str(_meta(pdb).get("namespace")),
                name=str(_meta(pdb).get("name")),
                spec=dict(pdb.get("spec") or {}),
                replicas=replicas,
                best_case_disruptions=best,
                disruptions_allowed_now=int(now) if isinstance(now, int) else None,
                pods_on_node=on_node,
                surge=surge,
                best_case_with_surge=best_surged,
            )
        )
        # An unready pod under AlwaysAllow is evictable whatever the budget says.
        evictable_anyway = spec.unhealthy_pod_eviction_policy == "AlwaysAllow" and all(
            not p.ready for p in pods if p.key in on_node
        )
        if best == 0 and best_surged > 0 and all_surged and notes is not None:
            what, _ = _describe_budget(spec, replicas)
            notes.append(
                f"PodDisruptionBudget {bkey}: {what} allows no eviction evict-first (a wedge), "
                f"but with the surge of {surge} Ready pod(s) the same budget allows "
                f"{best_surged}; the budget is respected, not bypassed"
            )
        elif best_surged == 0 and not evictable_anyway:
            what, fix = _describe_budget(spec, replicas)
            if surge:
                what += f" (and {replicas + surge} while surged)"
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


def _budget_scale(state: ClusterState, pdb: Obj) -> int:
    """Sum of the scales of the workloads whose pods the budget selects (the disruption
    controller's expectedCount); the matched pod count when no controller is known."""
    ns = _meta(pdb).get("namespace")
    try:
        selector = pdb_selector(pdb)
    except SelectorError:
        return 0
    if selector is None:
        return 0
    matched = [
        p for p in state.pods
        if _meta(p).get("namespace") == ns and selector.matches(_meta(p).get("labels") or {})
        and not is_finished(p)
    ]
    scales: dict[str, int] = {}
    unknown = 0
    for pod in matched:
        w = resolve_workload(pod, state.controllers)
        if w is None or w.replicas is None:
            unknown += 1
        else:
            scales[w.key] = w.replicas
    return sum(scales.values()) + unknown


def _plan_room(
    state: ClusterState,
    targets: Sequence[str],
    pods: Sequence[PodPlan],
    raw: Sequence[Obj],
    blockers: list[Blocker],
    workload_plans: Sequence[WorkloadPlan] = (),
) -> list[Placement]:
    specs = {key_of(p): p.get("spec") or {} for p in raw}
    # A workload needs room for as many new pods as it lacks off the drained nodes: all of
    # its pods here on a first run, none on a rerun whose surge pods already run elsewhere.
    lacking = {w.workload: _lacking(state, w, targets) for w in workload_plans}
    wanted = []
    for p in pods:
        if not p.needs_replacement:
            continue
        if p.workload in lacking:
            if lacking[p.workload] <= 0:
                continue
            lacking[p.workload] -= 1
        wanted.append((p.key, specs[p.key]))
    if not wanted:
        return []
    placements = place_replacements(wanted, state.nodes, state.pods, excluded=targets)
    by_key = {p.key: p for p in pods}
    for placement in placements:
        if placement.node is not None:
            continue
        pod = by_key[placement.pod]
        needs = ", ".join(f"{k}: {v}" for k, v in pod.gpus.items()) or "its CPU/memory requests"
        reasons = "; ".join(f"{n}: {r}" for n, r in sorted(placement.reasons.items()))
        blockers.append(
            Blocker(
                "no-room",
                f"Pod {pod.key}",
                f"no other schedulable node has room for its replacement (needs {needs}): "
                f"{reasons or 'no other nodes'}",
                "add a node first (drainsafe drain --surge waits for one) or free capacity "
                "elsewhere; evicting now would leave the replacement Pending",
            )
        )
    return placements


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
    excluded = set(targets)
    elsewhere = sum(
        1 for p in state.pods
        if is_active(p) and node_of(p) is not None and node_of(p) not in excluded
        and (w := resolve_workload(p, state.controllers)) is not None and w.key == plan.workload
    )
    return min(len(plan.pods), max(0, plan.replicas - elsewhere))


# -- strategy per workload --------------------------------------------------------------------


def _condition(obj: Obj, kind: str) -> Obj:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return {}


def _owned_replicasets(state: ClusterState, deployment: Obj) -> list[Obj]:
    ns, name = meta(deployment).get("namespace"), meta(deployment).get("name")
    out = []
    for key, obj in state.controllers.items():
        if not key.startswith("ReplicaSet/") or meta(obj).get("namespace") != ns:
            continue
        ref = controller_ref(obj)
        if ref is not None and ref.get("kind") == "Deployment" and ref.get("name") == name:
            out.append(obj)
    return out


def _startup(state: ClusterState, workload: str, template: Obj) -> float | None:
    """A replacement's start-up: the longest observed on the workload's Ready pods, else the
    readiness probe's initialDelaySeconds."""
    seen = [
        t for p in state.pods
        if (w := resolve_workload(p, state.controllers)) is not None and w.key == workload
        and (t := started_up_seconds(p)) is not None
    ]
    if seen:
        return max(seen)
    delays = [
        float((c.get("readinessProbe") or c.get("startupProbe") or {})
               .get("initialDelaySeconds") or 0)
        for c in ((template.get("spec") or {}).get("containers") or [])
    ]
    return max(delays) if delays and max(delays) > 0 else None


def plan_workloads(
    state: ClusterState,
    targets: Sequence[str],
    pods: Sequence[PodPlan],
    workloads: Mapping[str, Workload],
    options: DrainOptions,
    blockers: list[Blocker],
) -> list[WorkloadPlan]:
    """Choose surge or evict for each workload with pods to replace on the nodes. Pure."""
    out = []
    for key, w in sorted(workloads.items()):
        mine = [p for p in pods if p.workload == key and p.needs_replacement]
        if not mine:
            continue
        obj = state.controllers.get(key) or {}
        record = _surge_record(obj)
        replicas = record.replicas if record is not None else w.replicas
        if record is not None and record.guard:
            # The eviction guard's surge for another drainer is a bounded hold, not a drain
            # left unfinished: the drain waits for its restore before surging (execute).
            record = None
        template = (obj.get("spec") or {}).get("template") or {}
        startup = _startup(state, key, template)
        grace = max(p.grace_seconds for p in mine)
        autoscaler = None
        strategy: Strategy = "evict"
        why = ""
        if record is not None and record.node not in targets:
            blockers.append(Blocker(
                "surge-owned", f"{w.kind} {w.namespace}/{w.name}",
                f"is surged for an unfinished drain of node {record.node} (recorded "
                f"{record.at} by {record.by})",
                f"finish that drain first (drainsafe drain {record.node}), or give it up "
                f"(drainsafe uncordon {record.node}) which restores the scale"))
        if options.strategy == "evict" and record is None:
            why = "--strategy evict"
        elif w.kind != "Deployment" or not obj:
            why = {
                "StatefulSet": "a StatefulSet pod keeps its name and identity: its "
                "replacement can only start once it is gone",
                "ReplicaSet": "a bare ReplicaSet (no Deployment): evict-first",
            }.get(w.kind, f"{w.kind}: evict-first")
        else:
            rollout = None if record is not None else rollout_in_progress(
                obj, _owned_replicasets(state, obj))
            if rollout is not None:
                why = (f"mid-rollout ({rollout}): a scale now is spread over the "
                       "ReplicaSets, so drainsafe stands down to evict-first")
            else:
                strategy = "surge"
                hpa = autoscaler_for(WorkloadRef("Deployment", w.namespace, w.name),
                                     state.autoscalers)
                if hpa is not None:
                    autoscaler = key_of(hpa)
                why = (f"Deployment: {len(mine)} more pod(s) first, Ready elsewhere before "
                       "the old ones are evicted"
                       + (f"; the HPA {autoscaler} owns the scale: its minReplicas is "
                          "raised instead" if autoscaler else ""))
        k = len(mine)
        if strategy == "surge":
            floor = replicas
            expected = None if startup is None else startup + grace
        else:
            floor = None if replicas is None else max(replicas - 1, 0)
            expected = None if startup is None else k * (startup + grace)
        out.append(WorkloadPlan(
            workload=key, strategy=strategy, pods=tuple(p.key for p in mine),
            replicas=replicas, surge=k if strategy == "surge" else 0, floor=floor,
            startup_seconds=startup, expected_seconds=expected, why=why,
            autoscaler=autoscaler, resumed=record is not None))
    # A rerun after the old pods were all evicted but before the scale was restored: nothing
    # left to move, but the scale (or the HPA's bounds) still to restore.
    planned = {w.workload for w in out}
    for key, obj in sorted(state.controllers.items()):
        record = _surge_record(obj)
        if key in planned or record is None or record.guard or record.node not in targets:
            continue
        bounds = record.autoscaler
        out.append(WorkloadPlan(
            workload=key, strategy="surge", pods=(), replicas=record.replicas, surge=0,
            floor=record.replicas, startup_seconds=None, expected_seconds=0.0,
            why="an earlier run surged it and was stopped before the restore: restore",
            autoscaler=None if bounds is None
            else f"{meta(obj).get('namespace')}/{bounds.name}",
            resumed=True))
    return out


def guard_surges(state: ClusterState) -> list[str]:
    """Deployments ("Deployment/ns/name") the eviction guard has surged right now: their
    stand-ins hold room that its restore gives back within seconds to minutes."""
    return sorted(key for key, obj in state.controllers.items()
                  if key.startswith("Deployment/") and guard_surged(obj))


def _surge_record(obj: Obj) -> SurgeRecord | None:
    try:
        return SurgeRecord.of(obj)
    except ValueError:
        return None
