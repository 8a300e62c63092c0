"""The resources the lab serves, and the legacy discovery documents kubectl reads.

kubectl first asks for aggregated discovery; a plain application/json answer makes
client-go fall back to legacy APIVersions / APIGroupList / APIResourceList
(kubernetes/client-go discovery/discovery_client.go). Only groups actually served are
listed, because client-go fetches every group-version it is told about.

The built-in kinds are fixed (RESOURCES); a `Catalog` adds the kinds that
CustomResourceDefinitions define (drainsafe.lab.apiserver.crd), per API server. A group
with several versions lists them highest priority first and prefers the first, as
apimachinery's version.CompareKubeAwareVersionStrings orders them (v1 > v1beta2 >
v1beta1 > v1alpha1 > anything else, alphabetically) and the apiextensions discovery
controller (k8s.io/apiextensions-apiserver pkg/apiserver/customresource_discovery_
controller.go, v0.33) serves them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
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
    singular_name: str = ""  # when it is not the lower-case kind (custom kinds)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Store key, e.g. 'pods' or 'apps/deployments'."""
        return f"{self.group}/{self.plural}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.singular_name or self.kind.lower()

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
    # The kinds they define are served by drainsafe.lab.apiserver.crd.
    ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                 "CustomResourceDefinition", False, ("crd", "crds"), ("api-extensions",),
                 subresources=(_status("CustomResourceDefinition"),), has_status=True),
)

BY_KEY: dict[str, ResourceType] = {r.key: r for r in RESOURCES}
_BY_GV: dict[tuple[str, str, str], ResourceType] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}
_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """A sort key, lowest first: GA by number descending, then beta, then alpha, then
    non-Kubernetes versions alphabetically (CompareKubeAwareVersionStrings)."""
    m = _KUBE_VERSION.match(version)
    if m is None:
        return (3, 0, 0, version)
    level = {"": 0, "beta": 1, "alpha": 2}[m.group(2) or ""]
    return (level, -int(m.group(1)), -int(m.group(3) or 0), "")


class Catalog:
    """The resource types one API server serves: the built-in ones, then those its
    CustomResourceDefinitions add (several versions of one custom kind share its key)."""

    def __init__(self) -> None:
        self._custom: dict[tuple[str, str, str], ResourceType] = {}

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return _BY_GV.get((group, version, plural)) or self._custom.get((group, version, plural))

    def by_key(self, key: str) -> ResourceType | None:
        """The type stored under `key` (for a custom kind: its first registered version)."""
        found = BY_KEY.get(key)
        if found is None:
            found = next((r for r in self._custom.values() if r.key == key), None)
        return found

    def all(self) -> list[ResourceType]:
        return [*RESOURCES, *self._custom.values()]

    def resource_keys(self) -> list[str]:
        """Each stored resource once."""
        return list(dict.fromkeys(r.key for r in self.all()))

    def is_custom(self, rt: ResourceType) -> bool:
        return (rt.group, rt.version, rt.plural) not in _BY_GV

    def serve(self, key: str, types: Iterable[ResourceType]) -> None:
        """Serve `types` (the versions of one custom kind) in place of what `key` had."""
        self.withdraw(key)
        for r in types:
            self._custom[(r.group, r.version, r.plural)] = r

    def withdraw(self, key: str) -> None:
        for gvr in [g for g, r in self._custom.items() if r.key == key]:
            del self._custom[gvr]


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_GV.get((group, version, plural))


def group_versions(resources: Sequence[ResourceType] = RESOURCES) -> list[tuple[str, str]]:
    """Served (group, version) pairs in a stable order, core first; a group's versions
    by priority."""
    seen: list[tuple[str, str]] = []
    for r in resources:
        if (r.group, r.version) not in seen:
            seen.append((r.group, r.version))
    groups = list(dict.fromkeys(g for g, _ in seen))
    return [(g, v) for g in groups
            for v in sorted((v for gg, v in seen if gg == g), key=version_priority)]


def api_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }


def api_group_list(resources: Sequence[ResourceType] = RESOURCES) -> dict[str, Any]:
    groups: dict[str, list[dict[str, str]]] = {}
    for group, version in group_versions(resources):
        if group:
            groups.setdefault(group, []).append(
                {"groupVersion": f"{group}/{version}", "version": version})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": g, "versions": versions, "preferredVersion": versions[0]}
        for g, versions in groups.items()]}


def api_group(group: str, resources: Sequence[ResourceType] = RESOURCES
              ) -> dict[str, Any] | None:
    for g in api_group_list(resources)["groups"]:
        if g["name"] == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **g}
    return None


def api_resource_list(group: str, version: str,
                      resources: Sequence[ResourceType] = RESOURCES) -> dict[str, Any] | None:
    entries: list[dict[str, Any]] = []
    for r in resources:
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
        entries.append(entry)
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
            entries.append(sub_entry)
    if not entries:
        return None
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": entries}
