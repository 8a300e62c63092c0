"""Group rules: LeaderWorkerSets, whose replicas are whole groups of pods on several nodes.

In kubernetes-sigs/lws v0.10.0 (api/leaderworkerset/v1/leaderworkerset_types.go,
pkg/controllers/pod_controller.go) the default restartPolicy RecreateGroupOnPodRestart (and
RecreateGroupAfterStart once the group has started) recreates the whole group as soon as any
of its pods is deleted or evicted: the controller deletes the leader with foreground
propagation and the group's worker StatefulSet and pods go with it. Those deletions are not
evictions: no PDB is asked. So the budget must be asked before the first pod goes, and must
count in groups (drainsafe.pdb group_disruptions). Budgets of each part are budget.py's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from drainsafe.budget import Budget
from drainsafe.check.context import Context
from drainsafe.check.findings import Edit, Finding, Severity
from drainsafe.check.model import LWS_NAME_LABEL, Group, Index, Pdb, Workload
from drainsafe.check.rules.registry import rule
from drainsafe.check.rules.termination import serving, shutdown_deadline
from drainsafe.check.snippets import dump, pod_fix
from drainsafe.pdb import PdbSpec, group_disruptions, whole_group_spec

LWS_PDB_MISSING = rule(
    "lws-pdb-missing", Severity.ERROR,
    "A LeaderWorkerSet that recreates whole groups has no PodDisruptionBudget.",
    """
Under restartPolicy RecreateGroupOnPodRestart (the default) or RecreateGroupAfterStart, one
evicted pod takes its whole group down: the lws controller deletes the group's leader with
foreground propagation, and its worker StatefulSet and every worker go with it. Those are
deletions, not evictions, so no budget protects the rest of the group; without a budget a
drain of several nodes, or an autoscaler's scale-down, can take several groups (each a whole
model replica that reloads for minutes) down at once. A PodDisruptionBudget selecting the
set's pods (lws labels them leaderworkerset.sigs.k8s.io/name) with maxUnavailable: 1 admits
one eviction at a time, and after it the lost group's pods hold the budget until the group
is Ready again: one group at a time.

Sources: kubernetes-sigs/lws v0.10.0 api/leaderworkerset/v1/leaderworkerset_types.go
(restartPolicy, default RecreateGroupOnPodRestart; SetNameLabelKey),
pkg/controllers/pod_controller.go (the group is recreated when a pod is deleted);
kubernetes.io/docs/concepts/workloads/pods/disruptions/.
""")


@LWS_PDB_MISSING.check
def _lws_pdb_missing(index: Index, context: Context) -> Iterator[Finding]:
    for g in index.groups:
        if not g.recreates_group or index.pdbs_for_group(g):
            continue
        yield LWS_PDB_MISSING.finding(
            g,
            f"restartPolicy {g.restart_policy} and no PodDisruptionBudget: one evicted pod "
            f"recreates its whole group of {g.size} pods, and nothing stops a drain taking "
            "several groups at once",
            dump({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                  "metadata": {"name": g.ref.name, "namespace": g.ref.namespace},
                  "spec": {"maxUnavailable": 1,
                           "selector": {"matchLabels": {LWS_NAME_LABEL: g.ref.name}}}}),
            path=("metadata", "name"),
        )


LWS_PDB_PARTIAL_GROUP = rule(
    "lws-pdb-partial-group", Severity.WARNING,
    "A PodDisruptionBudget over a LeaderWorkerSet's pods does not allow whole groups.",
    """
A PodDisruptionBudget counts pods, but a LeaderWorkerSet that recreates groups loses a whole
group (size pods) for one eviction. A budget that allows a number of pods that is not a
whole number of groups says something lws does not do: with size 4, maxUnavailable: 2 or
minAvailable: replicas x 4 - 2 admits an eviction that takes 4 pods down. Count in groups:
minAvailable in pods = groups that must stay x size, maxUnavailable = groups that may go x
size. The fix rounds to the whole groups the budget already allows, so it never lets more
pods go; a budget that allows less than one group (maxUnavailable: 1) is left as it is:
one eviction at a time is the tightest a pod budget can say.

Sources: kubernetes-sigs/lws v0.10.0 api/leaderworkerset/v1/leaderworkerset_types.go
(size: the pods of a group, leader included); kubernetes/kubernetes
pkg/controller/disruption/disruption.go (expected pods are the owning controllers' scales).
""")


@LWS_PDB_PARTIAL_GROUP.check
def _lws_pdb_partial_group(index: Index, context: Context) -> Iterator[Finding]:
    for g in index.groups:
        if not g.recreates_group or g.groups is None or g.size is None or g.size < 2:
            continue
        for pdb in index.pdbs_for_group(g):
            if pdb.spec is None or not _only_group(index, pdb, g):
                continue
            budget = group_disruptions(pdb.spec, groups=g.groups, size=g.size)
            if budget.fits or budget.groups_allowed == 0:
                continue
            fixed = whole_group_spec(pdb.spec, groups=g.groups, size=g.size)
            field, value = _field(fixed)
            yield LWS_PDB_PARTIAL_GROUP.finding(
                pdb,
                f"allows {budget.pods_allowed} of {g.groups * g.size} pods of "
                f"{g.ref.kind} {g.ref.name}: {budget.groups_allowed} whole group(s) of "
                f"{g.size} and {budget.pods_allowed % g.size} pod(s) more, but the next "
                f"eviction takes a whole group of {g.size} pods",
                dump({"spec": {field: value}}) if field else
                f"express the budget in whole groups of {g.size} pods",
                path=("spec", field or "minAvailable"),
                edits=(Edit(("spec", field), value),) if field else (),
            )


def _only_group(index: Index, pdb: Pdb, g: Group) -> bool:
    """Whether the PDB selects this set's pods and nothing else (else its numbers mix)."""
    parts = {id(p) for p in g.parts}
    selected = index.workloads_selected_by(pdb)
    return bool(selected) and all(id(w) in parts for w in selected)


def _field(spec: PdbSpec | None) -> tuple[str, int] | tuple[None, None]:
    if spec is None:
        return None, None
    if isinstance(spec.max_unavailable, int):
        return "maxUnavailable", spec.max_unavailable
    if isinstance(spec.min_available, int):
        return "minAvailable", spec.min_available
    return None, None


LWS_WORKER_GRACE = rule(
    "lws-worker-grace", Severity.ERROR,
    "A LeaderWorkerSet's workers are killed before its leader has drained.",
    """
When a group goes (an eviction, a rollout, the group recreated), the leader and the workers
are deleted together, and each gets its own terminationGracePeriodSeconds. The leader's
in-flight requests run on the workers too (tensor or pipeline parallel across nodes): a
worker killed at its grace period while the leader is still finishing cuts those requests.
Give the workers at least the leader's grace budget: drain delay + shutdown deadline +
buffer (drainsafe.budget). Raising a grace period is safe.

Sources: kubernetes-sigs/lws v0.10.0 api/leaderworkerset/v1/leaderworkerset_types.go
(leaderTemplate and workerTemplate, separate pod templates);
kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination.
""")


def leader_drain(leader: Workload, context: Context) -> Budget | None:
    """The leader's longest known grace budget (None: no deadline known)."""
    longest: Budget | None = None
    for s in serving(leader):
        deadline, _ = shutdown_deadline(leader, s, context)
        if deadline is None:
            continue
        budget = Budget(leader.grace, s.delay.known, deadline, context.buffer_seconds)
        if longest is None or budget.required > longest.required:
            longest = budget
    return longest


@LWS_WORKER_GRACE.check
def _lws_worker_grace(index: Index, context: Context) -> Iterator[Finding]:
    for g in index.groups:
        if g.leader is None or g.workers is None:
            continue  # one template: grace-budget judges it
        drain = leader_drain(g.leader, context)
        workers = g.workers
        if drain is None or workers.grace >= drain.required:
            continue
        grace = math.ceil(drain.required)
        capped = context.max_grace_seconds is not None and grace > context.max_grace_seconds
        yield LWS_WORKER_GRACE.finding(
            workers,
            f"workers' grace {workers.grace:g}s < the leader's drain: drain delay "
            f"{drain.drain_delay:g}s + shutdown deadline {drain.shutdown_deadline:g}s + buffer "
            f"{drain.buffer:g}s = {drain.required:g}s; "
            "the workers are killed while the leader still serves requests that use them",
            pod_fix(workers.pod_path, {"terminationGracePeriodSeconds": grace}),
            path=workers.grace_path if workers.grace_set else workers.pod_path,
            budget=Budget(workers.grace, drain.drain_delay, drain.shutdown_deadline,
                          drain.buffer),
            edits=() if capped else (Edit(workers.grace_path, grace),),
        )
