"""Admission: the create-time admission plugins, and the chain every write goes through.

kube-apiserver runs a write as: decode with defaults (drainsafe.lab.apiserver.defaults),
the mutating admission plugins, the registry strategy's PrepareForCreate and the
Service registry's address allocation (drainsafe.lab.apiserver.clusterip), then
validation (drainsafe.lab.apiserver.validation); `install` registers that chain on the
store (kubernetes/apiserver pkg/endpoints/handlers/create.go and
pkg/registry/generic/registry/store.go Create, v1.31).

Admission plugins on by default (kubernetes/kubernetes pkg/kubeapiserver/options/plugins.go)
that act on what the lab serves, all on pod CREATE:

- plugin/pkg/admission/serviceaccount: serviceAccountName "default"; the projected
  `kube-api-access-<5>` volume and its read-only mount at
  /var/run/secrets/kubernetes.io/serviceaccount in each container, unless
  automountServiceAccountToken is false;
- plugin/pkg/admission/priority: priority 0 and preemptionPolicy PreemptLowerPriority
  without a class; the two built-in system classes;
- plugin/pkg/admission/defaulttolerationseconds: not-ready/unreachable NoExecute
  tolerations for 300 s (kube-apiserver's --default-not-ready-toleration-seconds and
  --default-unreachable-toleration-seconds; `install` takes one value for both, so a
  time-scaled lab can shorten them).

DefaultStorageClass acts on PVCs, which the lab does not serve. Validating admission
webhooks on pods/eviction are drainsafe.lab.apiserver.admission_webhook.
"""

from __future__ import annotations

from typing import Any

from drainsafe.lab.apiserver import defaults, validation
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.clusterip import ClusterIPs
from drainsafe.lab.apiserver.defaults import DEFAULT_MODE
from drainsafe.lab.apiserver.discovery import ResourceType
from drainsafe.lab.apiserver.store import Obj, Store, random_suffix
from drainsafe.lab.features import DEFAULT as DEFAULT_GATES
from drainsafe.lab.features import FeatureGates

DEFAULT_TOLERATION_SECONDS = 300
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_EXPIRATION_SECONDS = 3607  # serviceaccount.WarnOnlyBoundTokenExpirationSeconds
# The PriorityClasses every cluster has (pkg/apis/scheduling/types.go SystemPriorityClasses).
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2000001000,
                           "system-cluster-critical": 2000000000}


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


def admit_default_toleration_seconds(spec: dict[str, Any],
                                     seconds: int = DEFAULT_TOLERATION_SECONDS) -> None:
    """A pod that tolerates neither taint (by key, or by an empty key) gets 300 s."""
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") in (key, "", None) and t.get("effect") in ("NoExecute", "", None)
                   for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": seconds})


def admit_pod(obj: Obj, *, toleration_seconds: int = DEFAULT_TOLERATION_SECONDS) -> None:
    """The plugins above, in the order the default plugin list runs them."""
    spec = obj.setdefault("spec", {})
    if spec.get("containers"):  # else validation refuses it
        admit_service_account(spec)
    admit_priority(str(obj["metadata"].get("name", "")), spec)
    admit_default_toleration_seconds(spec, toleration_seconds)


def install(store: Store, *, cluster_ip_start: int = 1,
            gates: FeatureGates = DEFAULT_GATES,
            toleration_seconds: int = DEFAULT_TOLERATION_SECONDS) -> ClusterIPs:
    """Register the write chain on `store`; returns the ClusterIP allocator."""
    ips = ClusterIPs(store, start=cluster_ip_start)

    def hook(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        defaults.apply(rt, obj, old, gates)
        if rt.key == "pods" and old is None:
            admit_pod(obj, toleration_seconds=toleration_seconds)
            defaults.prepare_pod_for_create(obj)
        elif rt.key == "services":
            ips.admit(obj, old)
        validation.check(rt, obj, old)

    store.admission.append(hook)
    return ips
