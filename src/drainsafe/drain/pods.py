"""The plan's line for each pod on the drained nodes, and what a single pod blocks.

A `PodPlan` joins the filters' verdict (drain.filters), the pod's workload
(drain.workloads) and the budgets that select it (drain.budgets). A pod under two or more
budgets is refused here: the eviction subresource answers it with HTTP 500 "This pod has
more than one PodDisruptionBudget, which the eviction subresource does not support"
(kubernetes pkg/registry/core/pod/storage/eviction.go). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drainsafe.drain.blockers import Blocker, BlockerKind
from drainsafe.drain.filters import Action, Verdict, VerdictCode
from drainsafe.drain.room import gpu_requests
from drainsafe.drain.workloads import Workload
from drainsafe.kube.objects import grace_seconds, is_ready, key_of, lws_group_of, meta

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class PodPlan:
    namespace: str
    name: str
    uid: str
    node: str
    action: Action
    reason: str
    workload: str | None  # str of its WorkloadRef
    pdbs: tuple[str, ...]
    code: VerdictCode
    grace_seconds: int
    gpus: Mapping[str, str]
    ready: bool
    replacement_on: str | None = None  # where the room check placed its replacement
    group: int | None = None  # its group index, for a pod of a LeaderWorkerSet group

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def needs_replacement(self) -> bool:
        return self.action == "evict" and self.workload is not None and self.code != "finished"


def pod_plan(pod: Obj, verdict: Verdict, workload: Workload | None,
             budgets: Sequence[Obj]) -> PodPlan:
    m = meta(pod)
    return PodPlan(
        namespace=str(m.get("namespace") or ""),
        name=str(m.get("name")),
        uid=str(m.get("uid") or ""),
        node=str((pod.get("spec") or {}).get("nodeName")),
        action=verdict.action,
        reason=verdict.reason,
        workload=workload.key if workload else None,
        pdbs=tuple(sorted(key_of(b) for b in budgets)),
        code=verdict.code,
        grace_seconds=grace_seconds(pod),
        gpus={k: f"{v.normalize():f}" for k, v in gpu_requests(pod.get("spec") or {}).items()},
        ready=is_ready(pod),
        group=None if workload is None or workload.group_size is None
        else (lws_group_of(pod) or ("", None))[1],
    )


def pod_blockers(pod: Obj, verdict: Verdict, budgets: Sequence[Obj]) -> list[Blocker]:
    """What this pod alone refuses: a blocking verdict, or several budgets."""
    out = []
    if verdict.action == "block":
        kind: BlockerKind = "local-data" if verdict.code == "local-data" else "unmanaged"
        fix = (
            "pass --delete-emptydir-data" if kind == "local-data"
            else "move it under a controller or delete it yourself"
        )
        out.append(Blocker(kind, f"Pod {key_of(pod)}", verdict.reason, fix))
    if len(budgets) > 1:
        names = ", ".join(key_of(b) for b in budgets)
        out.append(
            Blocker(
                "multiple-pdbs",
                f"Pod {key_of(pod)}",
                f"is selected by {len(budgets)} PodDisruptionBudgets ({names}); the "
                "eviction API refuses it with HTTP 500 \"This pod has more than one "
                "PodDisruptionBudget, which the eviction subresource does not support\"",
                "make the budgets' selectors disjoint or delete all but one of them",
            )
        )
    return out
