"""Node lifecycle: node health from heartbeats, and the taints that follow node conditions.

After kubernetes/kubernetes pkg/controller/nodelifecycle/node_lifecycle_controller.go (read
at the stored commit 003e8629, the v1.32/v1.33 code) and its defaults at v1.33:
--node-monitor-grace-period 50 s (raised from 40 s in v1.32, kubernetes/kubernetes#126287),
--node-startup-grace-period 60 s (pkg/controller/nodelifecycle/config/v1alpha1/defaults.go).

Heartbeats (tryUpdateNodeHealth). A kubelet proves it is alive two ways: its Ready
condition's lastHeartbeatTime changes, or its Lease kube-node-lease/<node> gets a newer
spec.renewTime (drainsafe.lab.node.kubelet renews it every quarter of its
leaseDurationSeconds, 40 s by default, as pkg/kubelet/nodelease does). The controller
stamps its own clock when it sees either change (probeTimestamp: never the timestamps'
values, so clock skew does not matter). When that stamp is older than the grace period
(the startup grace period, from creationTimestamp, for a node that never posted Ready),
Ready, MemoryPressure, DiskPressure and PIDPressure become Unknown (reason
NodeStatusUnknown, "Kubelet stopped posting node status."; NodeStatusNeverUpdated for a
condition never posted), written through the status subresource when Ready changes.
Upstream checks every --node-monitor-period (5 s); here a pass runs on each node or lease
change and a timed wake-up at the next node's deadline.

Taints. NoSchedule, for the scheduler (doNoScheduleTaintingPass, TaintNodesByCondition):
node.kubernetes.io/not-ready while Ready is False, node.kubernetes.io/unreachable while it
is Unknown, node.kubernetes.io/unschedulable while spec.unschedulable. NoExecute, for the
taint eviction controller (drainsafe.lab.controllers.tainteviction; processTaintBaseEviction
and doNoExecuteTaintingPass): not-ready:NoExecute while Ready is False, unreachable:NoExecute
while Unknown (the two swapped, never both), both removed when Ready is True again
(markNodeAsReachable). Zones (handleDisruption, ComputeZoneState, by the
topology.kubernetes.io region and zone labels): a zone with no Ready node is fully
disrupted, and when every zone is, all NoExecute taints come off and none are added (the
control plane, not the nodes, is likely the one cut off); a partially disrupted zone (more
than 2 and at least 55 % of its nodes not Ready) of at most 50 nodes adds none
(ReducedQPSFunc: rate 0). The eviction rate limiter of a normal zone (--node-eviction-rate
0.1 nodes/s, burst 1) is not emulated: every node is tainted at once.

Pods. When a node's Ready leaves True, each pod bound to it gets its Ready condition
False (MarkPodsNotReady, pkg/controller/util/node/controller_utils.go, read in its
contextual-logging form, v1.28 and later; lastTransitionTime now, ContainersReady
untouched) through the status subresource, so endpoints drop pods whose kubelet can no
longer report them (a rebooting node's, lab.node.reboot; a cut-off node's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from drainsafe.kube.objects import condition, is_node_ready, parse_time, rfc3339
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.status import StatusError
from drainsafe.lab.apiserver.store import Obj, Store, clone
from drainsafe.lab.controllers import Controller
from drainsafe.placement import NOT_READY_TAINT, UNREACHABLE_TAINT, UNSCHEDULABLE_TAINT

NODES = BY_KEY["nodes"]
PODS = BY_KEY["pods"]
LEASES = BY_KEY["coordination.k8s.io/leases"]
NODE_LEASE_NAMESPACE = "kube-node-lease"
# The conditions a silent node's kubelet can no longer vouch for (NodeNetworkUnavailable
# is the control plane's and stays).
KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
STATUS_UNKNOWN_REASON = "NodeStatusUnknown"
STATUS_UNKNOWN_MESSAGE = "Kubelet stopped posting node status."
LARGE_CLUSTER_THRESHOLD = 50  # --large-cluster-size-threshold
UNHEALTHY_ZONE_THRESHOLD = 0.55  # --unhealthy-zone-threshold
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"


@dataclass(frozen=True)
class NodeMonitor:
    """kube-controller-manager's node health settings (seconds; the lab scales them down)."""

    grace_seconds: float = 50.0  # --node-monitor-grace-period
    startup_grace_seconds: float = 60.0  # --node-startup-grace-period


@dataclass(frozen=True)
class NodeHealth:
    """What the controller last saw of a node's heartbeats, and when (its own clock)."""

    ready_heartbeat: str | None
    lease_renewed: str | None
    probe_at: float


class ZoneState(Enum):
    NORMAL = "Normal"
    PARTIAL_DISRUPTION = "PartialDisruption"
    FULL_DISRUPTION = "FullDisruption"


def observe(before: NodeHealth | None, node: Obj, lease: Obj | None,
            now: float) -> NodeHealth:
    """The node's health after this look: probe_at moves to now when the Ready heartbeat
    or the lease's renewTime changed since the last look."""
    ready = condition(node, "Ready")
    heartbeat = None if ready is None else str(ready.get("lastHeartbeatTime") or "")
    renewed = None if lease is None else str(
        (lease.get("spec") or {}).get("renewTime") or "") or None
    if before is None:
        if ready is None:  # never posted: the startup grace counts from creation
            created = parse_time((node.get("metadata") or {}).get("creationTimestamp"))
            return NodeHealth(None, renewed, now if created is None else created)
        return NodeHealth(heartbeat, renewed, now)
    probe = before.probe_at
    if heartbeat != before.ready_heartbeat and ready is not None:
        probe = now
    if renewed is not None and renewed != before.lease_renewed:
        probe = now  # RFC 3339 micro in UTC: a newer renewTime differs
    return NodeHealth(heartbeat, renewed, probe)


def grace_left(health: NodeHealth, node: Obj, monitor: NodeMonitor, now: float) -> float:
    """Seconds until the node counts as silent (<= 0: it does)."""
    grace = (monitor.grace_seconds if condition(node, "Ready") is not None
             else monitor.startup_grace_seconds)
    return health.probe_at + grace - now


def with_status_unknown(node: Obj, now: str) -> Obj | None:
    """The node with its kubelet's conditions Unknown, or None when Ready already is."""
    ready = condition(node, "Ready")
    if ready is not None and ready.get("status") == "Unknown":
        return None
    updated: Obj = clone(node)
    status = updated.setdefault("status", {})
    conditions = status.setdefault("conditions", [])
    created = (node.get("metadata") or {}).get("creationTimestamp")
    for kind in KUBELET_CONDITIONS:
        current = next((c for c in conditions if c.get("type") == kind), None)
        if current is None:
            conditions.append({"type": kind, "status": "Unknown",
                               "reason": "NodeStatusNeverUpdated",
                               "message": "Kubelet never posted node status.",
                               "lastHeartbeatTime": created, "lastTransitionTime": now})
        elif current.get("status") != "Unknown":
            current.update(status="Unknown", reason=STATUS_UNKNOWN_REASON,
                           message=STATUS_UNKNOWN_MESSAGE, lastTransitionTime=now)
    return updated


def zone_of(node: Obj) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return f"{labels.get(REGION_LABEL, '')}:\x00:{labels.get(ZONE_LABEL, '')}"


def zone_state(ready: Sequence[bool]) -> ZoneState:
    not_ready = sum(1 for r in ready if not r)
    if not_ready and not_ready == len(ready):
        return ZoneState.FULL_DISRUPTION
    if not_ready > 2 and not_ready / len(ready) >= UNHEALTHY_ZONE_THRESHOLD:
        return ZoneState.PARTIAL_DISRUPTION
    return ZoneState.NORMAL


def zone_states(nodes: Iterable[Obj]) -> dict[str, ZoneState]:
    ready: dict[str, list[bool]] = {}
    for node in nodes:
        ready.setdefault(zone_of(node), []).append(is_node_ready(node))
    return {zone: zone_state(r) for zone, r in ready.items()}


class NoExecute(Enum):
    """What a zone's NoExecute tainter does now (its rate limiter's state)."""

    TAINT = "taint"  # add and swap as Ready says
    HOLD = "hold"  # add none (rate 0), remove none
    LIFT = "lift"  # every zone fully disrupted: remove them all


def no_execute_policy(state: ZoneState, zone_size: int,
                      all_fully_disrupted: bool) -> NoExecute:
    if all_fully_disrupted:
        return NoExecute.LIFT
    if state is ZoneState.PARTIAL_DISRUPTION and zone_size <= LARGE_CLUSTER_THRESHOLD:
        return NoExecute.HOLD  # ReducedQPSFunc: 0 below the large-cluster threshold
    return NoExecute.TAINT


def _keep_or_new(current: Mapping[str, dict[str, Any]], key: str, effect: str,
                 now: str) -> dict[str, Any]:
    return current.get(f"{key}:{effect}") or {"key": key, "effect": effect, "timeAdded": now}


def desired_taints(node: Obj, now: str,
                   no_execute: NoExecute = NoExecute.TAINT) -> list[dict[str, Any]]:
    """The node's taints with the controller's own set as its conditions say."""
    spec = node.get("spec") or {}
    managed = {(k, e) for k in (NOT_READY_TAINT, UNREACHABLE_TAINT)
               for e in ("NoSchedule", "NoExecute")} | {(UNSCHEDULABLE_TAINT, "NoSchedule")}
    taints = [t for t in spec.get("taints") or []
              if (t.get("key"), t.get("effect")) not in managed]
    current = {f"{t.get('key')}:{t.get('effect')}": t for t in spec.get("taints") or []}
    ready = (condition(node, "Ready") or {}).get("status")
    key = {"False": NOT_READY_TAINT, "Unknown": UNREACHABLE_TAINT}.get(str(ready))
    if key is not None:
        taints.append(_keep_or_new(current, key, "NoSchedule", now))
    if spec.get("unschedulable"):
        taints.append(_keep_or_new(current, UNSCHEDULABLE_TAINT, "NoSchedule", now))
    if no_execute is NoExecute.TAINT and key is not None:
        taints.append(_keep_or_new(current, key, "NoExecute", now))
    elif no_execute is NoExecute.HOLD and ready != "True":
        taints += [t for k in (NOT_READY_TAINT, UNREACHABLE_TAINT)
                   if (t := current.get(f"{k}:NoExecute")) is not None]
    return taints


def marked_not_ready(pod: Obj, now: str) -> Obj | None:
    """The pod with its Ready condition False (MarkPodsNotReady), or None if it is so."""
    ready = condition(pod, "Ready")
    if ready is None or ready.get("status") == "False":
        return None
    updated: Obj = clone(pod)
    updated["status"]["conditions"] = [
        {**c, "status": "False", "lastTransitionTime": now} if c == ready else c
        for c in pod["status"]["conditions"]]
    return updated


class NodeLifecycleController(Controller):
    name = "nodelifecycle"
    watches = frozenset({"nodes", LEASES.key})

    def __init__(self, store: Store, monitor: NodeMonitor | None = None) -> None:
        super().__init__(store)
        self.monitor = monitor or NodeMonitor()
        self._ready: dict[str, bool] = {}  # node -> Ready when last observed
        self._health: dict[str, NodeHealth] = {}

    def reconcile(self) -> float | None:
        clock = self.store.clock()
        now = rfc3339(clock)
        wake = self._monitor_health(clock, now)
        nodes = list(self.store.items(NODES))
        left = [n["metadata"]["name"] for n in nodes
                if not is_node_ready(n) and self._ready.get(n["metadata"]["name"], False)]
        self._ready = {n["metadata"]["name"]: is_node_ready(n) for n in nodes}
        if left:
            self._mark_pods_not_ready(set(left), now)
        states = zone_states(nodes)
        sizes: dict[str, int] = {}
        for n in nodes:
            sizes[zone_of(n)] = sizes.get(zone_of(n), 0) + 1
        all_full = bool(states) and all(s is ZoneState.FULL_DISRUPTION
                                        for s in states.values())
        for node in nodes:
            zone = zone_of(node)
            want = desired_taints(node, now, no_execute_policy(states[zone], sizes[zone],
                                                               all_full))
            if want != ((node.get("spec") or {}).get("taints") or []):
                updated = clone(node)
                if want:
                    updated.setdefault("spec", {})["taints"] = want
                else:
                    updated.setdefault("spec", {}).pop("taints", None)
                self.store.update(NODES, updated)
        return wake

    def _monitor_health(self, clock: float, now: str) -> float | None:
        """Observe heartbeats; mark silent nodes Unknown; seconds to the next deadline."""
        leases = {lease["metadata"]["name"]: lease
                  for lease in self.store.items(LEASES, NODE_LEASE_NAMESPACE)}
        wake: float | None = None
        seen = set()
        for node in list(self.store.items(NODES)):
            name = node["metadata"]["name"]
            seen.add(name)
            health = observe(self._health.get(name), node, leases.get(name), clock)
            self._health[name] = health
            left = grace_left(health, node, self.monitor, clock)
            if left < 0:
                updated = with_status_unknown(node, now)
                if updated is not None:
                    try:
                        self.store.update(NODES, updated, subresource="status")
                    except StatusError:
                        continue  # changed meanwhile; the change wakes the next pass
            else:
                wake = left if wake is None else min(wake, left)
        for gone in set(self._health) - seen:
            del self._health[gone]
        return None if wake is None else wake + 0.01

    def _mark_pods_not_ready(self, nodes: set[str], now: str) -> None:
        for pod in list(self.store.items(PODS)):
            if (pod.get("spec") or {}).get("nodeName") not in nodes:
                continue
            updated = marked_not_ready(pod, now)
            if updated is not None:
                try:
                    self.store.update(PODS, updated, subresource="status")
                except StatusError:
                    continue  # gone meanwhile, as upstream skips a NotFound
