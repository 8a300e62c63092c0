"""meta.k8s.io/v1 Table responses for `kubectl get` (pods, nodes, workloads incl.
StatefulSets, services, PDBs, HPAs, EndpointSlices, events).

kubectl asks for `application/json;as=Table;v=v1;g=meta.k8s.io` first
(kubernetes/kubectl pkg/cmd/get/get.go) and prints the server's columns; -o wide shows
the priority-1 columns. Column sets follow kubernetes/kubernetes
pkg/printers/internalversion/printers.go; CustomResourceDefinitions get the default
convertor's Name and Created At (k8s.io/apiserver pkg/registry/rest/table.go, which the
apiextensions-apiserver's CRD storage uses; custom resources' own tables are
drainsafe.lab.apiserver.crd's). Other resources answer with plain JSON and
kubectl prints its generic NAME/AGE fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drainsafe.kube.objects import condition, is_node_ready, parse_time
from drainsafe.lab.apiserver.discovery import ResourceType
from drainsafe.lab.apiserver.store import Obj

Column = tuple[str, str, int]  # name, type, priority (1 = only with -o wide)


def wants_table(accept: str) -> bool:
    first = accept.split(",")[0]
    return "as=Table" in first


def human_duration(seconds: float) -> str:
    """apimachinery util/duration.HumanDuration, to the precision kubectl shows."""
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d"


def _age(obj: Obj, now: float) -> str:
    created = parse_time(obj["metadata"].get("creationTimestamp"))
    return "<unknown>" if created is None else human_duration(now - created)


def _pod_status(pod: Obj) -> str:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated", {}).get("reason") and reason == "Running":
            reason = state["terminated"]["reason"]
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return str(reason)


def _pod_row(pod: Obj, now: float) -> list[Any]:
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len(pod.get("spec", {}).get("containers") or [])
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    return [pod["metadata"]["name"], f"{ready}/{total}", _pod_status(pod), restarts,
            _age(pod, now), status.get("podIP") or "<none>",
            pod.get("spec", {}).get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", "<none>"]


def _node_row(node: Obj, now: float) -> list[Any]:
    status = node.get("status") or {}
    # kubectl's STATUS column: Unknown when the node has no Ready condition at all.
    text = "Ready" if is_node_ready(node) else (
        "NotReady" if condition(node, "Ready") else "Unknown")
    if node.get("spec", {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels
                   if k.startswith("node-role.kubernetes.io/") and "/" in k)
    info = status.get("nodeInfo") or {}
    addrs = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [node["metadata"]["name"], text, ",".join(roles) or "<none>", _age(node, now),
            info.get("kubeletVersion", ""), addrs.get("InternalIP") or "<none>",
            addrs.get("ExternalIP") or "<none>", info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


def _deployment_row(d: Obj, now: float) -> list[Any]:
    spec, status = d.get("spec") or {}, d.get("status") or {}
    containers = spec.get("template", {}).get("spec", {}).get("containers") or []
    sel = spec.get("selector", {}).get("matchLabels") or {}
    return [d["metadata"]["name"],
            f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
            status.get("updatedReplicas", 0), status.get("availableReplicas", 0),
            _age(d, now), ",".join(c.get("name", "") for c in containers),
            ",".join(c.get("image", "") for c in containers),
            ",".join(f"{k}={v}" for k, v in sorted(sel.items()))]


def _selector_text(selector: dict[str, Any] | None) -> str:
    labels = (selector or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


def _replicaset_row(rs: Obj, now: float) -> list[Any]:
    spec, status = rs.get("spec") or {}, rs.get("status") or {}
    containers = spec.get("template", {}).get("spec", {}).get("containers") or []
    return [rs["metadata"]["name"], spec.get("replicas", 0), status.get("replicas", 0),
            status.get("readyReplicas", 0), _age(rs, now),
            ",".join(c.get("name", "") for c in containers),
            ",".join(c.get("image", "") for c in containers),
            _selector_text(spec.get("selector"))]


def _daemonset_row(ds: Obj, now: float) -> list[Any]:
    spec, status = ds.get("spec") or {}, ds.get("status") or {}
    node_selector = spec.get("template", {}).get("spec", {}).get("nodeSelector") or {}
    return [ds["metadata"]["name"], status.get("desiredNumberScheduled", 0),
            status.get("currentNumberScheduled", 0), status.get("numberReady", 0),
            status.get("updatedNumberScheduled", 0), status.get("numberAvailable", 0),
            ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or "<none>",
            _age(ds, now)]


def _statefulset_row(sts: Obj, now: float) -> list[Any]:
    spec, status = sts.get("spec") or {}, sts.get("status") or {}
    containers = spec.get("template", {}).get("spec", {}).get("containers") or []
    return [sts["metadata"]["name"],
            f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}", _age(sts, now),
            ",".join(c.get("name", "") for c in containers),
            ",".join(c.get("image", "") for c in containers)]


def _service_row(svc: Obj, now: float) -> list[Any]:
    spec = svc.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}"
                     for p in spec.get("ports") or []) or "<none>"
    return [svc["metadata"]["name"], spec.get("type", "ClusterIP"),
            spec.get("clusterIP") or "<none>", "<none>", ports, _age(svc, now),
            ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
            or "<none>"]


def _pdb_row(pdb: Obj, now: float) -> list[Any]:
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    return [pdb["metadata"]["name"], spec.get("minAvailable", "N/A"),
            spec.get("maxUnavailable", "N/A"), status.get("disruptionsAllowed", 0),
            _age(pdb, now)]


def _slice_row(sl: Obj, now: float) -> list[Any]:
    ports = ",".join(str(p.get("port")) for p in sl.get("ports") or []) or "<unset>"
    addresses = [a for e in sl.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addresses[:3]) + (f" + {len(addresses) - 3} more..."
                                       if len(addresses) > 3 else "")
    return [sl["metadata"]["name"], sl.get("addressType", ""), ports, shown or "<unset>",
            _age(sl, now)]


def _event_row(ev: Obj, now: float) -> list[Any]:
    last = parse_time(ev.get("lastTimestamp") or ev.get("eventTime"))
    inv = ev.get("involvedObject") or {}
    return ["<unknown>" if last is None else human_duration(now - last), ev.get("type", ""),
            ev.get("reason", ""), f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}",
            ev.get("message", "")]


def _hpa_metric(spec: Obj, status: Obj | None) -> str:
    """One entry of the Targets column, as printers.go formatHPAMetrics writes it."""
    kind = spec.get("type")
    source_key = {"Resource": "resource", "ContainerResource": "containerResource",
                  "Pods": "pods", "Object": "object", "External": "external"}.get(str(kind))
    if source_key is None:
        return "<unknown type>"
    source = spec.get(source_key) or {}
    target = source.get("target") or {}
    current = ((status or {}).get(source_key) or {}).get("current") or {}
    if source_key in ("resource", "containerResource"):
        name = source.get("name", "")
        if target.get("averageValue") is not None:
            return f"{name}: {current.get('averageValue', '<unknown>')}/{target['averageValue']}"
        now = current.get("averageUtilization")
        goal = target.get("averageUtilization")
        return (f"{name}: {'<unknown>' if now is None else f'{now}%'}/"
                f"{'<auto>' if goal is None else f'{goal}%'}")
    if source_key == "pods":
        return f"{current.get('averageValue', '<unknown>')}/{target.get('averageValue')}"
    if target.get("averageValue") is not None:  # Object, External
        return f"{current.get('averageValue', '<unknown>')}/{target['averageValue']} (avg)"
    return f"{current.get('value', '<unknown>')}/{target.get('value')}"


def _hpa_row(hpa: Obj, now: float) -> list[Any]:
    spec, status = hpa.get("spec") or {}, hpa.get("status") or {}
    metrics = spec.get("metrics") or []
    statuses = status.get("currentMetrics") or []
    shown = [_hpa_metric(m, statuses[i] if i < len(statuses) else None)
             for i, m in enumerate(metrics)]
    targets = (", ".join(shown[:2]) + (f" + {len(shown) - 2} more..." if len(shown) > 2
                                        else "")) if shown else "<none>"
    ref = spec.get("scaleTargetRef") or {}
    min_pods = spec.get("minReplicas")
    return [hpa["metadata"]["name"], f"{ref.get('kind', '')}/{ref.get('name', '')}", targets,
            "<unset>" if min_pods is None else str(min_pods), spec.get("maxReplicas", 0),
            status.get("currentReplicas", 0), _age(hpa, now)]


def _created_at_row(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp")]


_TABLES: dict[str, tuple[list[Column], Callable[[Obj, float], list[Any]]]] = {
    "apiextensions.k8s.io/customresourcedefinitions": (
        [("Name", "string", 0), ("Created At", "date", 0)], _created_at_row),
    "autoscaling/horizontalpodautoscalers": ([("Name", "string", 0), ("Reference", "string", 0),
                                              ("Targets", "string", 0), ("MinPods", "string", 0),
                                              ("MaxPods", "string", 0),
                                              ("Replicas", "string", 0), ("Age", "string", 0)],
                                             _hpa_row),
    "apps/replicasets": ([("Name", "string", 0), ("Desired", "integer", 0),
                          ("Current", "integer", 0), ("Ready", "integer", 0),
                          ("Age", "string", 0), ("Containers", "string", 1),
                          ("Images", "string", 1), ("Selector", "string", 1)], _replicaset_row),
    "apps/daemonsets": ([("Name", "string", 0), ("Desired", "integer", 0),
                         ("Current", "integer", 0), ("Ready", "integer", 0),
                         ("Up-to-date", "integer", 0), ("Available", "integer", 0),
                         ("Node Selector", "string", 0), ("Age", "string", 0)],
                        _daemonset_row),
    "apps/statefulsets": ([("Name", "string", 0), ("Ready", "string", 0),
                           ("Age", "string", 0), ("Containers", "string", 1),
                           ("Images", "string", 1)], _statefulset_row),
    "services": ([("Name", "string", 0), ("Type", "string", 0), ("Cluster-IP", "string", 0),
                  ("External-IP", "string", 0), ("Port(s)", "string", 0),
                  ("Age", "string", 0), ("Selector", "string", 1)], _service_row),
    "policy/poddisruptionbudgets": ([("Name", "string", 0), ("Min Available", "string", 0),
                                     ("Max Unavailable", "string", 0),
                                     ("Allowed Disruptions", "integer", 0),
                                     ("Age", "string", 0)], _pdb_row),
    "discovery.k8s.io/endpointslices": ([("Name", "string", 0),
                                         ("AddressType", "string", 0),
                                         ("Ports", "string", 0), ("Endpoints", "string", 0),
                                         ("Age", "string", 0)], _slice_row),
    "events": ([("Last Seen", "string", 0), ("Type", "string", 0), ("Reason", "string", 0),
                ("Object", "string", 0), ("Message", "string", 0)], _event_row),
    "pods": ([("Name", "string", 0), ("Ready", "string", 0), ("Status", "string", 0),
              ("Restarts", "string", 0), ("Age", "string", 0), ("IP", "string", 1),
              ("Node", "string", 1), ("Nominated Node", "string", 1),
              ("Readiness Gates", "string", 1)], _pod_row),
    "nodes": ([("Name", "string", 0), ("Status", "string", 0), ("Roles", "string", 0),
               ("Age", "string", 0), ("Version", "string", 0), ("Internal-IP", "string", 1),
               ("External-IP", "string", 1), ("OS-Image", "string", 1),
               ("Kernel-Version", "string", 1), ("Container-Runtime", "string", 1)],
              _node_row),
    "apps/deployments": ([("Name", "string", 0), ("Ready", "string", 0),
                          ("Up-to-date", "integer", 0), ("Available", "integer", 0),
                          ("Age", "string", 0), ("Containers", "string", 1),
                          ("Images", "string", 1), ("Selector", "string", 1)],
                         _deployment_row),
}


def render(rt: ResourceType, objs: list[Obj], list_meta: dict[str, Any], *, now: float
           ) -> dict[str, Any] | None:
    spec = _TABLES.get(rt.key)
    if spec is None:
        return None
    columns, row = spec
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [
            {"name": n, "type": t, "format": "name" if n == "Name" else "", "description": "",
             "priority": p} for n, t, p in columns],
        "rows": [{"cells": row(o, now), "object": {
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": o["metadata"]}} for o in objs],
    }
