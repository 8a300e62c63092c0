"""Disruption rules: PodDisruptionBudgets against the workloads they protect.

All PDB arithmetic is drainsafe.pdb's (the disruption controller's rules); expected pods
come from the HPA minimum where an HPA targets the workload, since that is the scale at
which a drain must still be possible.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from drainsafe.check.context import STARTUP_ANNOTATION, Context
from drainsafe.check.findings import Finding, Severity
from drainsafe.check.model import SCALED_KINDS, Index, Pdb, Workload, mapping, number
from drainsafe.check.rules.registry import rule
from drainsafe.check.rules.termination import serves_traffic
from drainsafe.check.snippets import dump, dump_named
from drainsafe.pdb import is_percent

FEW_REPLICAS = 5


def _scale_text(index: Index, w: Workload) -> str:
    hpa = index.hpa_for(w)
    if hpa is not None:
        return f"HPA {hpa.ref.name} minReplicas {hpa.min_replicas}"
    if w.role is not None:
        return f"{w.ref.kind} {w.ref.name} {w.role} {w.replicas}"
    return f"{w.ref.kind} {w.ref.name} replicas {w.replicas}"


def scale_detail(index: Index, pdb: Pdb) -> str:
    """Where expected_pods' sum comes from (written only for a finding)."""
    return "; ".join(_scale_text(index, w) for w in index.workloads_selected_by(pdb))


def _budget_text(pdb: Pdb) -> str:
    assert pdb.spec is not None
    if pdb.spec.max_unavailable is not None:
        return f"maxUnavailable {pdb.spec.max_unavailable}"
    if pdb.spec.min_available is not None:
        return f"minAvailable {pdb.spec.min_available}"
    return "neither minAvailable nor maxUnavailable"


def _max_unavailable_fix(pdb: Pdb) -> str:
    """maxUnavailable: 1 in place of what the budget says (null deletes minAvailable in a
    strategic merge patch; the two fields are exclusive)."""
    spec: dict[str, object] = {"maxUnavailable": 1}
    if "minAvailable" in _spec(pdb):
        spec["minAvailable"] = None
    return dump({"spec": spec})


def _spec(pdb: Pdb) -> dict[str, object]:
    spec = pdb.obj.get("spec")
    return spec if isinstance(spec, dict) else {}


PDB_INVALID = rule(
    "pdb-invalid", Severity.ERROR,
    "A PodDisruptionBudget the API server would reject.",
    """
minAvailable and maxUnavailable are mutually exclusive, each an integer >= 0 or a percentage
string like "50%"; the selector's operators are In, NotIn, Exists and DoesNotExist. The API
server rejects anything else, and the workload is left without a budget.

Sources: kubernetes.io/docs/tasks/run-application/configure-pdb/; kubernetes/kubernetes
pkg/apis/policy/validation/validation.go.
""")


@PDB_INVALID.check
def _pdb_invalid(index: Index, context: Context) -> Iterator[Finding]:
    for pdb in index.pdbs:
        if pdb.spec_error is None:
            continue
        yield PDB_INVALID.finding(pdb, f"invalid PodDisruptionBudget: {pdb.spec_error}",
                                  _max_unavailable_fix(pdb), path=("spec",))


# Fixes that are the same for every object: written once (a dump per finding is a memo key).
_MAX_UNAVAILABLE_ONE = dump({"spec": {"maxUnavailable": 1}})
_MIN_REPLICAS_TWO = dump({"spec": {"minReplicas": 2}})
_REPLICAS_TWO = dump({"spec": {"replicas": 2}})


PDB_WEDGE = rule(
    "pdb-wedge", Severity.ERROR,
    "A PodDisruptionBudget that can never allow an eviction.",
    """
The Eviction API refuses an eviction that would breach a PodDisruptionBudget and kubectl
drain retries it forever. The disruption controller computes disruptionsAllowed =
currentHealthy - desiredHealthy, where minAvailable (int) is desiredHealthy itself, a
percentage is scaled against the expected pods rounding up, and maxUnavailable is subtracted
from the expected pods (rounding up). So minAvailable >= the expected pods, minAvailable
"100%", or maxUnavailable 0 / "0%" allow 0 disruptions even when every pod is ready: the
node never drains and the cluster upgrade hangs. With an HPA the expected pods can be as low
as minReplicas, so that is the scale checked here.

Sources: kubernetes/kubernetes pkg/controller/disruption/disruption.go (getExpectedPodCount,
updatePdbStatus); apimachinery intstr.GetScaledValueFromIntOrPercent;
kubernetes.io/docs/tasks/run-application/configure-pdb/.
""")


@PDB_WEDGE.check
def _pdb_wedge(index: Index, context: Context) -> Iterator[Finding]:
    for pdb in index.pdbs:
        if pdb.spec is None:
            continue
        zero = pdb.spec.max_unavailable in (0, "0%")
        if zero:
            yield PDB_WEDGE.finding(
                pdb, f"maxUnavailable {pdb.spec.max_unavailable}: disruptionsAllowed is always 0;"
                " every eviction is refused and kubectl drain retries forever",
                _MAX_UNAVAILABLE_ONE, path=("spec", "maxUnavailable"))
            continue
        total = index.expected_pods(pdb)
        if total is None or total <= 0:
            continue
        allowed = index.allowed(pdb)
        if allowed is None or allowed > 0:
            continue
        field = "maxUnavailable" if pdb.spec.max_unavailable is not None else "minAvailable"
        yield PDB_WEDGE.finding(
            pdb,
            f"{_budget_text(pdb)} with {total} expected pod(s) ({scale_detail(index, pdb)}): "
            "disruptionsAllowed is 0 even with every pod ready; kubectl drain retries forever",
            _max_unavailable_fix(pdb), path=("spec", field),
        )


PDB_OVERLAP = rule(
    "pdb-overlap", Severity.ERROR,
    "A pod selected by more than one PodDisruptionBudget.",
    """
The eviction subresource supports one PodDisruptionBudget per pod. For a pod matched by two or
more, every eviction fails with HTTP 500 "This pod has more than one PodDisruptionBudget,
which the eviction subresource does not support", whatever the budgets allow, so drains wedge.
Charts that hard-code selectors (two releases in one namespace) produce this.

Sources: kubernetes/kubernetes pkg/registry/core/pod/storage/eviction.go (getPodDisruptionBudgets,
the "more than one PodDisruptionBudget" error).
""")


@PDB_OVERLAP.check
def _pdb_overlap(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        pdbs = index.pdbs_for(w)
        if len(pdbs) < 2:
            continue
        names = ", ".join(p.ref.name for p in pdbs)
        yield PDB_OVERLAP.finding(
            w,
            f"pods are selected by {len(pdbs)} PodDisruptionBudgets ({names}): every eviction "
            "fails with HTTP 500 and drains wedge",
            f"# keep one PodDisruptionBudget for these pods: delete all but one of {names}\n"
            f"# (kubectl delete pdb -n {w.ref.namespace} NAME), or make their selectors "
            "disjoint",
            path=("metadata", "name"),
        )


PDB_SELECTS_NOTHING = rule(
    "pdb-selects-nothing", Severity.WARNING,
    "A PodDisruptionBudget whose selector matches no workload's pods.",
    """
A budget protects only the pods its selector matches in its own namespace. A typo in a label,
a selector copied from another chart, or a PDB in the wrong namespace protects nothing, and
the workload it was meant for is drained without limit. (A PDB with no selector selects no
pods; an empty selector {} selects every pod in the namespace.)

Sources: kubernetes.io/docs/tasks/run-application/configure-pdb/ ("identify your
application"); kubernetes/api policy/v1 types.go (Selector: "An empty selector matches all
pods", a null selector matches none).
""", whole_input=True)


@PDB_SELECTS_NOTHING.check
def _selects_nothing(index: Index, context: Context) -> Iterator[Finding]:
    if not index.has_standalone_workload():
        return  # a PDB checked on its own: its pods are elsewhere
    for pdb in index.pdbs:
        if index.workloads_selected_by(pdb):
            continue
        why = "has no selector" if pdb.selector is None else "matches no pod template"
        yield PDB_SELECTS_NOTHING.finding(
            pdb, f"selector {why} among the {index.workload_count()} workload(s) checked "
            f"(namespace {pdb.ref.namespace}); it protects nothing",
            _selector_fix(index, pdb), path=("spec", "selector"),
        )


def _selector_fix(index: Index, pdb: Pdb) -> str:
    """The selector of the one unprotected workload in the PDB's namespace, else advice."""
    candidates = [w for w in index.workloads_in(pdb.ref.namespace)
                  if w.ref.kind in SCALED_KINDS and not index.pdbs_for(w)]
    if len(candidates) != 1 or not candidates[0].selector_labels:
        return ("# select the pods this budget protects: spec.selector.matchLabels with the "
                "labels of their pod template")
    selector: dict[str, object] = {"matchLabels": candidates[0].selector_labels}
    if "matchExpressions" in (_spec(pdb).get("selector") or {}):  # type: ignore[operator]
        selector["matchExpressions"] = None
    return (f"# for {candidates[0].ref.kind} {candidates[0].ref.name}\n"
            + dump({"spec": {"selector": selector}}))


PDB_PREFER_MAX_UNAVAILABLE = rule(
    "pdb-prefer-max-unavailable", Severity.INFO,
    "Integer minAvailable on a few replicas: maxUnavailable: 1 scales with the workload.",
    """
An integer minAvailable is fixed while the replica count moves: minAvailable 2 on 3 replicas
allows one eviction today and none after a scale-down to 2 (a wedged drain). maxUnavailable: 1
keeps one eviction possible at any scale and still protects the rest.

Sources: kubernetes.io/docs/tasks/run-application/configure-pdb/
#think-about-how-your-application-reacts-to-disruptions; kubernetes/kubernetes
pkg/controller/disruption/disruption.go (desiredHealthy for an int minAvailable does not
follow the scale).
""")


@PDB_PREFER_MAX_UNAVAILABLE.check
def _prefer_max_unavailable(index: Index, context: Context) -> Iterator[Finding]:
    for pdb in index.pdbs:
        if pdb.spec is None or pdb.spec.min_available is None or is_percent(
                pdb.spec.min_available):
            continue
        total = index.expected_pods(pdb)
        allowed = index.allowed(pdb)
        if total is None or allowed is None:
            continue
        if total > FEW_REPLICAS or allowed == 0:
            continue  # many replicas: fine; zero: pdb-wedge reports it
        yield PDB_PREFER_MAX_UNAVAILABLE.finding(
            pdb,
            f"minAvailable {pdb.spec.min_available} on {total} pod(s) "
            f"({scale_detail(index, pdb)}) allows "
            f"{allowed} eviction(s) now and none once scaled to "
            f"{pdb.spec.min_available}",
            _max_unavailable_fix(pdb), path=("spec", "minAvailable"),
        )


PDB_MISSING = rule(
    "pdb-missing", Severity.WARNING,
    "A workload with >= 2 replicas or an HPA has no PodDisruptionBudget.",
    """
Without a budget, kubectl drain, cluster upgrades and the cluster autoscaler may evict every
replica on a node at once, and a rolling node upgrade can take several replicas down in a row
before their replacements are ready (a GPU replacement may sit Pending for want of a free
device). A PodDisruptionBudget with maxUnavailable: 1 makes evictions wait for the budget.

Sources: kubernetes.io/docs/concepts/workloads/pods/disruptions/; kubernetes.io/docs/tasks/
administer-cluster/safely-drain-node/ (drain respects PDBs through the Eviction API);
kube-score deployment-has-poddisruptionbudget.
""")


@PDB_MISSING.check
def _pdb_missing(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        # A LeaderWorkerSet's missing budget is lws-pdb-missing's case, counted in groups.
        if w.ref.kind not in SCALED_KINDS or w.role is not None or _owned(w):
            continue
        hpa = index.hpa_for(w)
        scale = index.expected_replicas(w)
        if hpa is None and (scale is None or scale < 2):
            continue
        if index.pdbs_for(w):
            continue
        labels = w.selector_labels or w.pod_labels
        scale_text = f"HPA {hpa.ref.name}" if hpa is not None else f"{scale} replicas"
        yield PDB_MISSING.finding(
            w,
            f"{scale_text} and no PodDisruptionBudget: a drain may evict every replica on "
            "the node at once",
            dump_named(budget_for, w.ref.name, w.ref.namespace, labels),
            path=("metadata", "name"),
        )


def budget_for(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The PodDisruptionBudget pdb-missing and unmanaged-pod suggest."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}}


def _owned(w: Workload) -> bool:
    meta = w.obj.get("metadata")
    return isinstance(meta, dict) and bool(meta.get("ownerReferences"))


SINGLE_REPLICA = rule(
    "single-replica", Severity.WARNING,
    "A serving workload with a single replica: every drain or rollout is an outage.",
    """
With one replica there is nothing to fail over to: a drain evicts it (no budget can both
protect it and let the node drain: minAvailable: 1 wedges the drain, maxUnavailable: 1 allows
the outage), and a rollout replaces it. Run at least two replicas, spread across nodes, with a
PodDisruptionBudget of maxUnavailable: 1.

Sources: kubernetes.io/docs/concepts/workloads/pods/disruptions/ ("run multiple replicas");
kube-score deployment-replicas; Polaris deploymentMissingReplicas.
""")


@SINGLE_REPLICA.check
def _single_replica(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        if w.ref.kind not in SCALED_KINDS or _owned(w) or not serves_traffic(index, w):
            continue
        if w.role == "workers":  # a group's workers are counted with its leader
            continue
        hpa = index.hpa_for(w)
        scale = index.expected_replicas(w)
        if scale != 1:
            continue
        if hpa is not None:
            yield SINGLE_REPLICA.finding(
                hpa, f"minReplicas 1 for {w.ref.kind} {w.ref.name}: at its minimum one drain "
                "takes the only replica away", _MIN_REPLICAS_TWO,
                path=("spec", "minReplicas"))
            continue
        yield SINGLE_REPLICA.finding(
            w, "replicas 1: a drain or rollout leaves no replica serving",
            _REPLICAS_TWO,
            path=("spec", "replicas") if "replicas" in (w.obj.get("spec") or {}) else ("spec",),
        )


UPGRADE_SLOW_HOURS = 4.0
"""An upgrade estimated to take at least this long is reported."""
UPGRADE_TARGET_HOURS = 2.0
"""The fix sizes the allowance so the estimate drops to about this."""

PDB_UPGRADE_SLOW = rule(
    "pdb-upgrade-slow", Severity.WARNING,
    "A PDB whose allowance, with the replicas and their start-up time, serialises a node-pool "
    "upgrade into many hours.",
    """
A node-pool upgrade drains every node, and each drain's evictions go through the
PodDisruptionBudget: with disruptionsAllowed = N, at most N of the selected pods are away at
a time, and the next eviction waits until a replacement is Ready. A replacement takes its
start-up time (scheduling, image pull, model load: minutes for a large model). So the
upgrade takes at least ceil(pods / N) x start-up, plus each wave's termination:
maxUnavailable 1 on 300 replicas that need 10 minutes to load means 50 hours. Raise the
allowance (maxUnavailable as a larger number or a percentage) to what capacity can spare, or
add capacity first: a surge-first drain (drainsafe drain starts the replacement before it
evicts) keeps serving capacity while the budget allows more at once.

The start-up time is the annotation drainsafe.io/startup-seconds on the workload or its pod
template, else the larger initialDelaySeconds of its startup and readiness probes (no probe
runs earlier, so no pod is Ready sooner). The allowance is drainsafe.pdb's, as the
disruption controller computes it, at the expected scale (the HPA minimum where an HPA
targets the workload).

Sources: kubernetes/kubernetes pkg/controller/disruption/disruption.go (disruptionsAllowed);
pkg/registry/core/pod/storage/eviction.go (an eviction is refused while disruptionsAllowed
is 0); kubernetes.io/docs/concepts/workloads/pods/disruptions/.
""")


def startup_seconds(w: Workload) -> float | None:
    """A lower bound on how long a replacement takes to become Ready, if anything says."""
    value = w.annotation_number(STARTUP_ANNOTATION)
    if value is not None and value > 0:
        return value
    delays = [number(mapping(c.spec.get(p)).get("initialDelaySeconds")) or 0.0
              for c in w.containers for p in ("startupProbe", "readinessProbe")]
    longest = max(delays, default=0.0)
    return longest if longest > 0 else None


@PDB_UPGRADE_SLOW.check
def _upgrade_slow(index: Index, context: Context) -> Iterator[Finding]:
    for pdb in index.pdbs:
        if pdb.spec is None:
            continue
        total = index.expected_pods(pdb)
        if total is None or total <= 0:
            continue
        allowed = index.allowed(pdb)
        if allowed is None or allowed <= 0:
            continue  # pdb-wedge reports it
        starts = [s for s in (startup_seconds(w) for w in index.workloads_selected_by(pdb))
                  if s is not None]
        if not starts:
            continue
        startup = max(starts)
        waves = math.ceil(total / allowed)
        seconds = waves * startup
        if seconds < UPGRADE_SLOW_HOURS * 3600:
            continue
        want = min(total, math.ceil(total * startup / (UPGRADE_TARGET_HOURS * 3600)))
        spec: dict[str, object] = {"maxUnavailable": want}
        if "minAvailable" in _spec(pdb):
            spec["minAvailable"] = None
        yield PDB_UPGRADE_SLOW.finding(
            pdb,
            f"{_budget_text(pdb)} allows {allowed} eviction(s) at a time on {total} pod(s) "
            f"({scale_detail(index, pdb)}) that take {startup:g}s to start: a node-pool "
            f"upgrade takes at least {waves} x {startup:g}s = {seconds / 3600:.1f} h; allow "
            f"{want} at a time (about {math.ceil(total / want) * startup / 3600:.1f} h) or "
            "drain surge-first",
            dump({"spec": spec}), path=("spec",),
        )
