"""StatefulSet controller: stable pod names by ordinal, ordered or parallel, rolling update.

After kubernetes/kubernetes pkg/controller/statefulset, v1.31 - v1.33 (the lab reports
v1.31; these releases agree on what follows). Read from the stored sources: the v1.3x
stateful_set_utils.go (with isHealthy and the PodIndexLabel gate) and
stateful_set_control.go at master 0004b149a5 (whose maxUnavailable path counts with
isUnavailable, see the end of this docstring):

- stateful_set_utils.go: a pod belongs to the set when its controller reference is the
  set and its name parses as `<set>-<ordinal>` (getParentNameAndOrdinal,
  `(.*)-([0-9]+)$`); newStatefulSetPod / initIdentity / updateIdentity give the pod the
  name `<set>-<ordinal>`, the labels `statefulset.kubernetes.io/pod-name`,
  `apps.kubernetes.io/pod-index` (PodIndexLabel, on since v1.28) and
  `controller-revision-hash` (setPodRevision: the revision's *name*, `<set>-<hash>`),
  spec.hostname = pod name, spec.subdomain = serviceName; updateStorage adds one
  `persistentVolumeClaim` volume per volumeClaimTemplate, claim `<template>-<set>-<ordinal>`;
  newVersionedStatefulSetPod creates an ordinal below the partition at the current
  revision and the others at the update revision; completeRollingUpdate and the status
  counters (computeReplicaStatus: replicas = created pods, readyReplicas = Running and
  Ready, availableReplicas = Ready for minReadySeconds, current/updated = not terminating
  and at that revision).
- stateful_set_control.go updateStatefulSet: ordinals in [start, start+replicas) are
  replicas, valid ordinals outside are condemned. Each replica, lowest ordinal first
  (processReplica): a Failed or Succeeded pod is deleted and recreated on a later pass
  under the same name; a missing one is created (so a deleted or evicted pod comes back
  with its name); with OrderedReady (monotonic) the pass stops after a creation and at
  the first pod that is terminating, not Running and Ready, or not yet Available, so
  ordinal n+1 is created only when 0..n are Running and Ready. Then condemned pods,
  highest ordinal first (processCondemned): with OrderedReady one per pass, only while
  every replica is healthy, waiting for a terminating one to be gone, and never a
  healthy one while a lower pod is unhealthy (only the first unhealthy pod may go).
  Parallel (allowsBurst) does all of it at once without waiting. OnDelete stops here.
  RollingUpdate: pods at an old revision with ordinal >= partition are deleted from the
  highest ordinal down (then recreated at the update revision by the replica step):
  one at a time, waiting until each replaced pod is healthy, when the
  MaxUnavailableStatefulSet gate is off (v1.31 - v1.34); with it on
  (updateStatefulSetAfterInvariantEstablished, KEP-961, beta and on by default since
  v1.35) as many as maxUnavailable (rounded down, at least 1: getStatefulSetMaxUnavailable)
  minus the replicas already unavailable, whatever the pod management policy.
- getStatefulSetRevisions / truncateHistory: the update revision is the
  ControllerRevision whose data equals the set's template (a new one with revision
  max+1, or an older equal one renumbered max+1, which is a rollback); the current
  revision is the one named by status.currentRevision (the update revision at first);
  revisions no pod, nor the current or update revision, uses are deleted beyond
  revisionHistoryLimit, oldest first.

What the lab does differently: the revision hash is the lab's own hash of the template
(upstream hashes the ControllerRevision data with FNV-32a; so the names differ from a
cluster's, not their use); ControllerRevisions are served and hold the template as
upstream's getPatch does ({"spec": {"template": {..., "$patch": "replace"}}}), so
`kubectl rollout history/undo sts` work; collisionCount stays 0 (a hash collision takes
another name instead). No PersistentVolumeClaims exist (the lab serves
none): volumeClaimTemplates are accepted and give the pod its claim volumes as above; the
kubelet gives each claim a directory that outlives the pod (drainsafe.lab.node.volumes),
so a pod created again under its name finds its claim's data, and starts with a fresh
working directory and emptyDirs; persistentVolumeClaimRetentionPolicy is defaulted and
validated but has nothing to act on. Orphans are not adopted and a pod
whose identity labels were changed by hand is not repaired (upstream UpdateStatefulPod).
Events: SuccessfulCreate / SuccessfulDelete as upstream words them. Healthy means
Running, Ready, not terminating and Available for minReadySeconds in every step, as the
current stateful_set_control.go (`isUnavailable`, the fix of kubernetes/kubernetes#112307
for KEP-961's beta); the v1.31-era rolling update step used `isHealthy`, which ignores
minReadySeconds (the same when it is 0).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from drainsafe import pdb as pdbmath
from drainsafe.kube import objects
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Obj, Store, clone
from drainsafe.lab.controllers import Controller
from drainsafe.lab.controllers.deployment import template_hash
from drainsafe.lab.controllers.podstate import owned_by, owner_reference
from drainsafe.lab.controllers.replicaset import pod_from_template, pods_of
from drainsafe.lab.controllers.scheduler import record_event
from drainsafe.lab.features import DEFAULT as DEFAULT_GATES
from drainsafe.lab.features import FeatureGates

PODS = BY_KEY["pods"]
STATEFULSETS = BY_KEY["apps/statefulsets"]
REVISIONS = BY_KEY["apps/controllerrevisions"]
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
REVISION_LABEL = "controller-revision-hash"
HASH_LABEL = "controller.kubernetes.io/hash"  # ControllerRevisionHashLabel
COMPONENT = "statefulset-controller"
_MEMBER = re.compile(r"^(.*)-([0-9]+)$")


def parent_and_ordinal(pod_name: str) -> tuple[str, int]:
    """getParentNameAndOrdinal: ("", -1) when the name has no ordinal."""
    m = _MEMBER.match(pod_name)
    if m is None or int(m.group(2)) >= 2**31:
        return "", -1
    return m.group(1), int(m.group(2))


# ---- the decisions (pure) -------------------------------------------------------------

@dataclass(frozen=True)
class Member:
    """What the control loop reads off one pod of the set."""

    name: str
    ordinal: int
    revision: str
    phase: str
    running_ready: bool  # isRunningAndReady
    available: bool  # isRunningAndAvailable (Ready for minReadySeconds)
    terminating: bool

    @property
    def unavailable(self) -> bool:
        """Not healthy: terminating, not Running and Ready, or not yet Available."""
        return self.terminating or not self.running_ready or not self.available


@dataclass(frozen=True)
class SetShape:
    """The parts of a StatefulSet's spec and status the control loop decides on."""

    name: str
    replicas: int
    start: int = 0
    parallel: bool = False
    strategy: Literal["RollingUpdate", "OnDelete"] = "RollingUpdate"
    partition: int | None = 0  # None: no rollingUpdate block
    max_unavailable: int | str | None = None
    status_current_replicas: int = 0


@dataclass(frozen=True)
class Create:
    ordinal: int
    at_update_revision: bool


@dataclass(frozen=True)
class Delete:
    name: str
    why: Literal["finished", "condemned", "update"]


Action = Create | Delete


def at_update_revision(shape: SetShape, ordinal: int) -> bool:
    """newVersionedStatefulSetPod: below the partition a pod is made at the current
    revision (also, without a rollingUpdate block, below status.currentReplicas)."""
    if shape.strategy == "RollingUpdate" and shape.partition is None:
        return ordinal >= shape.start + shape.status_current_replicas
    if shape.partition is not None:
        return ordinal >= shape.start + shape.partition
    return True


def max_unavailable(value: int | str | None, replicas: int) -> int:
    """getStatefulSetMaxUnavailable: default 1, percentages round down, at least 1."""
    return max(pdbmath.scaled_value(1 if value is None else value, replicas,
                                    round_up=False), 1)


def plan(shape: SetShape, members: Sequence[Member], update_revision: str, *,
         max_unavailable_gate: bool) -> list[Action]:
    """One pass of updateStatefulSet: what to create and delete, in order."""
    monotonic = not shape.parallel
    end = shape.start + shape.replicas - 1
    slots: dict[int, Member] = {}
    condemned: list[Member] = []
    for member in members:
        if shape.start <= member.ordinal <= end:
            slots[member.ordinal] = member
        elif member.ordinal >= 0:
            condemned.append(member)
    condemned.sort(key=lambda c: c.ordinal, reverse=True)
    # The first unhealthy pod: a replica (a missing one counts: upstream fills the gap with
    # a not-yet-created pod first), else the lowest unhealthy condemned pod.
    first_unhealthy = next((o for o in range(shape.start, end + 1)
                            if o not in slots or slots[o].unavailable), None)
    if first_unhealthy is None:
        first_unhealthy = next((c.ordinal for c in reversed(condemned) if c.unavailable), None)
    actions: list[Action] = []
    created: set[int] = set()
    for ordinal in range(shape.start, end + 1):  # processReplica
        m = slots.get(ordinal)
        if m is not None and m.phase in ("Failed", "Succeeded"):
            if not m.terminating:
                actions.append(Delete(m.name, "finished"))
            if monotonic:
                return actions
            continue
        if m is None:
            actions.append(Create(ordinal, at_update_revision(shape, ordinal)))
            created.add(ordinal)
            if monotonic:
                return actions
            continue
        if monotonic and m.unavailable:
            return actions
    for doomed in condemned:  # processCondemned
        if doomed.terminating:
            if monotonic:
                return actions
            continue
        if monotonic and doomed.unavailable and doomed.ordinal != first_unhealthy:
            return actions
        actions.append(Delete(doomed.name, "condemned"))
        if monotonic:
            return actions
    if shape.strategy == "OnDelete":
        return actions
    update_min = shape.partition or 0
    targets = range(end, shape.start + update_min - 1, -1)

    def outdated(ordinal: int) -> Member | None:
        pod = slots.get(ordinal)
        if pod is None or ordinal in created or pod.terminating \
                or pod.revision == update_revision:
            return None
        return pod

    def unavailable(ordinal: int) -> bool:
        return ordinal in created or ordinal not in slots or slots[ordinal].unavailable

    if max_unavailable_gate:  # updateStatefulSetAfterInvariantEstablished
        budget = max_unavailable(shape.max_unavailable, shape.replicas) - sum(
            1 for o in range(shape.start, end + 1) if unavailable(o))
        for ordinal in targets:
            if budget <= 0:
                break
            if (old := outdated(ordinal)) is not None:
                actions.append(Delete(old.name, "update"))
                budget -= 1
        return actions
    for ordinal in targets:
        if (old := outdated(ordinal)) is not None:
            actions.append(Delete(old.name, "update"))
            return actions
        if unavailable(ordinal):
            return actions  # wait for the replaced pod to be healthy
    return actions


def replica_status(members: Sequence[Member], current_revision: str, update_revision: str
                   ) -> dict[str, int]:
    """computeReplicaStatus over every pod of the set."""
    created = [m for m in members if m.phase]
    live = [m for m in created if not m.terminating]
    return {
        "replicas": len(created),
        "readyReplicas": sum(1 for m in created if m.running_ready),
        "availableReplicas": sum(1 for m in created if m.running_ready and m.available),
        "currentReplicas": sum(1 for m in live if m.revision == current_revision),
        "updatedReplicas": sum(1 for m in live if m.revision == update_revision),
    }


# ---- the controller (I/O) -------------------------------------------------------------

def revision_data(template: dict[str, Any]) -> dict[str, Any]:
    """getPatch: what a ControllerRevision of a StatefulSet holds."""
    return {"spec": {"template": {**clone(template), "$patch": "replace"}}}


def revision_template(revision: Obj) -> dict[str, Any]:
    template = clone(((revision.get("data") or {}).get("spec") or {}).get("template") or {})
    template.pop("$patch", None)
    return template  # type: ignore[no-any-return]


def _number(revision: Obj) -> int:
    return int(revision.get("revision") or 0)


class StatefulSetController(Controller):
    name = "statefulset"
    watches = frozenset({"apps/statefulsets", "pods", "apps/controllerrevisions"})

    def __init__(self, store: Store, *, gates: FeatureGates = DEFAULT_GATES) -> None:
        super().__init__(store)
        self.gates = gates

    def reconcile(self) -> float | None:
        next_wake: float | None = None
        for sts in list(self.store.items(STATEFULSETS)):
            try:
                delay = self.sync(sts)
            except st.StatusError:
                continue  # e.g. the set went away mid-pass; the next event retries
            if delay is not None:
                next_wake = delay if next_wake is None else min(next_wake, delay)
        return next_wake

    # ---- revisions -----------------------------------------------------------------

    def _revisions(self, sts: Obj) -> list[Obj]:
        found = [r for r in self.store.items(REVISIONS, sts["metadata"]["namespace"])
                 if owned_by(r, sts)]
        return sorted(found, key=lambda r: (_number(r), str(r["metadata"]["name"])))

    def _revisions_of(self, sts: Obj) -> tuple[Obj, Obj]:
        """getStatefulSetRevisions: (current, update)."""
        ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        template = (sts.get("spec") or {}).get("template") or {}
        data = revision_data(template)
        revisions = self._revisions(sts)
        next_number = _number(revisions[-1]) + 1 if revisions else 1
        equal = [r for r in revisions if r.get("data") == data]
        if equal and equal[-1] is revisions[-1]:
            update = revisions[-1]
        elif equal:  # a rollback: the older equal revision becomes the newest
            update = self.store.mutate(REVISIONS, ns, equal[-1]["metadata"]["name"],
                                       lambda r: r.update(revision=next_number))
        else:
            digest = template_hash(template)
            labels = dict((template.get("metadata") or {}).get("labels") or {})
            labels[HASH_LABEL] = digest
            meta: dict[str, Any] = {"name": f"{name}-{digest}", "namespace": ns,
                                    "labels": labels,
                                    "ownerReferences": [owner_reference(sts)]}
            if sts["metadata"].get("annotations"):
                meta["annotations"] = dict(sts["metadata"]["annotations"])
            try:
                update = self.store.create(REVISIONS, {"metadata": meta, "data": data,
                                                       "revision": next_number})
            except st.StatusError:
                # Same name, other data: upstream bumps collisionCount and rehashes; the
                # lab's hash covers the whole template, so this is another set's revision.
                meta["name"] = f"{name}-{template_hash({'collision': template})}"
                update = self.store.create(REVISIONS, {"metadata": meta, "data": data,
                                                       "revision": next_number})
        wanted = (sts.get("status") or {}).get("currentRevision")
        current = next((r for r in revisions if r["metadata"]["name"] == wanted), update)
        return current, update

    def _truncate_history(self, sts: Obj, pods: list[Obj], current: Obj, update: Obj) -> None:
        live = {current["metadata"]["name"], update["metadata"]["name"]}
        live |= {(p["metadata"].get("labels") or {}).get(REVISION_LABEL, "") for p in pods}
        history = [r for r in self._revisions(sts) if r["metadata"]["name"] not in live]
        limit = int((sts.get("spec") or {}).get("revisionHistoryLimit", 10))
        if limit < 0 or len(history) <= limit:
            return
        for r in history[:len(history) - limit]:
            with contextlib.suppress(st.StatusError):
                self.store.delete(REVISIONS, r["metadata"]["namespace"], r["metadata"]["name"])

    # ---- pods ----------------------------------------------------------------------

    def _members(self, sts: Obj, now: float) -> tuple[list[Obj], list[Member], float | None]:
        name = sts["metadata"]["name"]
        min_ready = int((sts.get("spec") or {}).get("minReadySeconds", 0))
        pods, members = [], []
        next_wake: float | None = None
        for pod in pods_of(self.store, sts):
            parent, ordinal = parent_and_ordinal(pod["metadata"]["name"])
            if parent != name:
                continue  # isMemberOf
            status = pod.get("status") or {}
            running_ready = status.get("phase") == "Running" and objects.is_ready(pod)
            available = running_ready and objects.is_available(pod, min_ready, now)
            if running_ready and not available:
                at = objects.available_since(pod, min_ready)
                if at is not None:
                    wait = at - now + 0.05  # IsPodAvailable: strictly after
                    next_wake = wait if next_wake is None else min(next_wake, wait)
            pods.append(pod)
            members.append(Member(
                name=str(pod["metadata"]["name"]), ordinal=ordinal,
                revision=str((pod["metadata"].get("labels") or {}).get(REVISION_LABEL, "")),
                phase=str(status.get("phase") or ""), running_ready=running_ready,
                available=available, terminating=objects.is_terminating(pod)))
        return pods, members, next_wake

    def _new_pod(self, sts: Obj, template: dict[str, Any], revision: str, ordinal: int
                 ) -> Obj:
        """newStatefulSetPod + setPodRevision."""
        spec = sts.get("spec") or {}
        name = f"{sts['metadata']['name']}-{ordinal}"
        pod = pod_from_template(sts, template, generate_name="")
        meta = pod["metadata"]
        meta.pop("generateName", None)
        meta["name"] = name
        meta["labels"].update({POD_NAME_LABEL: name, POD_INDEX_LABEL: str(ordinal),
                               REVISION_LABEL: revision})
        pod["spec"]["hostname"] = name
        if spec.get("serviceName"):
            pod["spec"]["subdomain"] = spec["serviceName"]
        claims = [c for c in spec.get("volumeClaimTemplates") or []
                  if (c.get("metadata") or {}).get("name")]
        if claims:  # updateStorage
            names = {c["metadata"]["name"] for c in claims}
            pod["spec"]["volumes"] = [
                {"name": c["metadata"]["name"], "persistentVolumeClaim": {
                    "claimName": f"{c['metadata']['name']}-{sts['metadata']['name']}-{ordinal}"}}
                for c in claims] + [v for v in pod["spec"].get("volumes") or []
                                    if v.get("name") not in names]
        return pod

    def _shape(self, sts: Obj) -> SetShape:
        spec = sts.get("spec") or {}
        strategy = spec.get("updateStrategy") or {}
        ru = strategy.get("rollingUpdate")
        return SetShape(
            name=str(sts["metadata"]["name"]), replicas=int(spec.get("replicas", 1)),
            start=int((spec.get("ordinals") or {}).get("start", 0)),
            parallel=spec.get("podManagementPolicy") == "Parallel",
            strategy="OnDelete" if strategy.get("type") == "OnDelete" else "RollingUpdate",
            partition=int(ru.get("partition", 0)) if isinstance(ru, dict) else None,
            max_unavailable=ru.get("maxUnavailable") if isinstance(ru, dict) else None,
            status_current_replicas=int((sts.get("status") or {}).get("currentReplicas", 0)))

    # ---- sync ----------------------------------------------------------------------

    def sync(self, sts: Obj) -> float | None:
        ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        now = self.store.clock()
        current, update = self._revisions_of(sts)
        current_name, update_name = current["metadata"]["name"], update["metadata"]["name"]
        _, members, _ = self._members(sts, now)
        if not sts["metadata"].get("deletionTimestamp"):
            actions = plan(self._shape(sts), members, update_name,
                           max_unavailable_gate=self.gates.max_unavailable_stateful_set)
            templates = {current_name: revision_template(current),
                         update_name: revision_template(update)}
            by_name = {m.name: m for m in members}
            for action in actions:
                if isinstance(action, Create):
                    revision = update_name if action.at_update_revision else current_name
                    pod = self._new_pod(sts, templates[revision], revision, action.ordinal)
                    try:
                        self.store.create(PODS, pod)
                    except st.StatusError as err:
                        record_event(self.store, sts, reason="FailedCreate", type_="Warning",
                                     component=COMPONENT,
                                     message=f"create Pod {pod['metadata']['name']} in "
                                             f"StatefulSet {name} failed error: {err}")
                        break
                    record_event(self.store, sts, reason="SuccessfulCreate",
                                 component=COMPONENT,
                                 message=f"create Pod {pod['metadata']['name']} in "
                                         f"StatefulSet {name} successful")
                else:
                    if action.name not in by_name:
                        continue
                    with contextlib.suppress(st.StatusError):
                        self.store.delete(PODS, ns, action.name)
                        record_event(self.store, sts, reason="SuccessfulDelete",
                                     component=COMPONENT,
                                     message=f"delete Pod {action.name} in StatefulSet "
                                             f"{name} successful")
        pods, members, next_wake = self._members(sts, now)
        self._status(sts, members, current_name, update_name)
        self._truncate_history(sts, pods, current, update)
        return next_wake

    def _status(self, sts: Obj, members: list[Member], current: str, update: str) -> None:
        ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        live = self.store.peek(STATEFULSETS, ns, name)
        if live is None:
            return
        spec = live.get("spec") or {}
        counts = replica_status(members, current, update)
        want = int(spec.get("replicas", 1))
        rolling = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") \
            == "RollingUpdate"
        if rolling and counts["updatedReplicas"] == want and counts["readyReplicas"] == want \
                and counts["replicas"] == want:  # completeRollingUpdate
            counts["currentReplicas"] = counts["updatedReplicas"]
            current = update
        status = clone(live.get("status") or {})
        status.update(counts)
        status.update(observedGeneration=int(live["metadata"].get("generation", 1)),
                      currentRevision=current, updateRevision=update, collisionCount=0)
        for key in ("readyReplicas", "currentReplicas", "updatedReplicas"):
            if status.get(key) == 0:
                status.pop(key)  # omitempty, as the real status serialises
        if status != live.get("status"):
            updated = clone(live)
            updated["status"] = status
            self.store.update(STATEFULSETS, updated, subresource="status")
