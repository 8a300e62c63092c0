"""The drain plan: a pure function of cluster state (plain API dicts) and options.

Pod classification follows kubectl's pkg/drain/filters.go (makeFilters): small filters
applied in order, each returning a verdict and a reason, the first verdict wins. Unlike
kubectl there is no --force and no --ignore-daemonsets: DaemonSet and mirror pods always
stay (the NVIDIA device plugin must be the last thing on a GPU node), unmanaged pods always
block (drainsafe never deletes a pod outside the Eviction API).

On top, what no drain tool checks before cordoning (research drain-anchors.md section 6):
- the PDBs each pod is under: several means the eviction API answers HTTP 500 ("This pod
  has more than one PodDisruptionBudget"), so refuse now, naming the budgets;
- whether each budget can ever allow a disruption at its workload's scale
  (drainsafe.pdb.best_case_disruptions); zero is a wedge that would retry forever;
- room for every replacement on the other schedulable nodes (drain.room);
- grace periods and the longest expected wait, and the eviction order: pods of one
  workload one at a time (the next only once the previous one's replacement is Ready),
  independent workloads in parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from drainsafe import pdb as pdbmath
from drainsafe.budget import DEFAULT_GRACE_SECONDS
from drainsafe.drain.room import Placement, gpu_requests, place_replacements
from drainsafe.labels import Selector, SelectorError, from_label_selector

Obj = Mapping[str, Any]
Action = Literal["evict", "skip", "block", "wait"]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
REPLICATED_KINDS = ("ReplicaSet", "StatefulSet", "ReplicationController", "Job")


@dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str


@dataclass(frozen=True)
class DrainOptions:
    delete_emptydir_data: bool = False


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def key_of(obj: Obj) -> str:
    meta = _meta(obj)
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


def controller_ref(obj: Obj) -> Obj | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def is_finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_terminating(pod: Obj) -> bool:
    return bool(_meta(pod).get("deletionTimestamp"))


def is_ready(pod: Obj) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


# -- filters (kubectl pkg/drain/filters.go, in its order, plus "finished" first) ------------

PodFilter = Callable[[Obj, DrainOptions], Verdict | None]


def finished_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    # kubectl lets Succeeded/Failed pods through every filter: nothing is lost.
    if is_finished(pod):
        phase = (pod.get("status") or {}).get("phase")
        return Verdict("evict", f"finished ({phase}); no replacement needed")
    return None


def terminating_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    if is_terminating(pod):
        return Verdict("wait", "already terminating; waiting for it to go")
    return None


def daemonset_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    ref = controller_ref(pod)
    if ref is not None and ref.get("kind") == "DaemonSet":
        return Verdict("skip", f"DaemonSet {ref.get('name')} pod stays on the node")
    return None


def mirror_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    if MIRROR_ANNOTATION in (_meta(pod).get("annotations") or {}):
        return Verdict("skip", "mirror (static) pod stays; the kubelet owns it")
    return None


def local_storage_filter(pod: Obj, options: DrainOptions) -> Verdict | None:
    # Only emptyDir counts as local storage, as in kubectl (hostPath does not).
    volumes = [
        v.get("name") for v in (pod.get("spec") or {}).get("volumes") or [] if "emptyDir" in v
    ]
    if volumes and not options.delete_emptydir_data:
        return Verdict(
            "block",
            f"emptyDir data ({', '.join(map(str, volumes))}) would be lost; "
            "pass --delete-emptydir-data if that is acceptable (model caches, /dev/shm)",
        )
    return None


def unreplicated_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    if controller_ref(pod) is None:
        return Verdict(
            "block",
            "not managed by a controller: evicting it would lose it for good; delete or "
            "re-create it under a Deployment yourself (drainsafe has no --force)",
        )
    return None


FILTERS: tuple[PodFilter, ...] = (
    finished_filter,
    terminating_filter,
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
    return Verdict("evict", f"managed by {ref.get('kind')} {ref.get('name')}")


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
    kind: str  # unmanaged | local-data | multiple-pdbs | wedged-budget | no-room | bad-budget
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
    grace_seconds: int
    gpus: Mapping[str, str]
    ready: bool
    replacement_on: str | None = None  # where the room check placed its replacement

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def needs_replacement(self) -> bool:
        return self.action == "evict" and self.workload is not None and "finished" not in (
            self.reason
        )


@dataclass(frozen=True)
class BudgetPlan:
    namespace: str
    name: str
    spec: Mapping[str, Any]
    replicas: int
    best_case_disruptions: int
    disruptions_allowed_now: int | None
    pods_on_node: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


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


def _grace(pod: Obj) -> int:
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return int(value) if isinstance(value, int) else int(DEFAULT_GRACE_SECONDS)


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
                grace_seconds=_grace(pod),
                gpus={k: f"{v.normalize():f}" for k, v in gpu_requests(pod.get("spec") or {})
                      .items()},
                ready=is_ready(pod),
            )
        )
        if verdict.action == "block":
            kind = "local-data" if "emptyDir" in verdict.reason else "unmanaged"
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

    budgets = _plan_budgets(state, pods, pdbs_of, blockers, warnings)
    placements = _plan_room(state, (*targets, *draining), pods, on_nodes, blockers)
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
) -> list[BudgetPlan]:
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
        plans.append(
            BudgetPlan(
                namespace=str(_meta(pdb).get("namespace")),
                name=str(_meta(pdb).get("name")),
                spec=dict(pdb.get("spec") or {}),
                replicas=replicas,
                best_case_disruptions=best,
                disruptions_allowed_now=int(now) if isinstance(now, int) else None,
                pods_on_node=on_node,
            )
        )
        # An unready pod under AlwaysAllow is evictable whatever the budget says.
        evictable_anyway = spec.unhealthy_pod_eviction_policy == "AlwaysAllow" and all(
            not p.ready for p in pods if p.key in on_node
        )
        if best == 0 and not evictable_anyway:
            what, fix = _describe_budget(spec, replicas)
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
) -> list[Placement]:
    specs = {key_of(p): p.get("spec") or {} for p in raw}
    wanted = [(p.key, specs[p.key]) for p in pods if p.needs_replacement]
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
