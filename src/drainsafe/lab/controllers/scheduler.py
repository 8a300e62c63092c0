"""Scheduler: binds Pending pods to nodes with drainsafe.placement's decision.

Pods with no spec.nodeName, not terminating and schedulerName default-scheduler are
placed in priority then creation order. Each goes to placement.choose's node: the only
feasible one unscored, else the best by the default profile's weighted score plugins
(placement.score: TaintToleration 3, NodeAffinity 2, NodeResourcesFit 1,
PodTopologySpread 2, InterPodAffinity 2, NodeResourcesBalancedAllocation 1, as
kube-scheduler's default_plugins.go), so a PreferNoSchedule taint is one preference among
them, not a rank above all. On success the pod gets spec.nodeName and PodScheduled=True
(the binding subresource's effect); when nothing fits, PodScheduled=False with reason
Unschedulable and a FailedScheduling event carry the scheduler's message. Unschedulable
pods are tried again whenever a pod or node changes. Inter-pod affinity and
anti-affinity are filtered and scored as kube-scheduler's InterPodAffinity plugin does
(drainsafe.podaffinity), counting every pod bound so far, this pass's included. Each
node's load (requests, pod count, pods per owner) is kept from the pod events
(placement.LoadLedger), as kube-scheduler's cache keeps its NodeInfos from the pod
informer, so a pass does not sum every pod's requests again.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any

from drainsafe import placement, podaffinity
from drainsafe.kube.objects import parse_time, rfc3339
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event, Obj, Store, clone
from drainsafe.lab.controllers import Controller
from drainsafe.lab.controllers.podstate import set_condition

PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
EVENTS = BY_KEY["events"]


def bind_pod(store: Store, namespace: str, name: str, node: str, *,
             dry_run: bool = False) -> Obj:
    pod = store.get(PODS, namespace, name)
    if pod.get("spec", {}).get("nodeName"):
        raise st.conflict("", "pods", name,
                          f"pod {name} is already assigned to node "
                          f"\"{pod['spec']['nodeName']}\"")
    pod["spec"]["nodeName"] = node
    status = pod.setdefault("status", {})
    status["conditions"] = set_condition(
        status.get("conditions") or [],
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None}, rfc3339(store.clock()))
    return store.update(PODS, pod, dry_run=dry_run) if not dry_run else pod


def record_event(store: Store, obj: Obj, *, reason: str, message: str, type_: str = "Normal",
                 component: str = "default-scheduler") -> None:
    """A core/v1 Event about `obj` (what kubectl describe lists)."""
    now = rfc3339(store.clock())
    m = obj["metadata"]
    ns = m.get("namespace", "default")
    with contextlib.suppress(st.StatusError):
        store.create(EVENTS, {
            "metadata": {"generateName": f"{m['name']}.", "namespace": ns},
            "involvedObject": {"kind": obj.get("kind"), "namespace": ns, "name": m["name"],
                               "uid": m.get("uid"), "apiVersion": obj.get("apiVersion"),
                               "resourceVersion": m.get("resourceVersion")},
            "reason": reason, "message": message, "type": type_,
            "source": {"component": component},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": component, "reportingInstance": "",
        })


class Scheduler(Controller):
    name = "scheduler"
    watches = frozenset({"pods", "nodes"})

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._reported: dict[str, str] = {}  # pod uid -> last FailedScheduling message
        # Each node's load, kept from the pod events while this scheduler listens (None:
        # not listening, or no pod event yet; a pass then sums every pod).
        self._ledger: placement.LoadLedger | None = None

    def _on_event(self, ev: Event) -> None:
        if ev.resource == "pods":
            if self._ledger is None:
                # The store holds this event's state already: start from all of it.
                self._ledger = placement.LoadLedger.of(self.store.items(PODS))
            else:
                self._ledger.put(str(ev.obj["metadata"]["uid"]),
                                 None if ev.type == "DELETED" else ev.obj)
        super()._on_event(ev)

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            self._ledger = None  # no more events: it would go stale

    def reconcile(self) -> float | None:
        pending = [p for p in self.store.items(PODS)
                   if not p.get("spec", {}).get("nodeName")
                   and not p["metadata"].get("deletionTimestamp")
                   and p.get("spec", {}).get("schedulerName", "default-scheduler")
                   == "default-scheduler"
                   and p.get("status", {}).get("phase", "Pending") == "Pending"]
        if not pending:
            self._reported.clear()
            return None
        nodes = sorted(self.store.items(NODES), key=lambda n: str(n["metadata"]["name"]))
        loads: dict[str, placement.NodeLoad] = defaultdict(lambda: placement.NodeLoad({}, 0, {}))
        all_pods = list(self.store.items(PODS))
        if self._ledger is not None:
            loads.update(self._ledger.snapshot())
        else:
            for p in all_pods:
                node = p.get("spec", {}).get("nodeName")
                if node:
                    loads[node].add(p)
        # Pods on nodes with their nodes' labels, for inter-pod (anti-)affinity; only
        # looked at when some pod has terms.
        with_terms = any(podaffinity.has_terms(p) for p in all_pods)
        bound = podaffinity.bound_pods(all_pods, nodes) if with_terms else []
        for n in nodes:
            loads[n["metadata"]["name"]].allocatable = placement.node_allocatable(n)
        pending.sort(key=lambda p: (-int(p.get("spec", {}).get("priority", 0)),
                                    parse_time(p["metadata"].get("creationTimestamp")) or 0.0,
                                    p["metadata"]["name"]))
        live = {p["metadata"]["uid"] for p in pending}
        self._reported = {k: v for k, v in self._reported.items() if k in live}
        for pod in pending:
            affinity = podaffinity.prefilter(pod, bound) if with_terms else None
            choice, verdicts = placement.choose(nodes, pod, loads=loads, pod_affinity=affinity)
            if choice is not None:
                try:
                    bound_pod = bind_pod(self.store, pod["metadata"]["namespace"],
                                         pod["metadata"]["name"], choice)
                except st.StatusError:
                    continue
                loads[choice].add(bound_pod)
                if with_terms:
                    bound += podaffinity.bound_pods([bound_pod], nodes)
                self._reported.pop(pod["metadata"]["uid"], None)
                record_event(self.store, bound_pod, reason="Scheduled",
                             message=f"Successfully assigned {pod['metadata']['namespace']}/"
                                     f"{pod['metadata']['name']} to {choice}")
                continue
            self._unschedulable(pod, placement.failure_message(len(nodes), verdicts.values()))
        return None

    def _unschedulable(self, pod: Obj, message: str) -> None:
        uid = pod["metadata"]["uid"]
        status = clone(pod.get("status") or {})
        status["conditions"] = set_condition(
            status.get("conditions") or [],
            {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
             "reason": "Unschedulable", "message": message}, rfc3339(self.store.clock()))
        if status != pod.get("status"):
            updated: dict[str, Any] = clone(pod)
            updated["status"] = status
            try:
                self.store.update(PODS, updated, subresource="status")
            except st.StatusError:
                return
        if self._reported.get(uid) != message:
            self._reported[uid] = message
            record_event(self.store, pod, reason="FailedScheduling", message=message,
                         type_="Warning")
