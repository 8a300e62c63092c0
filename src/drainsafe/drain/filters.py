"""Which pods a drain moves: kubectl's pod filters, each returning a typed verdict.

As kubectl's pkg/drain/filters.go (makeFilters; release-1.33): small filters applied in
order, each returning a verdict and a reason (kubectl's PodDeleteStatus, typed here as
`Verdict`: an action and a code decide, the message explains), the first verdict wins.
Unlike kubectl there is no --force and no --ignore-daemonsets: DaemonSet and mirror pods
always stay (the NVIDIA device plugin must be the last thing on a GPU node), unmanaged pods
always block (drainsafe never deletes a pod outside the Eviction API). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from drainsafe.drain.floors import CapacityFloors
from drainsafe.kube.objects import controller_ref, is_terminating, meta
from drainsafe.kube.objects import is_terminal as is_finished

Obj = Mapping[str, Any]
Action = Literal["evict", "skip", "block", "wait"]
# Why a pod got its action (kubectl's PodDeleteStatus reason, typed): code decides, the
# message explains.
VerdictCode = Literal["finished", "terminating", "daemonset", "mirror", "local-data",
                      "unmanaged", "managed"]
Strategy = Literal["surge", "evict"]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class Verdict:
    action: Action
    code: VerdictCode
    reason: str


@dataclass(frozen=True)
class DrainOptions:
    delete_emptydir_data: bool = False
    # surge: make before break where the workload allows it (a Deployment not mid-rollout);
    # evict: break before make everywhere (one pod of a workload at a time).
    strategy: Strategy = "surge"
    # A NodeMaintenance's capacity floor per workload (drain.floors): evict-first only
    # where Ready stays at or above it, and in place of a surge without room. None: none.
    floors: CapacityFloors | None = None


PodFilter = Callable[[Obj, DrainOptions], Verdict | None]


def finished_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    # kubectl lets Succeeded/Failed pods through every filter: nothing is lost.
    if is_finished(pod):
        phase = (pod.get("status") or {}).get("phase")
        return Verdict("evict", "finished", f"finished ({phase}); no replacement needed")
    return None


def terminating_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    if is_terminating(pod):
        return Verdict("wait", "terminating", "already terminating; waiting for it to go")
    return None


def daemonset_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    ref = controller_ref(pod)
    if ref is not None and ref.get("kind") == "DaemonSet":
        return Verdict("skip", "daemonset", f"DaemonSet {ref.get('name')} pod stays on the node")
    return None


def mirror_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    if MIRROR_ANNOTATION in (meta(pod).get("annotations") or {}):
        return Verdict("skip", "mirror", "mirror (static) pod stays; the kubelet owns it")
    return None


def local_storage_filter(pod: Obj, options: DrainOptions) -> Verdict | None:
    # Only emptyDir counts as local storage, as in kubectl (hostPath does not).
    volumes = [
        v.get("name") for v in (pod.get("spec") or {}).get("volumes") or [] if "emptyDir" in v
    ]
    if volumes and not options.delete_emptydir_data:
        return Verdict(
            "block", "local-data",
            f"emptyDir data ({', '.join(map(str, volumes))}) would be lost; "
            "pass --delete-emptydir-data if that is acceptable (model caches, /dev/shm)",
        )
    return None


def unreplicated_filter(pod: Obj, _: DrainOptions) -> Verdict | None:
    if controller_ref(pod) is None:
        return Verdict(
            "block", "unmanaged",
            "not managed by a controller: evicting it would lose it for good; delete or "
            "re-create it under a Deployment yourself (drainsafe has no --force)",
        )
    return None


# Terminating first: a pod being deleted is waited for, never sent an eviction, even when
# its containers have already finished (an evicted pod whose process exited is Succeeded
# and terminating at once; a second eviction of it would be one too many). Then kubectl's
# order.
FILTERS: tuple[PodFilter, ...] = (
    terminating_filter,
    finished_filter,
    daemonset_filter,
    mirror_filter,
    local_storage_filter,
    unreplicated_filter,
)


def classify(pod: Obj, options: DrainOptions, filters: Sequence[PodFilter] = FILTERS) -> Verdict:
    for f in filters:
        verdict = f(pod, options)
        if verdict is not None:
            return verdict
    ref = controller_ref(pod) or {}
    return Verdict("evict", "managed", f"managed by {ref.get('kind')} {ref.get('name')}")
