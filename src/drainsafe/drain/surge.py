"""`--surge`: grow the pool first when there is no room for the replacements.

The seed: "Draining a GPU node safely usually means growing the pool by one node first, so
there is somewhere for the evicted replicas to land". drainsafe does it with placeholder
pods, the cluster-autoscaler "overprovisioning" pattern
(https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/FAQ.md, "How can I
configure overprovisioning with Cluster Autoscaler?"): one pause pod per replacement that
has no room, with the replacement's requests, nodeSelector, affinity and tolerations and
kept off the nodes being drained. A Pending placeholder makes a cluster autoscaler (or
Karpenter) add a node; once every placeholder is bound there is room, the placeholders
are removed, the plan is made again and the drain proceeds. Without an autoscaler it simply
waits (bounded) for someone to add a node or free capacity.

Placeholders are removed through the Eviction API like every other pod drainsafe removes
(no budget selects them), so drainsafe needs no pod delete permission. Give them a
negative-priority PriorityClass with --surge-priority-class so real pods preempt them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from drainsafe.drain.plan import DrainPlan
from drainsafe.kube import Conflict, Informer, KubeClient, NotFound, WaitTimeout, api_path

PLACEHOLDER_LABEL = "drainsafe.io/placeholder-for"
NODE_LABEL = "drainsafe.io/surge-for-node"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


class SurgeFailed(RuntimeError):
    pass


def _label_value(text: str) -> str:
    """A valid label value (63 chars, alphanumerics, '-', '_', '.')."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:63]
    return value.strip("_.-") or "x"


def placeholder_manifest(pod: Mapping[str, Any], node: str, excluded: Sequence[str],
                         *, priority_class: str | None = None) -> dict[str, Any]:
    """A pause pod asking for what `pod`'s replacement needs, anywhere but `excluded`. Pure."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    containers = [
        {"name": f"c{i}", "image": PAUSE_IMAGE,
         "resources": {k: v for k, v in (c.get("resources") or {}).items()
                       if k in ("requests", "limits")}}
        for i, c in enumerate(spec.get("containers") or [])
    ]
    affinity = dict(spec.get("affinity") or {})
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    away = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": list(excluded)}
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    for term in terms:  # terms are ORed: every one must keep away from the drained nodes
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), away]
    required["nodeSelectorTerms"] = terms
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node_affinity
    placeholder_spec: dict[str, Any] = {
        "containers": containers,
        "affinity": affinity,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
    }
    for key in ("nodeSelector", "tolerations"):
        if spec.get(key):
            placeholder_spec[key] = spec[key]
    if priority_class:
        placeholder_spec["priorityClassName"] = priority_class
    name = f"drainsafe-surge-{meta.get('name')}"[:63].rstrip("-.")
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": meta.get("namespace"),
            "labels": {PLACEHOLDER_LABEL: _label_value(str(meta.get("name"))),
                       NODE_LABEL: _label_value(node)},
            "annotations": {"drainsafe.io/why": f"room for the replacement of "
                            f"{meta.get('namespace')}/{meta.get('name')} while {node} drains"},
        },
        "spec": placeholder_spec,
    }


async def surge(client: KubeClient, plan: DrainPlan, pods: Sequence[Mapping[str, Any]],
                node: str, excluded: Sequence[str], *, timeout: float,
                priority_class: str | None = None) -> list[str]:
    """Create placeholders for the unplaced replacements, wait until all are bound, remove
    them and wait until they are gone (so the room they held shows as free). Returns the
    nodes they were bound to. Placeholders are removed also on failure or Ctrl-C."""
    unplaced = {b.object.removeprefix("Pod ") for b in plan.blockers if b.kind == "no-room"}
    by_key = {f"{(p.get('metadata') or {}).get('namespace')}/"
              f"{(p.get('metadata') or {}).get('name')}": p for p in pods}
    created: set[str] = set()
    informer = Informer(client, api_path("v1", "pods"),
                        label_selector=f"{NODE_LABEL}={_label_value(node)}")
    async with informer:
        try:
            for key in sorted(unplaced):
                manifest = placeholder_manifest(by_key[key], node, excluded,
                                                priority_class=priority_class)
                ns = manifest["metadata"]["namespace"]
                with contextlib.suppress(Conflict):  # left over from an interrupted run
                    await client.post(api_path("v1", "pods", namespace=ns), manifest)
                created.add(f"{ns}/{manifest['metadata']['name']}")

            def bound(cache: Mapping[str, Any]) -> list[str] | None:
                hosts = [str((cache[k].get("spec") or {}).get("nodeName") or "")
                         for k in created if k in cache]
                return hosts if len(hosts) == len(created) and all(hosts) else None

            try:
                hosts: list[str] | None = await informer.wait_for(bound, timeout=timeout,
                                                what="the surge placeholders to be scheduled")
            except WaitTimeout as exc:
                raise SurgeFailed(
                    f"no room appeared within {timeout:.0f}s for {', '.join(sorted(unplaced))}"
                    " (placeholder pods stayed Pending; is a cluster autoscaler running?)"
                ) from exc
            return list(hosts or [])
        finally:
            await asyncio.shield(_remove_all(client, informer, created))


async def _remove_all(client: KubeClient, informer: Informer, keys: set[str]) -> None:
    for key in keys:
        ns, name = key.split("/", 1)
        with contextlib.suppress(NotFound):
            await client.evict(ns, name, uid=None, grace_period_seconds=0)
    with contextlib.suppress(WaitTimeout):
        await informer.wait_for(lambda cache: not (keys & set(cache)) or None, timeout=60,
                                what="the surge placeholders to be gone")
