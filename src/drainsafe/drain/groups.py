"""A LeaderWorkerSet group surge's pure rules, shared by `drainsafe drain` and the guard.

One engine surges groups: the record, the scale and the restore are drain.scale's for both
tools; which pods the record names, which groups a surge stands in for, the scale it asks
for, and when the restore may take the stand-ins away are decided here, for
drain.groupsurge (which evicts and waits) and drainsafe.controller (which holds evictions
and reconciles). Pure functions of plain objects.

After kubernetes-sigs/lws v0.10.0: with restartPolicy RecreateGroupOnPodRestart (the
default) or RecreateGroupAfterStart, one pod of a group with a deletionTimestamp makes lws
delete the group's leader, and the leader's worker StatefulSet and every worker go with it
(pkg/controllers/pod_controller.go handleRestartPolicy): every pod of the group comes back
with a new UID, so the record names them all. The LWS's replicas count groups (the CRD's
scale subresource maps .spec.replicas: api/leaderworkerset/v1/leaderworkerset_types.go), a
group is Ready only once all its pods are (pkg/controllers/leaderworkerset_controller.go
updateConditions, kube.objects.lws_ready_groups), and a scale-down lowers the leader
StatefulSet, which removes the highest group indices: the stand-ins, once every group
below the recorded scale is whole Ready again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from drainsafe.kube.objects import is_active, key_of, lws_group_of, lws_group_of_name, uid_of

Obj = Mapping[str, Any]


def record_pods(lws: str, here: Mapping[str, str], pods: Iterable[Obj], *,
                recreates_group: bool) -> dict[str, str]:
    """The pods ("ns/name" -> UID) a group surge of LWS `lws` records: those it surges for
    (`here`) and, when lws recreates whole groups, every other active pod of their groups
    (`pods`: the LWS's), which will all be replaced too."""
    out = dict(here)
    if not recreates_group:
        return out
    groups = set(affected_groups(lws, here))
    for p in pods:
        group = lws_group_of(p)
        if group is not None and group == (lws, group[1]) and group[1] in groups \
                and is_active(p):
            out.setdefault(key_of(p), uid_of(p))
    return out


def affected_groups(lws: str, keys: Iterable[str]) -> list[int]:
    """The group indices of the pods named ("ns/name"), from lws's pod names."""
    return sorted({g for k in keys
                   if (g := lws_group_of_name(lws, k.split("/", 1)[-1])) is not None})


def surge_target(replicas: int, groups: Iterable[int]) -> int:
    """The scale, in groups, while `groups` are stood in for: one new group each."""
    return replicas + len(set(groups))


def group_unit(namespace: str, lws: str, group: int) -> str:
    """A group's key ("ns/<lws>-<g>", its leader's): the unit a surge stands in for."""
    return f"{namespace}/{lws}-{group}"


def groups_pending(ready: Mapping[int, object], replicas: int) -> list[int]:
    """The group indices below the recorded scale not whole Ready (`ready`:
    kube.objects.lws_ready_groups). The restore removes the highest indices, the
    stand-ins, so it waits until this is empty."""
    return [g for g in range(replicas) if g not in ready]
