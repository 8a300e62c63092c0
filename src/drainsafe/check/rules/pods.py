"""Pod rules: sidecar ordering, local data, and pods nothing recreates."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from drainsafe.check.context import Context
from drainsafe.check.findings import Finding, Severity
from drainsafe.check.model import Container, Index, mapping, sequence
from drainsafe.check.rules.disruption import budget_for
from drainsafe.check.rules.registry import rule
from drainsafe.check.rules.termination import is_sidecar
from drainsafe.check.snippets import dump_named, pod_fix

SIDECAR_ORDERING = rule(
    "sidecar-ordering", Severity.WARNING,
    "A proxy or mesh sidecar runs as a plain container: SIGTERM order is arbitrary.",
    """
Plain containers of a pod receive SIGTERM at the same time, in no particular order. A proxy
sidecar that exits first cuts the main server's in-flight responses (and its own inbound
connections) while the server is still draining. Native sidecars (an initContainer with
restartPolicy: Always; beta and on by default from 1.29, GA in 1.33) are stopped only after
the main containers have exited, in reverse order. On older clusters, configure the proxy to
drain until the server is done (e.g. Istio EXIT_ON_ZERO_ACTIVE_CONNECTIONS, or a preStop that
waits). All containers share the one grace period.

Sources: kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/ ("the kubelet postpones
terminating sidecar containers until the main application container has fully stopped");
kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/ (plain containers "receive the TERM
signal at different times and in an arbitrary order"); KEP-753.
""")


@SIDECAR_ORDERING.check
def _sidecars(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        if len(w.containers) < 2:
            continue
        for c in w.containers:
            if not is_sidecar(c) or _drains_itself(c):
                continue
            if context.at_least(1, 29):
                # Moved whole (a strategic merge patch deletes the plain container by name).
                fix = pod_fix(w.pod_path, {
                    "initContainers": [{**c.spec, "restartPolicy": "Always"}],
                    "containers": [{"name": c.name, "$patch": "delete"}]})
                advice = "make it a native sidecar"
            elif _istio(c):
                fix = pod_fix(w.pod_path, {"containers": [{"name": c.name, "env": [
                    {"name": "EXIT_ON_ZERO_ACTIVE_CONNECTIONS", "value": "true"}]}]})
                advice = (f"native sidecars need >= 1.29 (cluster {context.version_text}); "
                          "make the proxy drain until the server is done")
            else:
                wait = max(math.floor(w.grace - context.buffer_seconds), 1)
                fix = pod_fix(w.pod_path, {"containers": [{"name": c.name, "lifecycle": {
                    "preStop": {"exec": {"command": ["sleep", str(wait)]}}}}]})
                advice = (f"native sidecars need >= 1.29 (cluster {context.version_text}); "
                          "keep it running while the server drains (a preStop that waits)")
            yield SIDECAR_ORDERING.finding(
                w, f"container {c.name} looks like a proxy/sidecar but is a plain container: it "
                f"may stop before the server finishes draining; {advice}",
                fix, path=c.path)


def _istio(c: Container) -> bool:
    return any(m in f"{c.name} {c.image}" for m in ("istio-proxy", "proxyv2"))


def _drains_itself(c: Container) -> bool:
    """A sidecar told to outlast the server: Istio's EXIT_ON_ZERO_ACTIVE_CONNECTIONS
    (istio pilot-agent: exit once no connection is active), or a preStop hook that waits."""
    if mapping(mapping(c.spec.get("lifecycle")).get("preStop")):
        return True
    return _istio(c) and any(
        isinstance(e, dict) and e.get("name") == "EXIT_ON_ZERO_ACTIVE_CONNECTIONS"
        and str(e.get("value")).lower() == "true" for e in sequence(c.spec.get("env")))


EMPTYDIR_DATA = rule(
    "emptydir-data", Severity.INFO,
    "The pod has emptyDir volumes: kubectl drain needs --delete-emptydir-data.",
    """
kubectl drain refuses to evict pods with emptyDir volumes unless --delete-emptydir-data is
given, because their data is deleted with the pod. GPU inference pods usually have them (model
caches, /dev/shm), so plan the flag, and expect the replacement to download the model again.

Sources: kubernetes/kubectl pkg/drain/filters.go (localStorageFilter);
kubernetes.io/docs/reference/kubectl/generated/kubectl_drain/.
""")


@EMPTYDIR_DATA.check
def _emptydir(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        if w.ref.kind == "DaemonSet":
            continue  # drain skips DaemonSet pods with --ignore-daemonsets
        names = [str(v.get("name")) for v in sequence(w.pod.get("volumes"))
                 if isinstance(v, dict) and "emptyDir" in v]
        if not names:
            continue
        yield EMPTYDIR_DATA.finding(
            w, f"emptyDir volume(s) {', '.join(names)}: drains need --delete-emptydir-data "
            "and the data is lost with the pod",
            "# no manifest change; drain with:\n# kubectl drain NODE --ignore-daemonsets "
            "--delete-emptydir-data", path=(*w.pod_path, "volumes"))


UNMANAGED_POD = rule(
    "unmanaged-pod", Severity.WARNING,
    "A bare Pod: drain refuses it, and nothing recreates it.",
    """
kubectl drain refuses to delete a pod that no controller manages unless --force is given, and
once deleted nothing recreates it elsewhere. Run it under a Deployment (or StatefulSet) so a
drain evicts it through the Eviction API and the controller replaces it.

Sources: kubernetes/kubectl pkg/drain/filters.go (unreplicatedFilter: "cannot delete Pods that
declare no controller (use --force to override)").
""")


@UNMANAGED_POD.check
def _unmanaged(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        if w.ref.kind != "Pod" or mapping(w.obj.get("metadata")).get("ownerReferences"):
            continue
        labels = w.pod_labels or {"app": w.ref.name}
        # Emitted once with stand-ins; each Pod's names and spec are put in (dump_named).
        fix = "# replaces the Pod\n" + dump_named(_deployment_for, w.ref.name,
                                                  w.ref.namespace, labels, tail=w.pod)
        if not index.pdbs_for(w):
            # pdb-missing's budget: emitted once with stand-in names, each Pod's put in
            fix += "\n---\n" + dump_named(budget_for, w.ref.name, w.ref.namespace, labels)
        yield UNMANAGED_POD.finding(
            w, "bare Pod without a controller: kubectl drain refuses it without --force and "
            "nothing recreates it", fix, path=("metadata",))


def _deployment_for(name: str, namespace: str, labels: dict[str, str], pod: Any
                    ) -> dict[str, Any]:
    """The Deployment unmanaged-pod suggests in place of a bare Pod (its spec last)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}
