"""EndpointSlice controller: one slice per Service and resolved port set.

After kubernetes/kubernetes pkg/controller/endpointslice and staging
k8s.io/endpointslice (reconciler.go, utils.go): every pod the Service selects that has
a status.podIP and is not finished becomes an endpoint with conditions
ready (Ready and not terminating, or publishNotReadyAddresses), serving (Ready, even
while terminating) and terminating (deletionTimestamp set) — the conditions GA since
Kubernetes 1.26 (KEP-1672). Named targetPorts resolve against each pod's container
ports (podutil.FindPort); pods whose ports resolve differently land in different
slices. Slices carry kubernetes.io/service-name and
endpointslice.kubernetes.io/managed-by labels and the Service as controller owner.

The legacy v1 Endpoints object (what `kubectl describe service` shows up to 1.32) is
written too, as pkg/controller/endpoint does: Ready pods under addresses, others under
notReadyAddresses, terminating pods left out unless publishNotReadyAddresses.
"""

from __future__ import annotations

import contextlib
from typing import Any

from drainsafe.kube.objects import is_ready, is_terminating
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Obj, clone
from drainsafe.lab.controllers import Controller
from drainsafe.lab.controllers.podstate import owned_by, owner_reference
from drainsafe.labels import Requirement, Selector

PODS = BY_KEY["pods"]
SERVICES = BY_KEY["services"]
SLICES = BY_KEY["discovery.k8s.io/endpointslices"]
ENDPOINTS = BY_KEY["endpoints"]
LEGACY_MANAGED_BY = "endpoints.kubernetes.io/managed-by"
LEGACY_CONTROLLER = "endpoint-controller"
SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"


def resolve_port(pod: Obj, target: Any) -> int | None:
    """podutil.FindPort: an int is itself; a name is looked up in the containers."""
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for c in pod.get("spec", {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == target:
                return int(p["containerPort"])
    return None


def slice_ports(svc: Obj, pod: Obj) -> tuple[tuple[str, str, int], ...] | None:
    out = []
    for sp in svc.get("spec", {}).get("ports") or []:
        port = resolve_port(pod, sp.get("targetPort", sp.get("port")))
        if port is None:
            return None
        out.append((str(sp.get("name") or ""), str(sp.get("protocol") or "TCP"), port))
    return tuple(out)


def endpoint(pod: Obj, publish_not_ready: bool) -> dict[str, Any]:
    terminating = is_terminating(pod)
    ready = is_ready(pod)
    ep: dict[str, Any] = {
        "addresses": [pod["status"]["podIP"]],
        "conditions": {"ready": publish_not_ready or (ready and not terminating),
                       "serving": publish_not_ready or ready,
                       "terminating": terminating},
        "targetRef": {"kind": "Pod", "namespace": pod["metadata"]["namespace"],
                      "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]},
    }
    if pod.get("spec", {}).get("nodeName"):
        ep["nodeName"] = pod["spec"]["nodeName"]
    return ep


def desired_slices(svc: Obj, pods: list[Obj]) -> dict[tuple[tuple[str, str, int], ...],
                                                        list[dict[str, Any]]]:
    spec = svc.get("spec") or {}
    selector = Selector(tuple(Requirement(k, "In", (str(v),))
                              for k, v in (spec.get("selector") or {}).items()))
    publish = bool(spec.get("publishNotReadyAddresses"))
    groups: dict[tuple[tuple[str, str, int], ...], list[dict[str, Any]]] = {}
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        if not selector.matches(pod["metadata"].get("labels")):
            continue
        if not pod.get("status", {}).get("podIP"):
            continue
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        ports = slice_ports(svc, pod)
        if ports is None:
            continue
        groups.setdefault(ports, []).append(endpoint(pod, publish))
    if not groups:
        default_ports = tuple(
            (str(sp.get("name") or ""), str(sp.get("protocol") or "TCP"),
             int(sp["targetPort"]) if isinstance(sp.get("targetPort"), int) else
             int(sp.get("port", 0)))
            for sp in spec.get("ports") or [])
        groups[default_ports] = []
    return groups


def _ports_of_slice(sl: Obj) -> tuple[tuple[str, str, int], ...]:
    return tuple((str(p.get("name") or ""), str(p.get("protocol") or "TCP"),
                  int(p.get("port", 0))) for p in sl.get("ports") or [])


class EndpointSliceController(Controller):
    name = "endpointslice"
    watches = frozenset({"pods", "services", "discovery.k8s.io/endpointslices", "endpoints"})

    def reconcile(self) -> float | None:
        for svc in list(self.store.items(SERVICES)):
            if not (svc.get("spec") or {}).get("selector"):
                continue
            try:
                self.sync(svc)
            except st.StatusError:
                continue
        for ep in list(self.store.items(ENDPOINTS)):
            m = ep["metadata"]
            if ((m.get("labels") or {}).get(LEGACY_MANAGED_BY) == LEGACY_CONTROLLER
                    and self.store.peek(SERVICES, m["namespace"], m["name"]) is None):
                with contextlib.suppress(st.StatusError):
                    self.store.delete(ENDPOINTS, m["namespace"], m["name"])
        return None

    def sync(self, svc: Obj) -> None:
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        pods = list(self.store.items(PODS, ns))
        want = desired_slices(svc, pods)
        existing = [s for s in self.store.items(SLICES, ns)
                    if owned_by(s, svc)
                    and (s["metadata"].get("labels") or {}).get(MANAGED_BY) == CONTROLLER_NAME]
        unused = sorted(existing, key=lambda s: str(s["metadata"]["name"]))
        for ports, endpoints in want.items():
            body_ports = [{"name": n, "protocol": proto, "port": port}
                          for n, proto, port in ports]
            match = next((s for s in unused if _ports_of_slice(s) == ports), None)
            if match is None and unused:
                match = unused[0]
            if match is not None:
                unused.remove(match)
                if match.get("endpoints") == endpoints and match.get("ports") == body_ports:
                    continue
                updated = clone(match)
                updated["endpoints"] = endpoints
                updated["ports"] = body_ports
                self.store.update(SLICES, updated)
                continue
            self.store.create(SLICES, {
                "metadata": {"generateName": f"{name}-", "namespace": ns,
                             "labels": {SERVICE_NAME: name, MANAGED_BY: CONTROLLER_NAME},
                             "ownerReferences": [owner_reference(svc)]},
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": body_ports,
            })
        for s in unused:
            try:
                self.store.delete(SLICES, ns, s["metadata"]["name"])
            except st.StatusError:
                continue
        self._legacy(svc, want)

    def _legacy(self, svc: Obj, want: dict[tuple[tuple[str, str, int], ...],
                                           list[dict[str, Any]]]) -> None:
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        subsets = []
        for ports, endpoints in want.items():
            ready: list[dict[str, Any]] = []
            not_ready: list[dict[str, Any]] = []
            for e in endpoints:
                if e["conditions"]["terminating"] and not svc["spec"].get(
                        "publishNotReadyAddresses"):
                    continue
                addr = {"ip": e["addresses"][0], "targetRef": e["targetRef"]}
                if e.get("nodeName"):
                    addr["nodeName"] = e["nodeName"]
                (ready if e["conditions"]["ready"] else not_ready).append(addr)
            if not ready and not not_ready:
                continue
            subset: dict[str, Any] = {"ports": [
                {"name": n, "port": port, "protocol": proto} if n else
                {"port": port, "protocol": proto} for n, proto, port in ports]}
            if ready:
                subset["addresses"] = ready
            if not_ready:
                subset["notReadyAddresses"] = not_ready
            subsets.append(subset)
        current = self.store.peek(ENDPOINTS, ns, name)
        if current is None:
            self.store.create(ENDPOINTS, {
                "metadata": {"name": name, "namespace": ns,
                             "labels": {**(svc["metadata"].get("labels") or {}),
                                        LEGACY_MANAGED_BY: LEGACY_CONTROLLER}},
                **({"subsets": subsets} if subsets else {})})
        elif (current.get("subsets") or []) != subsets:
            updated = clone(current)
            if subsets:
                updated["subsets"] = subsets
            else:
                updated.pop("subsets", None)
            self.store.update(ENDPOINTS, updated)
