"""LeaderWorkerSet controller: groups of one leader and size-1 workers, as lws v0.10.0.

After kubernetes-sigs/lws v0.10.0 (files named below):

- api/leaderworkerset/v1/leaderworkerset_types.go: the labels
  `leaderworkerset.sigs.k8s.io/name` (SetNameLabelKey), `.../group-index`, `.../worker-index`
  (0 for the leader), `.../group-key` (GroupUniqueHashLabelKey), `.../template-revision-hash`
  (RevisionKey); the annotations `.../size`, `.../replicas` (on the leader StatefulSet) and
  `.../leader-name` (on workers); the environment LWS_LEADER_ADDRESS, LWS_GROUP_SIZE,
  LWS_WORKER_INDEX; restartPolicy RecreateGroupOnPodRestart (default), None and the
  deprecated Default (= None); startupPolicy LeaderCreated (default) and LeaderReady; the
  scale subresource on .spec.replicas / .status.replicas / .status.hpaPodSelector.
- pkg/controllers/leaderworkerset_controller.go: the leader StatefulSet is named as the
  LWS, has `replicas` leaders, Parallel pod management, serviceName = the LWS name, a
  selector on name + worker-index 0 and the LWS as controller; a headless Service of the
  LWS's name (publishNotReadyAddresses) selects its pods; status: replicas = groups,
  readyReplicas = groups whose leader is Running and Ready and whose worker StatefulSet has
  all size-1 workers Ready, updatedReplicas = groups at the current template revision,
  hpaPodSelector = the leader pods' selector, conditions Available / Progressing.
  Scaling down lowers the leader StatefulSet's replicas: the highest group index goes, and
  its worker StatefulSet (owned by the leader pod) goes with it by garbage collection.
- pkg/controllers/pod_controller.go: per leader pod, with RecreateGroupOnPodRestart, when
  any pod of the group has a deletionTimestamp or a restarted container, the leader pod is
  deleted (foreground), which takes the worker StatefulSet and every worker with it; with
  LeaderReady the worker StatefulSet is created only once the leader is Ready; the worker
  StatefulSet is named as the leader pod (`<lws>-<group>`), has size-1 replicas at
  ordinals 1..size-1 (pods `<lws>-<group>-<worker>`), Parallel, a selector on name,
  group-index and group-key, and the leader pod as controller; with size 1 none is made;
  nothing is made for a leader that is being deleted. Read at the stored commit 004be7e
  (newer than v0.10.0; the parts used here are the same in v0.10.0, bar
  groupPlacementPolicy, which the lab leaves out).
- pkg/webhooks/pod_webhook.go: on pod create, the leader gets group-index (its ordinal),
  group-key (SHA-1 of `<namespace>/<leader pod name>`, pkg/utils) and worker-index 0;
  every container of the group gets the LWS_* variables, LWS_LEADER_ADDRESS being
  `<leader pod>.<service>.<namespace>` (the Shared subdomain policy). The lab runs this as
  an admission hook on the store (`admit_group_pod`), where lws runs a mutating webhook.

- exclusive placement: the LWS annotation `leaderworkerset.sigs.k8s.io/exclusive-topology:
  <topologyKey>` is copied onto the leader and worker pod templates
  (leaderworkerset_controller.go, pod_controller.go constructWorkerStatefulSet...); the pod
  webhook (pod_webhook.go SetExclusiveAffinities) gives the leader a required podAffinity
  to its own group-key and a required podAntiAffinity to any other group-key over that
  topology key, so a domain holds one group of any LWS (the lab's scheduler filters them:
  drainsafe.podaffinity); the worker StatefulSet is created only once the leader is
  scheduled, with the nodeSelector `<topologyKey>: <the leader node's value>`
  (pod_controller.go setNodeSelectorForWorkerPods), and not while the leader's node lacks
  the label (lws logs an error and retries).

Not followed (the lab keeps to what drainsafe needs): rolling updates of the template are
left to the StatefulSets' own rolling update (lws rolls groups with partition,
maxUnavailable and maxSurge itself); subGroupPolicy and with it the
subgroup-exclusive-topology annotation (lws labels each pod with its subgroup index and
key and gives every subgroup's first pod the exclusive terms: a second set of keys,
indices and webhook paths that no drainsafe behaviour reads yet; drainsafe counts whole
groups), networkConfig UniquePerReplica, volumeClaimTemplates and the
RecreateGroupAfterStart policy are not acted on; leader deletion uses the lab's background
garbage collection (the lab models no foreground deletion: the worker StatefulSet goes
once the leader pod is gone).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from drainsafe.kube import objects
from drainsafe.lab import lwscrd
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY, ResourceType
from drainsafe.lab.apiserver.store import Obj, Store, clone
from drainsafe.lab.controllers import Controller
from drainsafe.lab.controllers.deployment import template_hash
from drainsafe.lab.controllers.podstate import owner_reference, set_condition
from drainsafe.lab.controllers.statefulset import POD_INDEX_LABEL, parent_and_ordinal

PODS = BY_KEY["pods"]
STATEFULSETS = BY_KEY["apps/statefulsets"]
SERVICES = BY_KEY["services"]
NODES = BY_KEY["nodes"]
PREFIX = "leaderworkerset.sigs.k8s.io/"
NAME_LABEL = PREFIX + "name"
GROUP_INDEX_LABEL = PREFIX + "group-index"
WORKER_INDEX_LABEL = PREFIX + "worker-index"
GROUP_KEY_LABEL = PREFIX + "group-key"
REVISION_LABEL = PREFIX + "template-revision-hash"
SIZE_ANNOTATION = PREFIX + "size"
REPLICAS_ANNOTATION = PREFIX + "replicas"
LEADER_NAME_ANNOTATION = PREFIX + "leader-name"
EXCLUSIVE_ANNOTATION = objects.LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION
LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
GROUP_SIZE_ENV = "LWS_GROUP_SIZE"
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"

RestartPolicy = Literal["RecreateGroupOnPodRestart", "None"]
StartupPolicy = Literal["LeaderCreated", "LeaderReady"]


# ---- the decisions (pure) -------------------------------------------------------------

def group_key(namespace: str, leader_pod: str) -> str:
    """genGroupUniqueKey: the SHA-1 of `<namespace>/<leader pod name>`."""
    return hashlib.sha1(f"{namespace}/{leader_pod}".encode()).hexdigest()


def leader_name(lws: str, group: int) -> str:
    """The leader pod, and its group's worker StatefulSet: `<lws>-<group>`."""
    return f"{lws}-{group}"


def worker_name(lws: str, group: int, worker: int) -> str:
    return f"{lws}-{group}-{worker}"


def leader_address(leader_pod: str, service: str, namespace: str) -> str:
    return f"{leader_pod}.{service}.{namespace}"


def restart_policy(value: object) -> RestartPolicy:
    """The deprecated `Default` behaves as None."""
    return "RecreateGroupOnPodRestart" if value in (None, "RecreateGroupOnPodRestart") \
        else "None"


def startup_policy(value: object) -> StartupPolicy:
    return "LeaderReady" if value == "LeaderReady" else "LeaderCreated"


@dataclass(frozen=True)
class GroupPod:
    """What the controller reads off one pod of a group."""

    ready: bool  # Running and Ready
    deleting: bool
    restarted: bool  # any container or init container restarted


def should_recreate(policy: RestartPolicy, pods: Iterable[GroupPod]) -> bool:
    """pod_controller.go handleRestartPolicy: a pod of the group going or restarted."""
    return policy == "RecreateGroupOnPodRestart" and any(
        p.deleting or p.restarted for p in pods)


def group_ready(leader: GroupPod | None, workers: Iterable[GroupPod], size: int) -> bool:
    """A group counts Ready when its leader and all size-1 workers are Ready."""
    if leader is None or not leader.ready or leader.deleting:
        return False
    return sum(1 for w in workers if w.ready and not w.deleting) >= size - 1


def group_pod(pod: Obj) -> GroupPod:
    status = pod.get("status") or {}
    restarted = any(int(c.get("restartCount", 0)) > 0
                    for c in (status.get("containerStatuses") or [])
                    + (status.get("initContainerStatuses") or []))
    return GroupPod(ready=status.get("phase") == "Running" and objects.is_ready(pod),
                    deleting=objects.is_terminating(pod), restarted=restarted)


def exclusive_terms(key: str, topology: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """pod_webhook.go SetExclusiveAffinities: the affinity term to the group's own pods and
    the anti-affinity term to any other group's, both over `topology`."""
    affinity = {"labelSelector": {"matchExpressions": [
        {"key": GROUP_KEY_LABEL, "operator": "In", "values": [key]}]}, "topologyKey": topology}
    anti = {"labelSelector": {"matchExpressions": [
        {"key": GROUP_KEY_LABEL, "operator": "Exists"},
        {"key": GROUP_KEY_LABEL, "operator": "NotIn", "values": [key]}]},
        "topologyKey": topology}
    return affinity, anti


def set_exclusive_affinities(spec: dict[str, Any], key: str, topology: str) -> None:
    """Append the exclusive terms unless both kinds already have a term over `topology`
    (exclusiveAffinityApplied)."""
    aff = spec.setdefault("affinity", {})
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    pod_aff = aff.setdefault("podAffinity", {}).setdefault(req, [])
    pod_anti = aff.setdefault("podAntiAffinity", {}).setdefault(req, [])
    if any(t.get("topologyKey") == topology for t in pod_aff) and \
            any(t.get("topologyKey") == topology for t in pod_anti):
        return
    affinity, anti = exclusive_terms(key, topology)
    pod_aff.append(affinity)
    pod_anti.append(anti)


def hpa_selector(lws: str) -> str:
    return f"{NAME_LABEL}={lws},{WORKER_INDEX_LABEL}=0"


# ---- the pod webhook (admission on the store) -----------------------------------------

def _with_env(containers: list[dict[str, Any]], env: dict[str, str]) -> None:
    for c in containers:
        have = {e.get("name") for e in c.get("env") or []}
        c["env"] = list(c.get("env") or []) + [
            {"name": k, "value": v} for k, v in env.items() if k not in have]


def admit_group_pod(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    """pod_webhook.go Default: labels and LWS_* environment on a group pod's creation."""
    if rt.key != "pods" or old is not None:
        return
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    lws = labels.get(NAME_LABEL)
    if not lws or (WORKER_INDEX_LABEL not in labels and GROUP_KEY_LABEL not in labels):
        return
    ns = str(meta.get("namespace") or "default")
    annotations = meta.get("annotations") or {}
    size = str(annotations.get(SIZE_ANNOTATION, "1"))
    if labels.get(WORKER_INDEX_LABEL) == "0":  # a leader
        parent, group = parent_and_ordinal(str(meta.get("name", "")))
        if parent != lws:
            return
        labels[GROUP_INDEX_LABEL] = str(group)
        labels.setdefault(GROUP_KEY_LABEL, group_key(ns, str(meta["name"])))
        leader, worker = str(meta["name"]), 0
        topology = annotations.get(EXCLUSIVE_ANNOTATION)
        if topology:
            set_exclusive_affinities(obj.setdefault("spec", {}), labels[GROUP_KEY_LABEL],
                                     str(topology))
    else:
        leader = str(annotations.get(LEADER_NAME_ANNOTATION, ""))
        worker = int(labels.get(POD_INDEX_LABEL) or parent_and_ordinal(str(meta["name"]))[1])
        labels[WORKER_INDEX_LABEL] = str(worker)
    spec = obj.get("spec") or {}
    env = {LEADER_ADDRESS_ENV: leader_address(leader, lws, ns),
           GROUP_SIZE_ENV: size, WORKER_INDEX_ENV: str(worker)}
    _with_env(spec.get("containers") or [], env)
    _with_env(spec.get("initContainers") or [], env)


# ---- the controller -------------------------------------------------------------------

def _template(tmpl: dict[str, Any] | None, labels: dict[str, str],
              annotations: dict[str, str]) -> dict[str, Any]:
    out = clone(tmpl or {})
    meta = out.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    return out  # type: ignore[no-any-return]


def _exclusive(lws: Obj) -> dict[str, str]:
    topology = (lws["metadata"].get("annotations") or {}).get(EXCLUSIVE_ANNOTATION)
    return {EXCLUSIVE_ANNOTATION: str(topology)} if topology else {}


class LeaderWorkerSetController(Controller):
    name = "leaderworkerset"
    watches = frozenset({"pods", "apps/statefulsets", "services", lwscrd.KEY})

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        store.admission.insert(0, admit_group_pod)

    def reconcile(self) -> float | None:
        rt = self.store.catalog.by_key(lwscrd.KEY)
        if rt is None:
            return None
        for lws in self.store.items(rt):
            if not lws["metadata"].get("deletionTimestamp"):
                self.sync(rt, lws)
        return None

    def _create(self, rt: ResourceType, obj: Obj) -> None:
        with contextlib.suppress(st.StatusError):
            self.store.create(rt, obj)

    def sync(self, rt: ResourceType, lws: Obj) -> None:
        ns, name = lws["metadata"]["namespace"], lws["metadata"]["name"]
        spec = lws.get("spec") or {}
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = int(lwt.get("size", 1))
        replicas = int(spec.get("replicas", 1))
        revision = template_hash(lwt)
        owner = owner_reference(lws)
        if self.store.peek(SERVICES, ns, name) is None:
            self._create(SERVICES, {"metadata": {
                "name": name, "namespace": ns, "labels": {NAME_LABEL: name},
                "ownerReferences": [owner]},
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                         "selector": {NAME_LABEL: name}}})
        selector = {NAME_LABEL: name, WORKER_INDEX_LABEL: "0"}
        exclusive = _exclusive(lws)
        leader_tmpl = _template(lwt.get("leaderTemplate") or lwt.get("workerTemplate"),
                                {**selector, REVISION_LABEL: revision},
                                {SIZE_ANNOTATION: str(size), **exclusive})
        sts = self.store.peek(STATEFULSETS, ns, name)
        if sts is None:
            self._create(STATEFULSETS, {
                "metadata": {"name": name, "namespace": ns,
                             "labels": {NAME_LABEL: name, REVISION_LABEL: revision},
                             "annotations": {REPLICAS_ANNOTATION: str(replicas)},
                             "ownerReferences": [owner]},
                "spec": {"replicas": replicas, "serviceName": name,
                         "podManagementPolicy": "Parallel",
                         "selector": {"matchLabels": selector}, "template": leader_tmpl}})
        elif (sts.get("spec") or {}).get("replicas") != replicas \
                or (sts["metadata"].get("labels") or {}).get(REVISION_LABEL) != revision:
            def scale(s: Obj) -> None:
                s["spec"]["replicas"] = replicas
                s["spec"]["template"] = leader_tmpl
                s["metadata"].setdefault("labels", {})[REVISION_LABEL] = revision
                s["metadata"].setdefault("annotations", {})[REPLICAS_ANNOTATION] = \
                    str(replicas)
            with contextlib.suppress(st.StatusError):
                self.store.mutate(STATEFULSETS, ns, name, scale)
        pods = [p for p in self.store.items(PODS, ns)
                if (p["metadata"].get("labels") or {}).get(NAME_LABEL) == name]
        groups: dict[int, tuple[Obj | None, list[Obj]]] = {}
        for p in pods:
            labels = p["metadata"].get("labels") or {}
            try:
                g = int(labels.get(GROUP_INDEX_LABEL, "-1"))
            except ValueError:
                continue
            leader, workers = groups.get(g, (None, []))
            if labels.get(WORKER_INDEX_LABEL) == "0":
                groups[g] = (p, workers)
            else:
                groups[g] = (leader, [*workers, p])
        policy = restart_policy(lwt.get("restartPolicy"))
        ready = updated = count = 0
        for g, (leader, workers) in sorted(groups.items()):
            if leader is None:
                continue
            count += 1
            lp = group_pod(leader)
            wps = [group_pod(w) for w in self._workers_of(leader, workers)]
            if group_ready(lp, wps, size):
                ready += 1
            if (leader["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision:
                updated += 1
            if lp.deleting:
                continue
            if should_recreate(policy, [lp, *wps]):
                with contextlib.suppress(st.StatusError):
                    self.store.delete(PODS, ns, leader["metadata"]["name"])
                continue
            if size == 1:  # no worker StatefulSet at all
                continue
            if startup_policy(spec.get("startupPolicy")) == "LeaderReady" and not lp.ready:
                continue
            self._ensure_workers(leader, lwt, size, revision, g, exclusive)
        self._status(rt, lws, count, ready, updated, replicas)

    def _workers_of(self, leader: Obj, workers: list[Obj]) -> list[Obj]:
        """The workers of this leader's own worker StatefulSet. Those of an earlier leader
        of the group still terminating are left out: upstream deletes the leader with
        foreground propagation, so a new leader never meets them; the lab's garbage
        collection is background, so they may outlive the old leader for their grace."""
        ns, name = leader["metadata"]["namespace"], leader["metadata"]["name"]
        sts = self.store.peek(STATEFULSETS, ns, name)
        if sts is None or not any(r.get("uid") == leader["metadata"]["uid"]
                                  for r in sts["metadata"].get("ownerReferences") or []):
            return []
        uid = sts["metadata"]["uid"]
        return [w for w in workers
                if any(r.get("uid") == uid and r.get("controller")
                       for r in w["metadata"].get("ownerReferences") or [])]

    def _ensure_workers(self, leader: Obj, lwt: dict[str, Any], size: int, revision: str,
                        group: int, exclusive: dict[str, str]) -> None:
        """pod_controller.go constructWorkerStatefulSetApplyConfiguration; with exclusive
        placement only once the leader is scheduled, its workers pinned to its domain."""
        ns, name = leader["metadata"]["namespace"], leader["metadata"]["name"]
        if self.store.peek(STATEFULSETS, ns, name) is not None:
            return
        pin: dict[str, str] = {}
        if exclusive:
            topology = exclusive[EXCLUSIVE_ANNOTATION]
            node_name = (leader.get("spec") or {}).get("nodeName")
            node = self.store.peek(NODES, "", node_name) if node_name else None
            value = ((node or {}).get("metadata") or {}).get("labels", {}).get(topology)
            if value is None:
                return  # not scheduled yet, or its node lacks the label: wait
            pin = {topology: str(value)}
        labels = leader["metadata"].get("labels") or {}
        lws = labels[NAME_LABEL]
        key = labels.get(GROUP_KEY_LABEL, group_key(ns, name))
        selector = {NAME_LABEL: lws, GROUP_INDEX_LABEL: str(group), GROUP_KEY_LABEL: key}
        tmpl = _template(lwt.get("workerTemplate"), {**selector, REVISION_LABEL: revision},
                         {SIZE_ANNOTATION: str(size), LEADER_NAME_ANNOTATION: name,
                          **exclusive})
        if pin:
            spec = tmpl.setdefault("spec", {})
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **pin}
        self._create(STATEFULSETS, {
            "metadata": {"name": name, "namespace": ns,
                         "labels": {NAME_LABEL: lws, GROUP_INDEX_LABEL: str(group),
                                    GROUP_KEY_LABEL: key, REVISION_LABEL: revision},
                         "ownerReferences": [owner_reference(leader)]},
            "spec": {"replicas": size - 1, "ordinals": {"start": 1}, "serviceName": lws,
                     "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": selector}, "template": tmpl}})

    def _status(self, rt: ResourceType, lws: Obj, count: int, ready: int, updated: int,
                replicas: int) -> None:
        ns, name = lws["metadata"]["namespace"], lws["metadata"]["name"]
        live = self.store.peek(rt, ns, name)
        if live is None:
            return
        now = objects.rfc3339(self.store.clock())
        status = clone(live.get("status") or {})
        available = ready >= replicas
        conditions = set_condition(status.get("conditions") or [], {
            "type": "Available", "status": "True" if available else "False",
            "reason": "AllGroupsReady" if available else "GroupsNotReady",
            "message": f"{ready} of {replicas} groups are ready"}, now)
        conditions = set_condition(conditions, {
            "type": "Progressing", "status": "False" if available else "True",
            "reason": "GroupsReady" if available else "GroupsProgressing",
            "message": "Replicas are progressing" if not available
            else "All replicas are ready"}, now)
        status.update(replicas=count, readyReplicas=ready, updatedReplicas=updated,
                      hpaPodSelector=hpa_selector(name), conditions=conditions)
        for k in ("replicas", "readyReplicas", "updatedReplicas"):
            if status[k] == 0:
                status.pop(k)  # omitempty
        if status != live.get("status"):
            new = clone(live)
            new["status"] = status
            with contextlib.suppress(st.StatusError):
                self.store.update(rt, new, subresource="status")
