"""Kubernetes object semantics, read from plain API dicts: one home for each.

What a pod's state means is defined upstream; each reader here follows its source:

- Ready: the pod's `Ready` condition is "True" (k8s.io/kubernetes pkg/api/v1/pod/util.go
  IsPodReady). A pod without the condition is not Ready.
- Available: Ready for at least minReadySeconds (same file, IsPodAvailable, v1.33): with
  minReadySeconds 0 a Ready pod is available; otherwise the Ready condition's
  lastTransitionTime must be set and lastTransitionTime + minReadySeconds before now. A
  Ready pod with no lastTransitionTime is not available (the lab's ReplicaSet status once
  counted it as available; it follows this rule now).
- node Ready: the node's `Ready` condition is "True" (pkg/api/v1/node/util.go IsNodeReady,
  v1.33); a node without the condition is not Ready.
- terminal: phase Succeeded or Failed (pkg/api/v1/pod/util.go IsPodTerminal).
- terminating: metadata.deletionTimestamp is set.
- active: neither terminal nor terminating (pkg/controller/controller_utils.go
  FilterActivePods), which is what a ReplicaSet counts against spec.replicas.
- controller reference: the ownerReference with controller: true
  (apimachinery pkg/apis/meta/v1/controller_ref.go GetControllerOf).
- the default grace period is 30 s when terminationGracePeriodSeconds is absent
  (pkg/apis/core/v1/defaults.go; core/v1 PodSpec docs). An explicit 0 stays 0.
- unschedulable: the PodScheduled condition is False with reason Unschedulable
  (pkg/apis/core/types.go PodReasonUnschedulable).
- the object key is "namespace/name", or "name" for cluster-scoped objects, as client-go's
  cache.MetaNamespaceKeyFunc (tools/cache/store.go).
- a workload is named by `WorkloadRef` (kind, namespace, name), written "Kind/ns/name".
- mid-rollout (`rollout_in_progress`): the Deployment's rollout is not complete as
  `kubectl rollout status` reads it (kubectl pkg/polymorphichelpers/rollout_status.go at
  v1.33.1: observedGeneration behind generation, then fewer updatedReplicas than
  spec.replicas), or its Progressing condition is not NewReplicaSetAvailable, or more than
  one of its ReplicaSets is active (spec.replicas > 0), which is when the deployment
  controller spreads a scale over them (pkg/controller/deployment/sync.go scale(),
  proportional scaling). But a change of spec.replicas alone is a scale, not a rollout,
  whoever made it (a surge record's scale-up or its restore, the guard's or a drain's, an
  HPA), and the deployment controller tells the two apart: syncDeployment hands a scaling
  event (isScalingEvent: an active ReplicaSet's deployment.kubernetes.io/desired-replicas
  annotation differs from spec.replicas) to sync()/scale() before any rollout step, and
  scale() gives a lone active ReplicaSet the whole count (sync.go, as the lab's
  controllers follow it at v1.31.0: drainsafe.lab.controllers.proportion). So while the
  one active ReplicaSet is the Deployment's new one (its template the Deployment's but for
  the pod-template-hash label: util/deployment_util.go FindNewReplicaSet and
  EqualIgnoreHash, read in kubectl's copy, pkg/util/deployment/deployment.go at v1.33.1),
  a generation the controller has not yet observed, or updatedReplicas ("non-terminating
  pods ... that have the desired template spec", k8s.io/api apps/v1 DeploymentStatus at
  v1.33.1: the new ReplicaSet's status.replicas) trailing a scale-up until the pods are
  created, is not a rollout: pods started now are of the current template. Progressing is
  left at NewReplicaSetAvailable while every replica is updated (progress.go
  syncRolloutStatus, isCompleteDeployment), so a scale never turns it. A Deployment or
  ReplicaSet read without a template is never taken for the new one (what cannot be told
  apart is a rollout, as before). Drain and the guard both ask this one rule.
- the pod-template-hash label (k8s.io/api apps/v1 DefaultDeploymentUniqueLabelKey) is the
  deployment controller's, on a ReplicaSet's template and selector, never on the
  Deployment's: two pod templates are the same when equal without it
  (`same_pod_template`), compared as the API server serves them (quantities in canonical
  form, so Semantic.DeepEqual's Quantity rule adds nothing); an empty label map is none,
  as apimachinery's forked DeepEqual has it (third_party/forked/golang/reflect at v1.33.1).
- a Deployment's scale carried out (`scale_not_carried_out`): the deployment controller
  has observed its spec (status.observedGeneration at least metadata.generation; its
  sync writes the ReplicaSets' scale before syncDeploymentStatus records the generation,
  pkg/controller/deployment/sync.go at v1.33.1) and its status.replicas, the sum of its
  ReplicaSets' status.replicas (util/deployment_util.go
  GetActualReplicaCountForReplicaSets: their non-terminating pods), equals spec.replicas:
  two of the counts DeploymentComplete (same file) compares; its updated and available
  counts are a rollout's and the Ready count, which the drain waits for apart. A pod the
  ReplicaSet made before it saw a lowered scale is still counted until it is removed.
- a StatefulSet mid-rolling-update (`statefulset_rollout_in_progress`), as `kubectl rollout
  status sts` reads it (same file, StatefulSetStatusViewer): observedGeneration behind
  generation, or, for a partitioned update, fewer updatedReplicas than replicas minus the
  partition; else currentRevision differs from updateRevision. Unlike kubectl, a partitioned
  update whose updated pods are all there still counts while the revisions differ: a pod
  the set creates at an ordinal at or above the partition (a stand-in) starts at the update
  revision, not at the revision of the pod it stands in for. Not Ready replicas are not a
  rollout here (kubectl waits for them too): the drain waits for them anyway.
- a LeaderWorkerSet group (kubernetes-sigs/lws v0.10.0): its pods carry
  `leaderworkerset.sigs.k8s.io/name` (SetNameLabelKey) and `.../group-index`
  (GroupIndexLabelKey), the leader `.../worker-index` "0"
  (api/leaderworkerset/v1/leaderworkerset_types.go); the leader pod is `<lws>-<group>` and
  its workers `<lws>-<group>-<worker>` (pkg/controllers/pod_controller.go, the worker
  StatefulSet named as the leader pod). A group is Ready when every one of its `size` pods
  is Running and Ready (leaderworkerset_controller.go updateConditions: the leader
  PodRunningAndReady and its worker StatefulSet ready), which is what status.readyReplicas
  counts (`lws_ready_groups`). restartPolicy RecreateGroupOnPodRestart (the default) and
  RecreateGroupAfterStart delete the group's leader, and with it the whole group, as soon as
  any pod of the group has a deletionTimestamp (pod_controller.go handleRestartPolicy,
  pkg/utils/pod/pod_utils.go PodDeleted); None and the deprecated Default let the pod's own
  StatefulSet recreate just that pod (`lws_recreates_group`), but for a leader: its
  group's worker StatefulSet is owned by the leader pod (pod_controller.go
  setControllerReferenceWithStatefulSet), so the leader's deletion takes its workers too. Mid-update
  (`lws_rollout_in_progress`): the UpdateInProgress condition is True, or fewer
  updatedReplicas than replicas (the LWS status has no observedGeneration).
- a workload's autoscaler: the HorizontalPodAutoscaler in its namespace whose
  scaleTargetRef names its kind and name (`autoscaler_for`).
- times: the API writes metav1.Time as RFC 3339 in whole seconds (`rfc3339`) and
  metav1.MicroTime with microseconds (`rfc3339_micro`: Lease renewTime, Event eventTime);
  `parse_time` reads either.

Pure functions; no I/O.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

Obj = Mapping[str, Any]
P = TypeVar("P", bound=Mapping[str, Any])

DEFAULT_GRACE_SECONDS = 30


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def key_of(obj: Obj) -> str:
    m = meta(obj)
    ns = m.get("namespace") or ""
    return f"{ns}/{m.get('name')}" if ns else str(m.get("name"))


def uid_of(obj: Obj) -> str:
    return str(meta(obj).get("uid") or "")


def controller_ref(obj: Obj) -> Obj | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def _condition(pod: Obj, kind: str) -> Obj | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def is_ready(pod: Obj) -> bool:
    c = _condition(pod, "Ready")
    return c is not None and c.get("status") == "True"


def condition(obj: Obj, kind: str) -> Obj | None:
    """The status condition of type `kind` (pod, node, Deployment, ...), or None."""
    return _condition(obj, kind)


def available_since(pod: Obj, min_ready_seconds: float) -> float | None:
    """When the pod became (or becomes) Available, or None when it is not Ready or has
    no Ready lastTransitionTime while minReadySeconds > 0 (IsPodAvailable)."""
    c = _condition(pod, "Ready")
    if c is None or c.get("status") != "True":
        return None
    since = parse_time(c.get("lastTransitionTime"))
    if min_ready_seconds <= 0:
        return since if since is not None else float("-inf")
    return None if since is None else since + min_ready_seconds


def is_available(pod: Obj, min_ready_seconds: float, now: float) -> bool:
    at = available_since(pod, min_ready_seconds)
    if at is None:
        return False
    # IsPodAvailable: lastTransitionTime + minReadySeconds strictly before now.
    return min_ready_seconds <= 0 or at < now


def is_node_ready(node: Obj) -> bool:
    c = _condition(node, "Ready")
    return c is not None and c.get("status") == "True"


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_terminating(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def is_active(pod: Obj) -> bool:
    return not is_terminal(pod) and not is_terminating(pod)


class WorkloadRef(NamedTuple):
    """A workload by kind, namespace and name; str() is the "Kind/ns/name" form used as a
    key in records and reports."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> WorkloadRef:
        """The inverse of str(); ValueError naming the text when it is not Kind/ns/name."""
        parts = text.split("/")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{text!r} is not a workload reference (Kind/namespace/name)")
        return cls(*parts)

    @classmethod
    def of(cls, obj: Obj) -> WorkloadRef:
        m = meta(obj)
        return cls(str(obj.get("kind") or ""), str(m.get("namespace") or ""),
                   str(m.get("name") or ""))


POD_TEMPLATE_HASH = "pod-template-hash"


def same_pod_template(a: Obj, b: Obj) -> bool:
    """The two pod templates are equal but for the pod-template-hash label (EqualIgnoreHash,
    as the module docstring says)."""
    return _without_template_hash(a) == _without_template_hash(b)


def _without_template_hash(template: Obj) -> dict[str, Any]:
    out = dict(template)
    m = dict(out.get("metadata") or {})
    labels = {k: v for k, v in (m.get("labels") or {}).items() if k != POD_TEMPLATE_HASH}
    if labels:
        m["labels"] = labels
    else:
        m.pop("labels", None)  # an empty label map is no label map (omitempty)
    if m:
        out["metadata"] = m
    else:
        out.pop("metadata", None)
    return out


def rollout_in_progress(deployment: Obj, replicasets: Iterable[Obj]) -> str | None:
    """Why the Deployment is mid-rollout, or None (the rule in the module docstring): a
    scale alone, anyone's, is not a rollout. `replicasets` are the Deployment's own (the
    caller filters by controller ref)."""
    m = meta(deployment)
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    live = [rs for rs in replicasets if int((rs.get("spec") or {}).get("replicas") or 0) > 0]
    # The one active ReplicaSet is the new one: whatever the controller has not yet seen
    # is a scale (or no change to the pods at all), and stand-ins are of this template.
    template = spec.get("template") or {}
    carried = (live[0].get("spec") or {}).get("template") or {} if len(live) == 1 else {}
    scale_only = bool(template and carried) and same_pod_template(carried, template)
    generation, observed = m.get("generation"), status.get("observedGeneration")
    if isinstance(generation, int) and isinstance(observed, int) and observed < generation \
            and not scale_only:
        return f"observedGeneration {observed} is behind generation {generation}"
    progressing = _condition(deployment, "Progressing")
    if progressing and progressing.get("reason") not in (None, "NewReplicaSetAvailable"):
        return f"Progressing: {progressing.get('reason')}"
    if len(live) > 1:
        return f"{len(live)} ReplicaSets have replicas"
    replicas = spec.get("replicas")
    updated = status.get("updatedReplicas")
    if isinstance(replicas, int) and isinstance(updated, int) and updated < replicas \
            and not scale_only:
        return f"{updated}/{replicas} replicas updated"
    return None


def scale_not_carried_out(deployment: Obj) -> str | None:
    """Why the Deployment's controllers have not yet carried out its spec.replicas, or None
    (the rule in the module docstring)."""
    generation = meta(deployment).get("generation")
    status = deployment.get("status") or {}
    observed = status.get("observedGeneration")
    if isinstance(generation, int) and (not isinstance(observed, int) or observed < generation):
        return f"observedGeneration {observed or 0} is behind generation {generation}"
    want = (deployment.get("spec") or {}).get("replicas", 1)
    have = int(status.get("replicas") or 0)
    if have != want:
        return f"{have} pods for {want} replicas"
    return None


def statefulset_rollout_in_progress(sts: Obj) -> str | None:
    """Why the StatefulSet is mid-rolling-update, or None (the rule in the module docstring)."""
    m = meta(sts)
    spec = sts.get("spec") or {}
    status = sts.get("status") or {}
    generation, observed = m.get("generation"), status.get("observedGeneration")
    if isinstance(generation, int) and (not isinstance(observed, int) or observed < generation):
        return f"observedGeneration {observed or 0} is behind generation {generation}"
    rolling = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {})
    replicas, partition = spec.get("replicas"), rolling.get("partition")
    updated = int(status.get("updatedReplicas") or 0)
    if isinstance(replicas, int) and isinstance(partition, int) \
            and updated < replicas - partition:
        return f"partitioned roll out: {updated}/{replicas - partition} new pods updated"
    current, update = status.get("currentRevision"), status.get("updateRevision")
    if current and update and current != update:
        return f"rolling update from revision {current} to {update}"
    return None


def autoscaler_for(workload: WorkloadRef, autoscalers: Iterable[Obj]) -> Obj | None:
    """The HorizontalPodAutoscaler whose scaleTargetRef names the workload."""
    for hpa in autoscalers:
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if (meta(hpa).get("namespace") == workload.namespace
                and ref.get("kind") == workload.kind and ref.get("name") == workload.name):
            return hpa
    return None


def node_of(pod: Obj) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def grace_seconds(pod: Obj) -> int:
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else (
        DEFAULT_GRACE_SECONDS)


def unschedulable_reason(pod: Obj) -> str | None:
    c = _condition(pod, "PodScheduled")
    if c is not None and c.get("status") == "False" and c.get("reason") == "Unschedulable":
        return str(c.get("message") or "Unschedulable")
    return None


def started_up_seconds(pod: Obj) -> float | None:
    """How long the pod took from start to Ready (its observed start-up), when it is Ready."""
    if not is_ready(pod):
        return None
    start = parse_time((pod.get("status") or {}).get("startTime"))
    ready = parse_time((_condition(pod, "Ready") or {}).get("lastTransitionTime"))
    if start is None or ready is None or ready < start:
        return None
    return ready - start


def endpoint_uid(endpoint: Obj) -> Any:
    return (endpoint.get("targetRef") or {}).get("uid")


def slice_lists(endpoint_slice: Obj, uid: str) -> bool:
    return any(endpoint_uid(e) == uid for e in endpoint_slice.get("endpoints") or [])


def rfc3339(ts: float | None = None) -> str:
    """`ts` (default now) as the API server writes a metav1.Time: RFC 3339 in UTC, whole
    seconds, the fraction dropped (apimachinery pkg/apis/meta/v1/time.go MarshalJSON:
    `t.UTC().Format(time.RFC3339)`). creationTimestamp, deletionTimestamp, condition
    lastTransitionTime, startTime and annotations drainsafe stamps use this form."""
    from datetime import UTC, datetime  # here: drainsafe check imports this module, not these

    seconds = math.floor(time.time() if ts is None else ts)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(ts: float | None = None) -> str:
    """`ts` (default now) as the API server writes a metav1.MicroTime: RFC 3339 in UTC
    with six fraction digits, truncated (apimachinery pkg/apis/meta/v1/micro_time.go,
    RFC3339Micro "2006-01-02T15:04:05.000000Z07:00"). Lease acquireTime/renewTime and
    events.k8s.io eventTime are MicroTime."""
    from datetime import UTC, datetime  # see rfc3339

    micros = math.floor((time.time() if ts is None else ts) * 1_000_000)
    seconds, fraction = divmod(micros, 1_000_000)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=fraction)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> float | None:
    """Unix seconds of an RFC 3339 time as the API serves it (metav1.Time or MicroTime:
    the fraction, when present, is kept); None when absent or not a time."""
    if not isinstance(value, str) or not value:
        return None
    from datetime import datetime  # see rfc3339

    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# -- LeaderWorkerSet groups (kubernetes-sigs/lws v0.10.0; the rules in the module docstring) --

LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
# api/leaderworkerset/v1 ExclusiveKeyAnnotationKey: one group per domain of that node label.
LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_RECREATE_GROUP_POLICIES = frozenset({"RecreateGroupOnPodRestart", "RecreateGroupAfterStart"})


def lws_group_of(pod: Obj) -> tuple[str, int] | None:
    """(LWS name, group index) of a pod of a LeaderWorkerSet group, from lws's labels."""
    labels = meta(pod).get("labels") or {}
    name, index = labels.get(LWS_NAME_LABEL), labels.get(LWS_GROUP_INDEX_LABEL)
    if not name or not isinstance(index, str) or not index.isdigit():
        return None
    return str(name), int(index)


def lws_group_of_name(lws: str, pod_name: str) -> int | None:
    """The group index in a group pod's name: `<lws>-<group>` or `<lws>-<group>-<worker>`."""
    prefix = f"{lws}-"
    if not pod_name.startswith(prefix):
        return None
    head = pod_name[len(prefix):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def lws_is_leader_name(lws: str, pod_name: str) -> bool:
    """The pod is a group's leader, `<lws>-<group>` (its workers are `<lws>-<group>-<w>`)."""
    return lws_group_of_name(lws, pod_name) is not None \
        and "-" not in pod_name[len(lws) + 1:]


def lws_size(lws: Obj) -> int:
    """Pods per group: spec.leaderWorkerTemplate.size (defaulted to 1)."""
    value = (((lws.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def lws_exclusive_topology(lws: Obj) -> str | None:
    """The node label whose every value (domain) holds the pods of at most one group, of
    any LWS (pkg/webhooks/pod_webhook.go SetExclusiveAffinities), or None."""
    value = (meta(lws).get("annotations") or {}).get(LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION)
    return str(value) if value else None


def lws_recreates_group(lws: Obj) -> bool:
    """One pod of a group deleted or evicted takes the whole group down and back."""
    policy = ((lws.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("restartPolicy")
    return lws_policy_recreates_group(policy)


def lws_policy_recreates_group(policy: object) -> bool:
    """The same rule on the restartPolicy value alone (absent: the default, which does)."""
    return policy is None or policy in LWS_RECREATE_GROUP_POLICIES


def lws_ready_groups(pods: Iterable[P], size: int) -> dict[int, list[P]]:
    """The groups whose `size` pods are all active, Running and Ready, by group index (the
    pods given are one LWS's, already filtered by the caller, e.g. off a drained node)."""
    by_group: dict[int, list[P]] = {}
    for p in pods:
        group = lws_group_of(p)
        if group is not None and is_active(p) and is_ready(p) \
                and (p.get("status") or {}).get("phase") == "Running":
            by_group.setdefault(group[1], []).append(p)
    return {g: ps for g, ps in by_group.items() if len(ps) >= size}


def lws_rollout_in_progress(lws: Obj) -> str | None:
    """Why the LeaderWorkerSet is mid-rolling-update, or None."""
    update = _condition(lws, "UpdateInProgress")
    if update is not None and update.get("status") == "True":
        return f"UpdateInProgress: {update.get('reason') or 'True'}"
    replicas = (lws.get("spec") or {}).get("replicas")
    updated = (lws.get("status") or {}).get("updatedReplicas")
    if isinstance(replicas, int) and isinstance(updated, int) and updated < replicas:
        return f"{updated}/{replicas} groups updated"
    return None
