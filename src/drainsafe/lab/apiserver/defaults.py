"""Defaulting: what kube-apiserver's decoder fills in on every write.

Every write is defaulted as kube-apiserver's decoder does it (Kubernetes v1.31, the
version the lab reports); the admission plugins (drainsafe.lab.apiserver.admission) and
validation (drainsafe.lab.apiserver.validation) run after. Sources, kubernetes/kubernetes:

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
  maxUnavailable 1 / maxSurge 0, revisionHistoryLimit 10), ReplicaSet (replicas 1),
  StatefulSet (replicas 1, podManagementPolicy OrderedReady, updateStrategy RollingUpdate
  with rollingUpdate {partition: 0} only when the type was left unset, partition 0 when
  rollingUpdate is given, maxUnavailable 1 when the MaxUnavailableStatefulSet gate is on,
  persistentVolumeClaimRetentionPolicy Retain/Retain, revisionHistoryLimit 10); then
  pkg/registry/apps/statefulset/strategy.go dropStatefulSetDisabledFields drops
  maxUnavailable while that gate is off (drainsafe.lab.features).
- pkg/apis/autoscaling/v2/defaults.go: HPA minReplicas 1, a CPU 80 % utilization metric
  when none is given, scale-up/scale-down rules filled when `behavior` is set.
- pkg/apis/discovery/v1/defaults.go SetDefaults_EndpointPort: name "", protocol TCP.
- pkg/registry/core/pod/strategy.go PrepareForCreate: status.phase Pending, qosClass.

Each hook is (new object, old object or None) -> None and changes the object in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drainsafe.kube.objects import DEFAULT_GRACE_SECONDS
from drainsafe.lab.apiserver.discovery import ResourceType
from drainsafe.lab.apiserver.store import Obj
from drainsafe.lab.features import DEFAULT as DEFAULT_GATES
from drainsafe.lab.features import FeatureGates

DEFAULT_MODE = 420  # 0644: Secret/ConfigMap/DownwardAPI/ProjectedVolumeSourceDefaultMode
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
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
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


def prepare_pod_for_create(obj: Obj) -> None:
    """The pod strategy's PrepareForCreate: a new pod is Pending, with its QoS class."""
    status = obj.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", _qos(obj.get("spec") or {}))


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


def _statefulset(gates: FeatureGates, obj: Obj, old: Obj | None) -> None:
    """SetDefaults_StatefulSet, then the strategy's dropStatefulSetDisabledFields."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("podManagementPolicy", "OrderedReady")
    strategy = spec.setdefault("updateStrategy", {})
    if not strategy.get("type"):
        strategy["type"] = "RollingUpdate"
        strategy.setdefault("rollingUpdate", {})
    ru = strategy.get("rollingUpdate")
    if strategy["type"] == "RollingUpdate" and isinstance(ru, dict):
        ru.setdefault("partition", 0)
        if gates.max_unavailable_stateful_set:
            ru.setdefault("maxUnavailable", 1)
    retention = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
    if isinstance(retention, dict):
        retention.setdefault("whenDeleted", "Retain")
        retention.setdefault("whenScaled", "Retain")
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    _template_defaults(obj)
    if not gates.max_unavailable_stateful_set and isinstance(ru, dict):
        old_ru = ((old or {}).get("spec") or {}).get("updateStrategy", {}).get("rollingUpdate")
        if not (isinstance(old_ru, dict) and old_ru.get("maxUnavailable") is not None):
            ru.pop("maxUnavailable", None)  # maxUnavailableInUse(old) is false


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


def _service(obj: Obj, old: Obj | None) -> None:
    """SetDefaults_Service."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("type", "ClusterIP")
    for p in spec.get("ports") or []:
        p.setdefault("protocol", "TCP")
        if p.get("targetPort") in (None, 0, ""):
            p["targetPort"] = p.get("port")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] in ("NodePort", "LoadBalancer", "ClusterIP"):
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)


Hook = Callable[[Obj, Obj | None], None]
# By resource key (drainsafe.lab.apiserver.discovery); kinds without one have no defaults.
BY_RESOURCE: dict[str, Hook] = {
    "pods": _pod,
    "apps/deployments": _deployment,
    "apps/replicasets": _replicaset,
    "apps/daemonsets": _daemonset,
    "namespaces": _namespace,
    "nodes": _node,
    "services": _service,
    "endpoints": _endpoints,
    "discovery.k8s.io/endpointslices": _endpointslice,
    "autoscaling/horizontalpodautoscalers": _hpa,
}


def apply(rt: ResourceType, obj: Obj, old: Obj | None,
          gates: FeatureGates = DEFAULT_GATES) -> None:
    """Default `obj` in place as the decoder does for its kind (StatefulSets' defaults
    depend on the MaxUnavailableStatefulSet gate)."""
    if rt.key == "apps/statefulsets":
        _statefulset(gates, obj, old)
        return
    fn = BY_RESOURCE.get(rt.key)
    if fn is not None:
        fn(obj, old)
