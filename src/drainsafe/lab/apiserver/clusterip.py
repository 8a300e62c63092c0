"""Service ClusterIPs and nodePorts, allocated as the Service registry allocates them.

kubernetes/kubernetes pkg/registry/core/service/storage/storage.go (v1.31): a new
Service gets one free address of the service range unless it names one (which must lie
in the range) or is headless (`clusterIP: None`); an update that leaves the addresses out
keeps the old ones (patchAllocatedValues), and clusterIPs follows a changed clusterIP
(normalizeClusterIPs) so that validation can refuse the change. NodePort and LoadBalancer
Services get a nodePort per port from 30000-32767 (pkg/registry/core/service/portallocator).

The lab's range is 127.96.0.0/16, so that a kube-proxy-like path can bind every ClusterIP
on loopback. SetDefaults_Service runs before this (drainsafe.lab.apiserver.defaults).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver import validation
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Obj, Store

CLUSTER_IP_RANGE = ipaddress.ip_network("127.96.0.0/16")
NODE_PORT_RANGE = range(30000, 32768)


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
        """The registry's ClusterIP handling, after SetDefaults_Service
        (pkg/registry/core/service/storage/storage.go: patchAllocatedValues keeps the old
        addresses when a write leaves them out; normalizeClusterIPs makes clusterIPs
        follow a changed clusterIP, which validation then refuses)."""
        spec = obj.setdefault("spec", {})
        external = spec.get("type") in ("NodePort", "LoadBalancer")
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
