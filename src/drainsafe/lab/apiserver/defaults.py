"""Admission: the defaulting, admission plugins and validation of the real API server.

Every write is defaulted as kube-apiserver's decoder does it (Kubernetes v1.31, the
version the lab reports), then the create-time admission plugins run, then validation
(drainsafe.lab.apiserver.validation). Sources, kubernetes/kubernetes:

- pkg/apis/core/v1/defaults.go: SetDefaults_PodSpec (dnsPolicy ClusterFirst,
  restartPolicy Always, securityContext {}, terminationGracePeriodSeconds 30,
  schedulerName default-scheduler), SetDefaults_Pod (requests copied from limits, on
  Pods only and not on templates; enableServiceLinks true; hostNetwork hostPorts),
  SetDefaults_Container (imagePullPolicy Always for a `latest` or missing tag, else
  IfNotPresent; terminationMessagePath /dev/termination-log; terminationMessagePolicy
  File), SetDefaults_Probe (timeoutSeconds 1, periodSeconds 10, successThreshold 1,
  failureThreshold 3), SetDefaults_HTTPGetAction (path "/", scheme HTTP),
  SetDefaults_ObjectFieldSelector (apiVersion v1), SetDefaults_Volume (no source:
  emptyDir), secret/configMap/downwardAPI/projected defaultMode 420,
  SetDefaults_ServiceAccountTokenProjection (expirationSeconds 3600),
  SetDefaults_HostPathVolumeSource (type ""), SetDefaults_Service (sessionAffinity
  None, type ClusterIP, port protocol TCP and targetPort = port, internalTrafficPolicy
  Cluster, externalTrafficPolicy Cluster and allocateLoadBalancerNodePorts for external
  types), SetDefaults_Namespace (kubernetes.io/metadata.name label),
  SetDefaults_NodeStatus (allocatable = capacity), SetDefaults_Endpoints (protocol TCP);
  the generated defaults (zz_generated.defaults.go) for `+default` markers: container
  port protocol TCP, grpc probe service "".
- pkg/apis/core/v1/conversion.go: the deprecated spec.serviceAccount mirrors
  serviceAccountName in every pod spec (templates too).
- pkg/apis/apps/v1/defaults.go: Deployment (replicas 1, RollingUpdate 25%/25%,
  revisionHistoryLimit 10, progressDeadlineSeconds 600), DaemonSet (RollingUpdate
  maxUnavailable 1 / maxSurge 0, revisionHistoryLimit 10), ReplicaSet (replicas 1).
- pkg/apis/autoscaling/v2/defaults.go: HPA minReplicas 1, a CPU 80 % utilization metric
  when none is given, scale-up/scale-down rules filled when `behavior` is set.
- pkg/apis/discovery/v1/defaults.go SetDefaults_EndpointPort: name "", protocol TCP.
- pkg/registry/core/pod/strategy.go PrepareForCreate: status.phase Pending, qosClass.
- Admission plugins on by default (pkg/kubeapiserver/options/plugins.go):
  plugin/pkg/admission/serviceaccount (serviceAccountName "default"; the projected
  `kube-api-access-<5>` volume and its read-only mount at
  /var/run/secrets/kubernetes.io/serviceaccount in each container, unless
  automountServiceAccountToken is false), plugin/pkg/admission/priority (priority 0 and
  preemptionPolicy PreemptLowerPriority without a class; the two built-in system
  classes), plugin/pkg/admission/defaulttolerationseconds (not-ready/unreachable
  NoExecute tolerations for 300 s). DefaultStorageClass acts on PVCs, which the lab
  does not serve.

ClusterIPs come from 127.96.0.0/16 so that a kube-proxy-like path can bind them on
loopback. Each hook is (resource type, new object, old object or None) -> None.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver import validation
from drainsafe.lab.apiserver.discovery import BY_KEY, ResourceType
from drainsafe.lab.apiserver.store import Obj, Store, random_suffix

CLUSTER_IP_RANGE = ipaddress.ip_network("127.96.0.0/16")
NODE_PORT_RANGE = range(30000, 32768)
DEFAULT_TOLERATION_SECONDS = 300
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_EXPIRATION_SECONDS = 3607  # serviceaccount.WarnOnlyBoundTokenExpirationSeconds
DEFAULT_MODE = 420  # 0644: Secret/ConfigMap/DownwardAPI/ProjectedVolumeSourceDefaultMode
# The PriorityClasses every cluster has (pkg/apis/scheduling/types.go SystemPriorityClasses).
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2000001000,
                           "system-cluster-critical": 2000000000}
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def image_pull_policy(image: str) -> str:
    """SetDefaults_Container via parsers.ParseImageName: Always for the `latest` tag,
    which is also what an image without tag or digest means; else IfNotPresent."""
    name = image.split("@", 1)[0]
    if "@" in image and ":" not in name.rsplit("/", 1)[-1]:
        return "IfNotPresent"  # by digest only: no tag
    last = name.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def quantity_text(value: Any) -> Any:
    """A resource.Quantity given as a JSON number comes back as a string, the way the
    server serialises every Quantity (1 -> "1", 0.5 -> "500m"); other spellings are
    kept as written (the canonical re-spelling of strings is not emulated)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def _quantities(resources: Any) -> None:
    if isinstance(resources, dict):
        for name, value in resources.items():
            resources[name] = quantity_text(value)


def _http_get(action: Any) -> None:
    if isinstance(action, dict) and isinstance(action.get("httpGet"), dict):
        action["httpGet"].setdefault("path", "/")
        action["httpGet"].setdefault("scheme", "HTTP")


def _probe(probe: Any) -> None:
    if not isinstance(probe, dict):
        return
    # SetDefaults_Probe: a zero counts as unset (the Go fields are plain int32).
    for key, value in (("timeoutSeconds", 1), ("periodSeconds", 10),
                       ("successThreshold", 1), ("failureThreshold", 3)):
        if not probe.get(key):
            probe[key] = value
    _http_get(probe)
    if isinstance(probe.get("grpc"), dict):
        probe["grpc"].setdefault("service", "")


def _container_defaults(c: dict[str, Any]) -> None:
    c.setdefault("imagePullPolicy", image_pull_policy(str(c.get("image", ""))))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    res = c.setdefault("resources", {})
    if isinstance(res, dict):
        _quantities(res.get("requests"))
        _quantities(res.get("limits"))
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
    for name in _PROBES:
        _probe(c.get(name))
    lifecycle = c.get("lifecycle")
    if isinstance(lifecycle, dict):
        for hook in ("postStart", "preStop"):
            _http_get(lifecycle.get(hook))
    for e in c.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("fieldRef") if isinstance(e, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def _volume_defaults(v: dict[str, Any]) -> None:
    sources = set(v) - {"name"}
    if not sources:
        v["emptyDir"] = {}
    for kind in ("secret", "configMap", "downwardAPI", "projected"):
        if isinstance(v.get(kind), dict):
            v[kind].setdefault("defaultMode", DEFAULT_MODE)
    if isinstance(v.get("hostPath"), dict):
        v["hostPath"].setdefault("type", "")
    for item in (v.get("downwardAPI") or {}).get("items") or []:
        if isinstance(item.get("fieldRef"), dict):
            item["fieldRef"].setdefault("apiVersion", "v1")
    for source in (v.get("projected") or {}).get("sources") or []:
        if isinstance(source.get("serviceAccountToken"), dict):
            source["serviceAccountToken"].setdefault("expirationSeconds", 3600)
        for item in (source.get("downwardAPI") or {}).get("items") or []:
            if isinstance(item.get("fieldRef"), dict):
                item["fieldRef"].setdefault("apiVersion", "v1")


def _all_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for key in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(key) or [] if isinstance(c, dict)]


def pod_spec_defaults(spec: dict[str, Any]) -> None:
    """SetDefaults_PodSpec and the defaults of everything a pod spec holds (templates too)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for c in _all_containers(spec):
        _container_defaults(c)
    for v in spec.get("volumes") or []:
        if isinstance(v, dict):
            _volume_defaults(v)
    if spec.get("serviceAccountName"):
        spec["serviceAccount"] = spec["serviceAccountName"]  # v1 conversion
    elif spec.get("serviceAccount"):
        spec["serviceAccountName"] = spec["serviceAccount"]


def _requests_from_limits(spec: dict[str, Any]) -> None:
    """SetDefaults_Pod: a container's limits stand in for its missing requests."""
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            res = c.get("resources") if isinstance(c, dict) else None
            if isinstance(res, dict) and isinstance(res.get("limits"), dict):
                requests = res.setdefault("requests", {})
                for name, value in res["limits"].items():
                    requests.setdefault(name, value)


def _qos(spec: dict[str, Any]) -> str:
    """pkg/apis/core/helper/qos GetPodQOS over cpu and memory."""
    reqs, lims = [], []
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        reqs.append({k: v for k, v in (res.get("requests") or {}).items()
                     if k in ("cpu", "memory")})
        lims.append({k: v for k, v in (res.get("limits") or {}).items()
                     if k in ("cpu", "memory")})
    if not any(reqs) and not any(lims):
        return "BestEffort"
    guaranteed = all(
        set(lim) >= {"cpu", "memory"}
        and all(req.get(k, lim[k]) == lim[k] for k in ("cpu", "memory"))
        for req, lim in zip(reqs, lims, strict=True))
    return "Guaranteed" if guaranteed else "Burstable"


def admit_service_account(spec: dict[str, Any]) -> None:
    """The ServiceAccount admission plugin (its lookup of the account is not emulated)."""
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec["serviceAccount"] = "default"
    if spec.get("automountServiceAccountToken") is False:
        return
    volumes = spec.get("volumes") or []
    existing = next((v["name"] for v in volumes if isinstance(v, dict)
                     and str(v.get("name", "")).startswith("kube-api-access-")), None)
    name = existing or f"kube-api-access-{random_suffix()}"
    needed = False
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            mounts = c.setdefault("volumeMounts", [])
            if not any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                mounts.append({"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH})
                needed = True
    if needed and existing is None:
        spec["volumes"] = [*volumes, {"name": name, "projected": {
            "defaultMode": DEFAULT_MODE,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                                         "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}}]


def admit_priority(name: str, spec: dict[str, Any]) -> None:
    """The Priority admission plugin. The lab serves no PriorityClasses: classes other
    than the two built-in ones resolve to 0 (a real server refuses unknown names)."""
    cls = spec.get("priorityClassName") or ""
    priority = SYSTEM_PRIORITY_CLASSES.get(cls, 0)
    given = spec.get("priority")
    if given is not None and given != priority:
        raise st.StatusError(
            403, "Forbidden",
            f'pods "{name}" is forbidden: the integer value of priority ({given}) must not '
            "be provided in pod spec; priority admission controller computed "
            f"{priority} from the given PriorityClass name",
            details={"name": name, "kind": "pods"})
    spec["priority"] = priority
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


def admit_default_toleration_seconds(spec: dict[str, Any]) -> None:
    """A pod that tolerates neither taint (by key, or by an empty key) gets 300 s."""
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") in (key, "", None) and t.get("effect") in ("NoExecute", "", None)
                   for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})


def _pod(obj: Obj, old: Obj | None) -> None:
    spec = obj.setdefault("spec", {})
    pod_spec_defaults(spec)
    _requests_from_limits(spec)
    spec.setdefault("enableServiceLinks", True)
    if spec.get("hostNetwork"):
        for c in _all_containers(spec):
            for p in c.get("ports") or []:
                if not p.get("hostPort"):
                    p["hostPort"] = p.get("containerPort")
    if old is None:
        if spec.get("containers"):  # else validation refuses it
            admit_service_account(spec)
        admit_priority(str(obj["metadata"].get("name", "")), spec)
        admit_default_toleration_seconds(spec)
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", _qos(spec))


def _template_defaults(obj: Obj) -> None:
    template = obj.setdefault("spec", {}).setdefault("template", {})
    template.setdefault("metadata", {})
    pod_spec_defaults(template.setdefault("spec", {}))


def _deployment(obj: Obj, old: Obj | None) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", "25%")
        ru.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _template_defaults(obj)


def _replicaset(obj: Obj, old: Obj | None) -> None:
    obj.setdefault("spec", {}).setdefault("replicas", 1)
    _template_defaults(obj)


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


_SCALE_UP = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
    {"type": "Pods", "value": 4, "periodSeconds": 15},
    {"type": "Percent", "value": 100, "periodSeconds": 15}]}
_SCALE_DOWN = {"selectPolicy": "Max", "policies": [
    {"type": "Percent", "value": 100, "periodSeconds": 15}]}


def _hpa(obj: Obj, old: Obj | None) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("minReplicas", 1)
    if not spec.get("metrics"):
        spec["metrics"] = [{"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):
        for key, rules in (("scaleUp", _SCALE_UP), ("scaleDown", _SCALE_DOWN)):
            given = behavior.get(key) or {}
            behavior[key] = {**{k: (list(v) if isinstance(v, list) else v)
                                for k, v in rules.items()},
                             **{k: v for k, v in given.items() if v is not None}}


def _namespace(obj: Obj, old: Obj | None) -> None:
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj.setdefault("status", {}).setdefault("phase", "Active")
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = \
        obj["metadata"]["name"]


def _node(obj: Obj, old: Obj | None) -> None:
    status = obj.get("status")
    if isinstance(status, dict):
        _quantities(status.get("capacity"))
        _quantities(status.get("allocatable"))
        if "allocatable" not in status and "capacity" in status:
            status["allocatable"] = dict(status["capacity"])


def _endpoints(obj: Obj, old: Obj | None) -> None:
    for subset in obj.get("subsets") or []:
        for p in subset.get("ports") or []:
            p.setdefault("protocol", "TCP")


def _endpointslice(obj: Obj, old: Obj | None) -> None:
    for p in obj.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("name", "")
            p.setdefault("protocol", "TCP")


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
        """SetDefaults_Service, then the registry's ClusterIP handling
        (pkg/registry/core/service/storage/storage.go: patchAllocatedValues keeps the old
        addresses when a write leaves them out; normalizeClusterIPs makes clusterIPs
        follow a changed clusterIP, which validation then refuses)."""
        spec = obj.setdefault("spec", {})
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("type", "ClusterIP")
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            if p.get("targetPort") in (None, 0, ""):
                p["targetPort"] = p.get("port")
        external = spec["type"] in ("NodePort", "LoadBalancer")
        if external:
            spec.setdefault("externalTrafficPolicy", "Cluster")
        if spec["type"] in ("NodePort", "LoadBalancer", "ClusterIP"):
            spec.setdefault("internalTrafficPolicy", "Cluster")
        if spec["type"] == "LoadBalancer":
            spec.setdefault("allocateLoadBalancerNodePorts", True)
        if old is not None:
            old_spec = old.get("spec") or {}
            if not spec.get("clusterIP") and old_spec.get("clusterIP"):
                spec["clusterIP"] = old_spec["clusterIP"]
            if not spec.get("clusterIPs") and old_spec.get("clusterIPs"):
                spec["clusterIPs"] = list(old_spec["clusterIPs"])
            if spec.get("clusterIP") != old_spec.get("clusterIP") \
                    and spec.get("clusterIPs") == old_spec.get("clusterIPs") \
                    and spec.get("clusterIPs"):
                spec["clusterIPs"] = [spec["clusterIP"], *spec["clusterIPs"][1:]]
            for p, was in zip(spec.get("ports") or [], old_spec.get("ports") or [],
                              strict=False):
                if external and not p.get("nodePort") and was.get("nodePort"):
                    p["nodePort"] = was["nodePort"]
        elif spec.get("clusterIP") != "None":
            wanted = spec.get("clusterIP")
            if wanted:
                ip = ipaddress.ip_address(wanted)
                if ip not in CLUSTER_IP_RANGE:
                    raise validation.invalid_error("", "Service", obj["metadata"].get(
                        "name", ""), [validation.invalid(
                            "spec.clusterIPs", validation.go_string_slice([wanted]),
                            "failed to allocate IP "
                            f"{wanted}: provided IP ({wanted}) is not in the valid range. "
                            f"The range of valid IPs is {CLUSTER_IP_RANGE}")])
            else:
                spec["clusterIP"] = self.allocate()
            spec["clusterIPs"] = [spec["clusterIP"]]
        else:
            spec["clusterIPs"] = ["None"]
        if external:
            self._node_ports(spec)
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if old is None:
            obj.setdefault("status", {"loadBalancer": {}})

    def _node_ports(self, spec: dict[str, Any]) -> None:
        """A nodePort per port of NodePort/LoadBalancer Services (allocated, not served:
        the lab has no node-port path)."""
        used = {p.get("nodePort") for s in self.store.items(BY_KEY["services"])
                for p in (s.get("spec") or {}).get("ports") or []}
        used |= {p.get("nodePort") for p in spec.get("ports") or []}
        for p in spec.get("ports") or []:
            if not p.get("nodePort"):
                port = next(n for n in NODE_PORT_RANGE if n not in used)
                p["nodePort"] = port
                used.add(port)


def install(store: Store, *, cluster_ip_start: int = 1) -> ClusterIPs:
    """Register the admission hooks on `store`; returns the ClusterIP allocator."""
    ips = ClusterIPs(store, start=cluster_ip_start)
    by_key = {
        "pods": _pod,
        "apps/deployments": _deployment,
        "apps/replicasets": _replicaset,
        "apps/daemonsets": _daemonset,
        "namespaces": _namespace,
        "nodes": _node,
        "services": ips.admit,
        "endpoints": _endpoints,
        "discovery.k8s.io/endpointslices": _endpointslice,
        "autoscaling/horizontalpodautoscalers": _hpa,
    }

    def hook(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        fn = by_key.get(rt.key)
        if fn is not None:
            fn(obj, old)
        validation.check(rt, obj, old)

    store.admission.append(hook)
    return ips
