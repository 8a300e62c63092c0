"""Which backends a proxy should send a Service's traffic to (pure, no I/O).

kube-proxy semantics (kubernetes/kubernetes pkg/proxy/topology.go CategorizeEndpoints and
KEP-1669 ProxyTerminatingEndpoints, GA in 1.28): new connections go to endpoints whose
EndpointSlice condition `ready` is true (nil counts as true, per the EndpointConditions API
doc); only when a Service has no ready endpoint at all are `serving` + `terminating` ones
used. Service ports map to slice ports by port name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SERVICE_NAME_LABEL = "kubernetes.io/service-name"

Key = tuple[str, str]


@dataclass(frozen=True)
class ServicePort:
    name: str
    port: int
    protocol: str
    backends: tuple[str, ...]  # "ip:port", sorted


@dataclass(frozen=True)
class ServiceView:
    namespace: str
    name: str
    cluster_ip: str
    ports: tuple[ServicePort, ...]

    def port(self, port: int | str | None = None) -> ServicePort:
        if port is None:
            if not self.ports:
                raise LookupError(f"service {self.namespace}/{self.name} has no ports")
            return self.ports[0]
        for p in self.ports:
            if port in (p.port, p.name):
                return p
        raise LookupError(f"service {self.namespace}/{self.name} has no port {port!r}")


def _cond(conditions: Mapping[str, Any], name: str, default: bool) -> bool:
    value = conditions.get(name)
    return default if value is None else bool(value)


def slice_backends(slices: Iterable[Mapping[str, Any]], port_name: str) -> tuple[str, ...]:
    ready: set[str] = set()
    terminating: set[str] = set()
    for sl in slices:
        numbers = [int(p["port"]) for p in sl.get("ports") or []
                   if (p.get("name") or "") == port_name and p.get("port") is not None]
        if not numbers:
            continue
        for ep in sl.get("endpoints") or []:
            cond = ep.get("conditions") or {}
            for address in ep.get("addresses") or []:
                for number in numbers:
                    backend = f"{address}:{number}"
                    if _cond(cond, "ready", True):
                        ready.add(backend)
                    elif _cond(cond, "serving", False) and _cond(cond, "terminating", False):
                        terminating.add(backend)
    return tuple(sorted(ready or terminating))


def service_views(services: Iterable[Mapping[str, Any]],
                  slices: Iterable[Mapping[str, Any]]) -> dict[Key, ServiceView]:
    by_service: dict[Key, list[Mapping[str, Any]]] = {}
    for sl in slices:
        meta = sl.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if owner:
            by_service.setdefault((str(meta.get("namespace") or ""), str(owner)), []).append(sl)
    views: dict[Key, ServiceView] = {}
    for svc in services:
        meta = svc.get("metadata") or {}
        spec = svc.get("spec") or {}
        cluster_ip = spec.get("clusterIP")
        if not cluster_ip or cluster_ip == "None" or spec.get("type") == "ExternalName":
            continue
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        mine = by_service.get(key, [])
        ports = tuple(
            ServicePort(name=str(p.get("name") or ""), port=int(p["port"]),
                        protocol=str(p.get("protocol") or "TCP"),
                        backends=slice_backends(mine, str(p.get("name") or "")))
            for p in spec.get("ports") or [] if p.get("port") is not None)
        views[key] = ServiceView(key[0], key[1], str(cluster_ip), ports)
    return views
