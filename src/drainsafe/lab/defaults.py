"""Admission: the defaulting and validation the real API server applies on write.

Defaults from kubernetes/kubernetes pkg/apis/core/v1/defaults.go and
pkg/apis/apps/v1/defaults.go (terminationGracePeriodSeconds 30, RollingUpdate 25%/25%,
revisionHistoryLimit 10, progressDeadlineSeconds 600, ...), the DefaultTolerationSeconds
admission plugin (not-ready/unreachable NoExecute for 300 s), and ClusterIP
allocation, here from 127.96.0.0/16 so that a kube-proxy-like path can bind them on
loopback. Each hook is (resource type, new object, old object or None) -> None.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from drainsafe import pdb as pdbmath
from drainsafe.lab import status as st
from drainsafe.lab.discovery import BY_KEY, ResourceType
from drainsafe.lab.store import Obj, Store
from drainsafe.labels import SelectorError, from_label_selector

CLUSTER_IP_RANGE = ipaddress.ip_network("127.96.0.0/16")
DEFAULT_TOLERATION_SECONDS = 300


def _container_defaults(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = str(c.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    latest = ":" not in tag or tag.endswith(":latest")
    c.setdefault("imagePullPolicy", "Always" if latest and "@" not in image else "IfNotPresent")
    c.setdefault("resources", {})
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")


def pod_spec_defaults(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(c, dict):
            _container_defaults(c)


def _qos(spec: dict[str, Any]) -> str:
    reqs, lims = [], []
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        reqs.append(res.get("requests") or {})
        lims.append(res.get("limits") or {})
    if not any(reqs) and not any(lims):
        return "BestEffort"
    guaranteed = all(
        set(lim) >= {"cpu", "memory"}
        and all(req.get(k, lim[k]) == lim[k] for k in ("cpu", "memory"))
        for req, lim in zip(reqs, lims, strict=True))
    return "Guaranteed" if guaranteed else "Burstable"


def _pod(obj: Obj, old: Obj | None) -> None:
    spec = obj.setdefault("spec", {})
    if old is None:
        if not spec.get("containers"):
            raise st.invalid("Pod", obj["metadata"].get("name", ""),
                             [("spec.containers", "Required value")])
        pod_spec_defaults(spec)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("priority", 0)
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(t.get("key") == key and t.get("effect") in ("NoExecute", None, "")
                       for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", _qos(spec))


def _template_defaults(obj: Obj) -> None:
    template = obj.setdefault("spec", {}).setdefault("template", {})
    pod_spec_defaults(template.setdefault("spec", {}))
    template.setdefault("metadata", {})


def _check_selector(obj: Obj, kind: str) -> None:
    spec = obj.get("spec") or {}
    name = obj["metadata"].get("name", "")
    try:
        selector = from_label_selector(spec.get("selector"))
    except SelectorError as exc:
        raise st.invalid(kind, name, [("spec.selector", str(exc))]) from None
    if selector.empty:
        raise st.invalid(kind, name, [("spec.selector", "Required value")])
    labels = (spec.get("template") or {}).get("metadata", {}).get("labels") or {}
    if not selector.matches(labels):
        raise st.invalid(kind, name, [("spec.template.metadata.labels",
                         f"Invalid value: {labels}: `selector` does not match template "
                         "`labels`")])


def _deployment(obj: Obj, old: Obj | None) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        ru.setdefault("maxSurge", "25%")
        ru.setdefault("maxUnavailable", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _template_defaults(obj)
    _check_selector(obj, "Deployment")


def _replicaset(obj: Obj, old: Obj | None) -> None:
    obj.setdefault("spec", {}).setdefault("replicas", 1)
    _template_defaults(obj)
    _check_selector(obj, "ReplicaSet")


def _daemonset(obj: Obj, old: Obj | None) -> None:
    spec = obj.setdefault("spec", {})
    strategy = spec.setdefault("updateStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", 1)
        ru.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    _template_defaults(obj)
    _check_selector(obj, "DaemonSet")


def _pdb(obj: Obj, old: Obj | None) -> None:
    try:
        pdbmath.PdbSpec.from_manifest(obj.get("spec") or {})
    except pdbmath.BudgetSpecError as exc:
        raise st.invalid("PodDisruptionBudget", obj["metadata"].get("name", ""),
                         [("spec", str(exc))]) from None


def _namespace(obj: Obj, old: Obj | None) -> None:
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj.setdefault("status", {}).setdefault("phase", "Active")
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = \
        obj["metadata"]["name"]


class ClusterIPs:
    """Allocates one stable ClusterIP per Service from CLUSTER_IP_RANGE."""

    def __init__(self, store: Store, *, start: int = 1) -> None:
        self.store = store
        size = CLUSTER_IP_RANGE.num_addresses
        # Where the search for a free address begins (1 = 127.96.0.1). Labs sharing one
        # machine pick different starts so their loopback ClusterIPs do not collide.
        self._cursor = 1 + (start - 1) % (size - 2)

    def allocate(self) -> str:
        used = {s.get("spec", {}).get("clusterIP") for s in self.store.items(BY_KEY["services"])}
        size = CLUSTER_IP_RANGE.num_addresses
        for step in range(size - 2):
            n = 1 + (self._cursor - 1 + step) % (size - 2)
            ip = str(CLUSTER_IP_RANGE.network_address + n)
            if ip not in used:
                self._cursor = n + 1
                return ip
        raise st.StatusError(500, "InternalError",
                             "failed to allocate a serviceIP: range is full")

    def admit(self, obj: Obj, old: Obj | None) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
        if old is not None:
            kept = (old.get("spec") or {}).get("clusterIP")
            if spec.get("clusterIP") not in (None, "", kept):
                raise st.invalid("Service", obj["metadata"]["name"], [(
                    "spec.clusterIPs[0]", "Invalid value: field is immutable")])
            if kept:
                spec["clusterIP"] = kept
                spec["clusterIPs"] = [kept]
        elif spec.get("clusterIP") != "None":
            wanted = spec.get("clusterIP")
            if wanted:
                ip = ipaddress.ip_address(wanted)
                if ip not in CLUSTER_IP_RANGE:
                    raise st.invalid("Service", obj["metadata"].get("name", ""), [(
                        "spec.clusterIPs", f"Invalid value: \"{wanted}\": provided IP is not "
                        f"in the valid range. The range of valid IPs is {CLUSTER_IP_RANGE}")])
            else:
                spec["clusterIP"] = self.allocate()
            spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if old is None:
            obj.setdefault("status", {"loadBalancer": {}})


def install(store: Store, *, cluster_ip_start: int = 1) -> ClusterIPs:
    """Register the admission hooks on `store`; returns the ClusterIP allocator."""
    ips = ClusterIPs(store, start=cluster_ip_start)
    by_key = {
        "pods": _pod,
        "apps/deployments": _deployment,
        "apps/replicasets": _replicaset,
        "apps/daemonsets": _daemonset,
        "policy/poddisruptionbudgets": _pdb,
        "namespaces": _namespace,
        "services": ips.admit,
    }

    def hook(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        fn = by_key.get(rt.key)
        if fn is not None:
            fn(obj, old)

    store.admission.append(hook)
    return ips
