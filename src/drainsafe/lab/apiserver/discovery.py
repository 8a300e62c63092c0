"""The resources the lab serves, and the legacy discovery documents kubectl reads.

kubectl first asks for aggregated discovery; a plain application/json answer makes
client-go fall back to legacy APIVersions / APIGroupList / APIResourceList
(kubernetes/client-go discovery/discovery_client.go). Only groups actually served are
listed, because client-go fetches every group-version it is told about.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SERVER_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-drainsafe-lab",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-12-01T00:00:00Z",
    "goVersion": "go1.22.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_RW = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Subresource:
    name: str
    kind: str
    verbs: tuple[str, ...]
    group: str = ""
    version: str = ""


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[Subresource, ...] = ()
    has_status: bool = field(default=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Store key, e.g. 'pods' or 'apps/deployments'."""
        return f"{self.group}/{self.plural}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    def subresource(self, name: str) -> Subresource | None:
        return next((s for s in self.subresources if s.name == name), None)


def _status(kind: str) -> Subresource:
    return Subresource("status", kind, ("get", "patch", "update"))


def _scale() -> Subresource:
    return Subresource("scale", "Scale", ("get", "patch", "update"), "autoscaling", "v1")


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", False, ("ns",),
                 subresources=(_status("Namespace"),), has_status=True),
    ResourceType("", "v1", "nodes", "Node", False, ("no",),
                 subresources=(_status("Node"),), has_status=True),
    ResourceType(
        "", "v1", "pods", "Pod", True, ("po",), ("all",),
        subresources=(
            _status("Pod"),
            Subresource("eviction", "Eviction", ("create",), "policy", "v1"),
            Subresource("binding", "Binding", ("create",)),
            Subresource("log", "Pod", ("get",)),
            Subresource("proxy", "PodProxyOptions",
                        ("create", "delete", "get", "patch", "update")),
        ),
        has_status=True,
    ),
    ResourceType("", "v1", "services", "Service", True, ("svc",), ("all",),
                 subresources=(_status("Service"),), has_status=True),
    ResourceType("", "v1", "endpoints", "Endpoints", True, ("ep",)),
    ResourceType("", "v1", "events", "Event", True, ("ev",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",)),
    ResourceType("apps", "v1", "deployments", "Deployment", True, ("deploy",), ("all",),
                 subresources=(_status("Deployment"), _scale()), has_status=True),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, ("rs",), ("all",),
                 subresources=(_status("ReplicaSet"), _scale()), has_status=True),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), ("all",),
                 subresources=(_status("DaemonSet"),), has_status=True),
    ResourceType("apps", "v1", "statefulsets", "StatefulSet", True, ("sts",), ("all",),
                 subresources=(_status("StatefulSet"), _scale()), has_status=True),
    ResourceType("apps", "v1", "controllerrevisions", "ControllerRevision", True),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",),
                 subresources=(_status("PodDisruptionBudget"),), has_status=True),
    ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
    ResourceType("", "v1", "secrets", "Secret", True),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    # Stored only: the lab authorises every valid token (RBAC objects are accepted, so that
    # real install manifests apply, but not enforced).
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings",
                 "ClusterRoleBinding", False),
    # Called on pods/eviction by drainsafe.lab.apiserver.admission_webhook.
    ResourceType("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                 "ValidatingWebhookConfiguration", False),
    ResourceType("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler",
                 True, ("hpa",), ("all",),
                 subresources=(_status("HorizontalPodAutoscaler"),), has_status=True),
)

BY_KEY: dict[str, ResourceType] = {r.key: r for r in RESOURCES}
_BY_GV: dict[tuple[str, str, str], ResourceType] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_GV.get((group, version, plural))


def group_versions() -> list[tuple[str, str]]:
    """Served (group, version) pairs in a stable order, core first."""
    seen: list[tuple[str, str]] = []
    for r in RESOURCES:
        if (r.group, r.version) not in seen:
            seen.append((r.group, r.version))
    return seen


def api_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }


def api_group_list() -> dict[str, Any]:
    groups = []
    for group, version in group_versions():
        if not group:
            continue
        gv = {"groupVersion": f"{group}/{version}", "version": version}
        groups.append({"name": group, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group: str) -> dict[str, Any] | None:
    for g in api_group_list()["groups"]:
        if g["name"] == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **g}
    return None


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    resources: list[dict[str, Any]] = []
    for r in RESOURCES:
        if (r.group, r.version) != (group, version):
            continue
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(_RW),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        resources.append(entry)
        for sub in r.subresources:
            sub_entry: dict[str, Any] = {
                "name": f"{r.plural}/{sub.name}",
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": sub.kind,
                "verbs": list(sub.verbs),
            }
            if sub.group:
                sub_entry["group"] = sub.group
                sub_entry["version"] = sub.version
            resources.append(sub_entry)
    if not resources:
        return None
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": resources}
