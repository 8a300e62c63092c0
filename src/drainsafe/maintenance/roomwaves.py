"""Room and budgets for a wave: may a Pending node join the nodes in progress and the wave
chosen so far, and if not, why (issue 30: "nodes are chosen so that no workload loses
capacity (surge room counted, GPU and MIG), PDBs are never taken by surprise, and the nodes
whose workloads cannot surge are scheduled last and said so").

The room is the drain engine's own, not re-derived: drain.plan.plan_drain of the nodes in
progress, the wave so far and the candidate *together*, as drainsafe drain's fleet mode
plans its nodes, so the stand-ins, recreations and replacements of all of them are placed
at once (drain.room: first fit, largest GPU request first, else most constrained first,
nvidia.com/gpu and nvidia.com/mig-* counted; a placed one occupies its node; drain.plan: a
StatefulSet pod needs room twice, a LeaderWorkerSet a stand-in group plus its recreated pods, an
exclusive-topology one whole free domains). A candidate fits when that plan has no "no-room"
blocker the plan without it lacks. Nodes in progress are planned with what they still
need: a surge already Ready elsewhere asks for no room again (drain.plan._lacking). Pods
not yet scheduled (a stand-in just made, a group recreated under its names) hold no room
in a snapshot but will: each is first placed where it fits (drain.room, as the scheduler's
filters would), outside the nodes planned, before the wave's room is counted; so is each pod
going that comes back under its name (a StatefulSet's pod terminating, a LeaderWorkerSet
group one of whose pods is terminating), whose recreation does not exist yet: a node whose
cordon would leave such a recreation without room waits.

Budgets: a PodDisruptionBudget whose pods are on several nodes of the wave is disrupted by
each node's drain at once (one eviction queue per workload and node, drain.plan.Queue);
the wave takes no more nodes under a budget than it allows at best (drain.budgets'
best case, with the surge where its workloads surge, in whole groups for a
LeaderWorkerSet whose evictions take groups), so no drain waits on a budget another node
of the same wave spends. A budget that allows nothing at all is the drain's own refusal
("wedged-budget"), not a wait: it fails the node, as before.

A node that does not fit while nothing of the operation is in progress *cannot surge* now
(nothing this operation holds is in its way), nor does one with a workload that cannot
surge and whose capacity floor forbids evict-first (drain.floors, "below-floor": a rollout
in progress, a bare ReplicaSet): the reconciler says so on the node and starts it last
(maintenance.waves, `last`), and only once it fits (the rollout ended, the floor lowered);
a capacity floor that allows evict-first makes a plan fit that needs less room. That hold
is re-decided on every snapshot, not remembered (`still_cannot_surge`): a node said
CannotSurge that fits alone now (a node joined, another operation's stand-ins left, the
rollout ended) goes back in line among the others and may start in an ordinary wave;
while it still does not fit alone it stays last, its message that of the current snapshot.

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from drainsafe.drain.filters import DrainOptions
from drainsafe.drain.plan import DrainPlan, plan_drain
from drainsafe.drain.room import place_replacements
from drainsafe.drain.workloads import GROUP_KIND, ClusterState
from drainsafe.kube.objects import (
    WorkloadRef,
    controller_ref,
    is_active,
    is_terminal,
    is_terminating,
    key_of,
    lws_group_of,
    lws_recreates_group,
    meta,
    node_of,
)

# Why a Pending node does not join the wave: no room for what it needs beside the nodes in
# progress and the wave; a budget the wave already spends; a workload of it surged for a
# node of the wave; no room even with nothing of the operation in progress.
HoldCode = Literal["no-room", "budget", "surging", "cannot-surge"]
Obj = Mapping[str, Any]
RECREATED = " (recreated)"  # the key of a pod's recreation, placed before it exists


@dataclass(frozen=True)
class Hold:
    code: HoldCode
    message: str


def _display(workload: str) -> str:
    ref = WorkloadRef.parse(workload)
    return f"{ref.kind} {ref.namespace}/{ref.name}"


def _room_blockers(plan: DrainPlan) -> set[str]:
    """The objects refused for room (their messages list every node, so they change with
    the nodes planned; the objects do not)."""
    return {b.object for b in plan.blockers if b.kind == "no-room"}


def _no_room_message(plan: DrainPlan, new: set[str]) -> str:
    """"no room for Deployment ns/x (Pod ns/x-1: ...)", the workloads first."""
    pods = {f"Pod {p.key}": p for p in plan.pods}
    workloads = sorted({_display(w) for o in new
                        if o in pods and (w := pods[o].workload) is not None})
    first = next(b for b in plan.blockers if b.kind == "no-room" and b.object == min(new))
    head = f"no room for {', '.join(workloads)}" if workloads else "no room"
    return f"{head} ({first.object}: {first.message})"


def _node_units(plan: DrainPlan, budget: str) -> dict[str, int]:
    """Nodes of the plan with pods to evict under `budget`: each node's drain disrupts it
    once at a time per workload (one queue per workload and node)."""
    out: dict[str, set[str | None]] = {}
    for p in plan.pods:
        if p.action == "evict" and budget in p.pdbs:
            out.setdefault(p.node, set()).add(p.workload)
    return {node: len(ws) for node, ws in out.items()}


def _budget_hold(plan: DrainPlan, node: str) -> Hold | None:
    for b in plan.budgets:
        units = _node_units(plan, b.key)
        if node not in units:
            continue
        allowed = max(b.best_case_disruptions, b.best_case_with_surge)
        wanted = sum(units.values())
        if allowed and wanted > allowed:
            unit = "pod(s)" if b.group_size is None else f"whole group(s) of {b.group_size}"
            return Hold("budget", f"PodDisruptionBudget {b.key} allows {allowed} {unit} at "
                                  f"once; with this node the wave would take {wanted} "
                                  f"(nodes {', '.join(sorted(units))})")
    return None


def _recreations(state: ClusterState) -> list[tuple[str, Obj]]:
    """Pods going that come back under their names once gone (drain.strategy): a
    StatefulSet's pod terminating, and every pod of a LeaderWorkerSet group that lws
    recreates whole when one of its pods is terminating (kubernetes-sigs/lws v0.10.0
    pod_controller.go handleRestartPolicy). Their room is not in the snapshot yet."""
    going: set[tuple[str, str, int]] = set()
    for p in state.pods:
        group = lws_group_of(p)
        if group is not None and is_terminating(p) and not is_terminal(p):
            ns = str(meta(p).get("namespace") or "")
            lws = state.controllers.get(str(WorkloadRef(GROUP_KIND, ns, group[0])))
            if lws is None or lws_recreates_group(lws):
                going.add((ns, *group))
    out = []
    for p in state.pods:
        if is_terminal(p):
            continue
        group = lws_group_of(p)
        owner = (controller_ref(p) or {}).get("kind")
        if (is_terminating(p) and owner == "StatefulSet") or (
                group is not None and (str(meta(p).get("namespace") or ""), *group) in going):
            out.append((key_of(p) + RECREATED, p.get("spec") or {}))
    return out


def _claimed(state: ClusterState, excluded: Sequence[str]) -> tuple[ClusterState, list[str]]:
    """The snapshot with each unscheduled pod bound where it would fit outside `excluded`,
    and the room of each pod to be recreated under its name (`_recreations`) taken there;
    and those of them that fit nowhere."""
    unbound = {key_of(p): p for p in state.pods if node_of(p) is None and is_active(p)}
    again = _recreations(state)
    if not unbound and not again:
        return state, []
    # A pod coming back under its name is gone first: its room is its recreation's.
    gone = {key.removesuffix(RECREATED) for key, _ in again}
    staying = [p for p in state.pods if key_of(p) not in gone]
    placed = place_replacements([*((k, p.get("spec") or {}) for k, p in unbound.items()),
                                 *again], state.nodes, staying, excluded=excluded)
    where = {p.pod: p.node for p in placed if p.node is not None}
    pods: list[Obj] = [
        p if key_of(p) not in where else
        {**p, "spec": {**(p.get("spec") or {}), "nodeName": where[key_of(p)]}}
        for p in staying]
    # A recreation's room as a pod of no workload (it counts for no workload's replicas).
    pods += [{"metadata": {"name": key, "namespace": ""}, "status": {"phase": "Pending"},
              "spec": {**spec, "nodeName": where[key]}} for key, spec in again if key in where]
    return (ClusterState(nodes=state.nodes, pods=pods, pdbs=state.pdbs,
                         controllers=state.controllers, autoscalers=state.autoscalers),
            [key for key in [*unbound, *(k for k, _ in again)] if key not in where])


class WaveRoom:
    """Room and budget checks over one snapshot of the cluster (`state`, as
    drain.preflight.read_cluster reads it) for the nodes in progress (`in_progress`)."""

    def __init__(self, state: ClusterState, options: DrainOptions,
                 in_progress: Sequence[str]) -> None:
        self.state, self.options = state, options
        self.in_progress = tuple(in_progress)
        self._plans: dict[tuple[str, ...], tuple[DrainPlan, list[str]]] = {}

    def _planned(self, nodes: Sequence[str]) -> tuple[DrainPlan, list[str]]:
        """The plan of `nodes` together, and the recreations left without room."""
        key = tuple(nodes)
        if key not in self._plans:
            state, homeless = _claimed(self.state, key)
            self._plans[key] = (plan_drain(state, key, self.options), homeless)
        return self._plans[key]

    def _plan(self, nodes: Sequence[str]) -> DrainPlan:
        return self._planned(nodes)[0]

    def admit(self, wave: Sequence[str], node: str) -> Hold | None:
        """None: `node` may start beside the nodes in progress and `wave`; else why not."""
        return self._hold((*self.in_progress, *wave), node)

    def still_cannot_surge(self, said: Collection[str]) -> dict[str, Hold]:
        """Of the nodes said CannotSurge (the reconciler's status row), those that
        still would not fit with nothing of the operation in progress or starting, on
        this snapshot, with why. The others fit alone now and are no longer held last.

        Judged alone whatever is in progress: a node that fits alone beside the
        operation's own cordons fits with nothing of it in progress. One that does not
        stays said (its room may be what the nodes in progress hold, which this snapshot
        cannot tell from a lasting shortage), so its reason does not swing between
        CannotSurge and WaitingForRoom while others drain. Its plan alone is the one
        `admit` makes of it anyway (shared), so this costs no other plan."""
        out = {}
        for node in sorted(said):
            hold = self._hold((), node)
            if hold is not None:
                out[node] = hold
        return out

    def _hold(self, base: tuple[str, ...], node: str) -> Hold | None:
        floor = next((b for b in self._plan((node,)).blockers if b.kind == "below-floor"),
                     None)
        if floor is not None:
            # nothing this operation holds is in its way: waiting helps only if the
            # workload can surge later (a rollout ends) or the floor is lowered
            return Hold("cannot-surge", f"cannot surge: {floor.object} {floor.message}")
        if base:
            # One surge of a StatefulSet or LeaderWorkerSet at a time (drain.sharedsurge's
            # Surges.lock): a node whose such workload the wave surges would wait; after
            # that surge it may have less to move (a group recreated). A Deployment's
            # surge is shared (its part joined on room), so only room holds it back.
            surged = {w.workload for w in self._plan(base).workload_plans
                      if w.strategy == "surge" and w.identity != "interchangeable"}
            mine = {p.workload for p in self._plan((node,)).pods if p.needs_replacement}
            shared = sorted(w for w in mine & surged if w is not None)
            if shared:
                return Hold("surging", f"{_display(shared[0])} is surged for "
                                       f"{', '.join(base)} (one surge of a workload at a time)")
        together, homeless = self._planned((*base, node))
        before = self._planned(base)[1] if base else []
        if len(homeless) > len(before):
            # its cordon takes the room of a pod to be scheduled, or coming back under its
            # name
            going = ", ".join(k.removesuffix(RECREATED) for k in homeless
                              if k not in before)
            message = f"no room left for {going}, to be scheduled"
            return (Hold("no-room", f"{message}, beside {', '.join(base)}") if base
                    else Hold("cannot-surge", f"cannot surge: {message}"))
        new = _room_blockers(together) - (_room_blockers(self._plan(base)) if base else set())
        if new:
            message = _no_room_message(together, new)
            if base:
                return Hold("no-room", f"{message}, beside {', '.join(base)}")
            return Hold("cannot-surge", f"cannot surge: {message}")
        if base:
            return _budget_hold(together, node)
        return None
