"""What maintenance left on the cluster, from plain objects: one home for audit and metrics.

Each cordoned node (since when, and by whom: a `drainsafe drain`, a NodeMaintenance, or not
drainsafe), each workload carrying a drainsafe surge record (since when, by whom: a drain, a
NodeMaintenance's drain, or the eviction guard), and each NodeMaintenance's phase.
`drainsafe audit` (drain.cordon.read_facts) and the controller's /metrics
(controller.metrics.MaintenanceCollector, from its informer caches) both read them here, so
the two never disagree on what is forgotten.

Who cordoned comes from drainsafe's record on the node (drain.ownership.audit_record): a
cordon with no record, or one that was already there when drainsafe drained the node, is
not drainsafe's, and its start is unknown (spec.unschedulable carries no time, as
kubectl's cordon writes nothing else: kubectl v1.33 pkg/drain/cordon.go). A NodeMaintenance
names itself in the record (drain.ownership.CORDONED_FOR); its drain's surges are its own
through the node they were made for. A NodeMaintenance's phase is its status.phase
(maintenance.progress), Pending until the leader first writes it, as a Pod's phase is
Pending until the kubelet reports.

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from drainsafe.drain.filters import DrainOptions, classify
from drainsafe.drain.ownership import (
    SURGE_KINDS,
    CordonRecord,
    SurgedWorkload,
    SurgeRecord,
    audit_record,
    cordoned_for,
    is_cordoned,
)
from drainsafe.kube.objects import WorkloadRef, meta, node_of, parse_time
from drainsafe.maintenance.progress import (
    NODE_STATES,
    NodeState,
    Phase,
    read_nodes,
)

Obj = Mapping[str, Any]

# Who holds a node out of service: a `drainsafe drain` (or `drainsafe uncordon`'s
# absence), a NodeMaintenance, or someone drainsafe has no record of.
CordonBy = Literal["drain", "nodemaintenance", "other"]
# Whose surge a workload carries: a `drainsafe drain`, a NodeMaintenance's drain, or the
# eviction guard (drainsafe controller).
SurgeBy = Literal["drain", "nodemaintenance", "guard"]
PHASES: tuple[Phase, ...] = get_args(Phase)

_OPTIONS = DrainOptions()


@dataclass(frozen=True)
class NodeFact:
    """A node as audit lists it (`record`), and who holds its cordon since when."""

    record: CordonRecord
    by: CordonBy
    maintenance: str  # the NodeMaintenance's name when by == "nodemaintenance", else ""
    since: float | None  # unix seconds of drainsafe's record; None: unknown

    @property
    def node(self) -> str:
        return self.record.node


@dataclass(frozen=True)
class SurgeFact:
    """A workload left scaled up as audit lists it (`record`), and whose surge it is."""

    workload: WorkloadRef
    record: SurgedWorkload
    by: SurgeBy
    maintenance: str
    since: float | None


@dataclass(frozen=True)
class MaintenanceFact:
    name: str
    phase: Phase
    nodes: Mapping[NodeState, int]  # how many of its nodes are in each state


@dataclass(frozen=True)
class MaintenanceFacts:
    nodes: tuple[NodeFact, ...]  # the cordoned nodes (every node when asked for all)
    surges: tuple[SurgeFact, ...]
    maintenances: tuple[MaintenanceFact, ...] = ()

    @property
    def cordons(self) -> tuple[NodeFact, ...]:
        return tuple(n for n in self.nodes if n.record.cordoned)

    @property
    def forgotten(self) -> bool:
        """What `drainsafe audit` exits 1 for: a cordon no drainsafe record owns, or a
        workload a drain left scaled up."""
        return any(n.record.forgotten for n in self.nodes) or bool(self.surges)


def node_fact(node: Obj, pods_on_node: Iterable[Obj]) -> NodeFact:
    here = list(pods_on_node)
    daemons = sum(1 for p in here if classify(p, _OPTIONS).action == "skip")
    record = audit_record(node, len(here), daemons)
    if record.owned_by != "drainsafe":
        return NodeFact(record, "other", "", None)
    since = parse_time(record.since)
    maintenance = cordoned_for(node)
    if maintenance:
        return NodeFact(record, "nodemaintenance", maintenance, since)
    return NodeFact(record, "drain", "", since)


def surge_fact(kind: str, obj: Obj, by_node: Mapping[str, NodeFact]) -> SurgeFact | None:
    """The workload's surge, or None without a (readable) record: an unreadable one is the
    drain's to report when it next writes."""
    try:
        record = SurgeRecord.of(obj)
    except ValueError:
        return None
    if record is None:
        return None
    m = meta(obj)
    ref = WorkloadRef(kind, str(m.get("namespace") or ""), str(m.get("name")))
    row = SurgedWorkload(
        workload=str(ref), node=",".join(record.nodes),  # a shared surge: every holder
        replicas_now=int((obj.get("spec") or {}).get("replicas", 1)),
        replicas_before=record.replicas,
        autoscaler=record.autoscaler.name if record.autoscaler else "",
        by=record.by, since=record.at)
    since = parse_time(record.at)
    if record.guard:
        return SurgeFact(ref, row, "guard", "", since)
    held = next((by_node[n] for n in record.nodes if n in by_node), None)
    if held is not None and held.by == "nodemaintenance":
        return SurgeFact(ref, row, "nodemaintenance", held.maintenance, since)
    return SurgeFact(ref, row, "drain", "", since)


def maintenance_fact(obj: Obj) -> MaintenanceFact:
    status = obj.get("status") or {}
    raw = status.get("phase")
    phase: Phase = next((p for p in PHASES if p == raw), "Pending")
    counts = dict.fromkeys(NODE_STATES, 0)
    for progress in read_nodes(status).values():
        counts[progress.state] += 1
    return MaintenanceFact(str(meta(obj).get("name")), phase, counts)


def maintenance_facts(*, nodes: Iterable[Obj] = (), pods: Iterable[Obj] = (),
                      workloads: Mapping[str, Iterable[Obj]] | None = None,
                      maintenances: Iterable[Obj] = (), all_nodes: bool = False
                      ) -> MaintenanceFacts:
    """The facts from lists of nodes, pods, workloads by kind (drain.ownership.SURGE_KINDS;
    a list's items carry no kind) and NodeMaintenances. Nodes in the order given, then
    surges kind by kind in SURGE_KINDS' order."""
    on_node: dict[str, list[Obj]] = {}
    for pod in pods:
        name = node_of(pod)
        if name:
            on_node.setdefault(name, []).append(pod)
    facts = []
    for node in nodes:
        if all_nodes or is_cordoned(node):
            facts.append(node_fact(node, on_node.get(str(meta(node).get("name")), ())))
    by_node = {f.node: f for f in facts}
    surges = []
    for kind in SURGE_KINDS:
        for obj in (workloads or {}).get(kind, ()):
            fact = surge_fact(kind, obj, by_node)
            if fact is not None:
                surges.append(fact)
    return MaintenanceFacts(tuple(facts), tuple(surges),
                            tuple(maintenance_fact(m) for m in maintenances))
