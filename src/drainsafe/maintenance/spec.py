"""A NodeMaintenance's spec, read into typed values.

The schema is deploy/controller/nodemaintenance-crd.yaml; the API server has already
defaulted and validated it (apiextensions-apiserver structural defaulting), so absent
fields here fall back to the same defaults for objects written before a default existed.

- nodeSelector is a standard metav1.LabelSelector; it is turned into the selector string
  that list?labelSelector= takes, as apimachinery pkg/apis/meta/v1/helpers.go
  LabelSelectorAsSelector does (matchLabels as key=value, In/NotIn as key in (a,b),
  Exists as key, DoesNotExist as !key). A nil selector selects nothing there; an empty one
  selects everything, which a maintenance refuses (see `SpecError`).
- maxUnavailable is int-or-string, scaled by pdb.scaled_value (intstr
  GetScaledValueFromIntOrPercent) over the selected nodes, rounded up.

Pure; no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from drainsafe.drain.filters import DrainOptions, Strategy
from drainsafe.drain.floors import CapacityFloors
from drainsafe.drain.settings import DrainSettings
from drainsafe.maintenance.floorspec import FloorSpecError, parse_floors
from drainsafe.pdb import BudgetSpecError, IntOrPercent, scaled_value

GROUP = "drainsafe.io"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "nodemaintenances"
KIND = "NodeMaintenance"

Uncordon = Literal["Immediately", "Never", "WhenMaintained"]
UNCORDON: tuple[Uncordon, ...] = get_args(Uncordon)


class SpecError(ValueError):
    """A spec the reconciler will not act on (the operation fails with this reason)."""


@dataclass(frozen=True)
class MaintenanceSpec:
    label_selector: str | None  # for list?labelSelector=; None: by name only
    node_names: tuple[str, ...]
    max_parallel_nodes: int = 1
    max_unavailable: IntOrPercent | None = None
    uncordon: Uncordon = "Immediately"
    paused: bool = False
    reason: str = ""
    strategy: Strategy = "surge"
    timeout_seconds: int = 3600
    delete_emptydir_data: bool = False
    maintained_when: MaintainedWhen = field(default_factory=lambda: MaintainedWhen())
    capacity_floors: CapacityFloors = field(default_factory=CapacityFloors)

    def unavailable_budget(self, total: int) -> int | None:
        """How many of `total` selected nodes may be unavailable at once (None: no bound)."""
        if self.max_unavailable is None:
            return None
        return scaled_value(self.max_unavailable, total, round_up=True)

    def drain_settings(self, default_reason: str) -> DrainSettings:
        return DrainSettings(
            options=DrainOptions(delete_emptydir_data=self.delete_emptydir_data,
                                 strategy=self.strategy, floors=self.capacity_floors),
            timeout=float(self.timeout_seconds),
            reason=self.reason or default_reason)


def selector_string(selector: dict[str, Any]) -> str:
    """metav1.LabelSelector -> the labelSelector query, as LabelSelectorAsSelector."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(sorted(values))})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(sorted(values))})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            raise SpecError(f"nodeSelector: unknown operator {op!r}")
    return ",".join(parts)


def parse_spec(obj: dict[str, Any]) -> MaintenanceSpec:
    spec = obj.get("spec") or {}
    drain = spec.get("drain") or {}
    raw_selector = spec.get("nodeSelector")
    label_selector = None if raw_selector is None else selector_string(raw_selector)
    names = tuple(spec.get("nodeNames") or ())
    if label_selector == "" or (label_selector is None and not names):
        # an empty selector matches every node: a whole-cluster drain is never implied
        raise SpecError("select the nodes with a non-empty nodeSelector or nodeNames")
    uncordon = spec.get("uncordon", "Immediately")
    if uncordon not in UNCORDON:
        raise SpecError(f"uncordon: {uncordon!r} is not one of {', '.join(UNCORDON)}")
    strategy = drain.get("strategy", "surge")
    if strategy not in ("surge", "evict"):
        raise SpecError(f"drain.strategy: {strategy!r} is not surge or evict")
    max_unavailable = spec.get("maxUnavailable")
    if max_unavailable is not None:
        try:
            scaled_value(max_unavailable, 100, round_up=True)
        except BudgetSpecError as e:
            raise SpecError(f"maxUnavailable: {e}") from e
    try:
        floors = parse_floors(spec.get("capacityFloor"), strategy)
    except FloorSpecError as e:
        raise SpecError(str(e)) from e
    parallel = int(spec.get("maxParallelNodes", 1))
    if parallel < 1:
        raise SpecError("maxParallelNodes must be at least 1")
    maintained_when = parse_maintained_when(spec.get("maintainedWhen"), uncordon)
    return MaintenanceSpec(
        label_selector=label_selector, node_names=names, max_parallel_nodes=parallel,
        max_unavailable=max_unavailable, uncordon=uncordon,
        paused=bool(spec.get("paused", False)), reason=str(spec.get("reason") or ""),
        strategy=strategy, timeout_seconds=int(drain.get("timeoutSeconds", 3600)),
        delete_emptydir_data=bool(drain.get("deleteEmptyDirData", False)),
        maintained_when=maintained_when,
        capacity_floors=floors)


# -- spec.maintainedWhen: what marks a node's maintenance done (uncordon: WhenMaintained) --

KUBELET_VERSION_CHANGED = "changed"
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def version_triple(text: str) -> tuple[int, int, int] | None:
    """major.minor.patch of a kubelet version (status.nodeInfo.kubeletVersion, as
    k8s.io/component-base/version: "v1.32.1", "v1.33.0-eks-1234"); None if not one. A
    suffix after the patch is ignored: a distribution's build of a release is that release."""
    m = _VERSION.match(text.strip())
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]))


@dataclass(frozen=True)
class NodeConditionMark:
    """A node condition that says the maintenance is done (status.conditions[type]), e.g.
    one an external tool (node-problem-detector, the GPU operator) sets."""

    type: str
    status: str = "True"


@dataclass(frozen=True)
class MaintainedWhen:
    """Any one of these marks a node maintained. The annotation drainsafe.io/maintained=<the
    NodeMaintenance's name>[/<note>], set after the node's drain ended, counts unless
    `annotation` is false, so a person can always finish a node by hand (drainsafe
    maintenance done; maintenance.maintained)."""

    annotation: bool = True
    node_condition: NodeConditionMark | None = None
    boot_id_changed: bool = False
    # "changed": any other version than the one recorded at the drain; a version: at least it
    kubelet_version: str | None = None
    # Not a mark: how long a drained node waits for one, from when its drain finished,
    # before it fails (MaintenanceTimedOut) still cordoned; None: as long as it takes.
    timeout_seconds: int | None = None

    @property
    def needs_record(self) -> bool:
        """Whether the node's boot ID, kubelet version and UID are recorded at the drain."""
        return self.boot_id_changed or self.kubelet_version is not None


def parse_maintained_when(raw: Any, uncordon: Uncordon) -> MaintainedWhen:
    if raw is None:
        return MaintainedWhen()
    where = "maintainedWhen"
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: an object, not {raw!r}")
    if uncordon != "WhenMaintained":
        # Name the field at fault: a timeout alone (beside the CRD's defaulted
        # annotation: true) on another mode is the timeout, anything more is the marks.
        alone = set(raw) - {"annotation"} == {"timeoutSeconds"} \
            and raw.get("annotation", True) is True
        at = f"{where}.timeoutSeconds" if alone else where
        raise SpecError(f"{at}: only with uncordon: WhenMaintained (it is {uncordon})")
    unknown = set(raw) - {"annotation", "nodeCondition", "bootIDChanged", "kubeletVersion",
                          "timeoutSeconds"}
    if unknown:
        raise SpecError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    annotation = raw.get("annotation", True)
    boot = raw.get("bootIDChanged", False)
    for key, value in (("annotation", annotation), ("bootIDChanged", boot)):
        if not isinstance(value, bool):
            raise SpecError(f"{where}.{key}: true or false, not {value!r}")
    condition = None
    if raw.get("nodeCondition") is not None:
        c = raw["nodeCondition"]
        kind = c.get("type") if isinstance(c, dict) else None
        if not isinstance(kind, str) or not kind:
            raise SpecError(f"{where}.nodeCondition.type: a condition type is required")
        status = c.get("status", "True")
        if status not in ("True", "False", "Unknown"):
            raise SpecError(f"{where}.nodeCondition.status: {status!r} is not True, False "
                            "or Unknown")
        condition = NodeConditionMark(kind, status)
    version = raw.get("kubeletVersion")
    if version is not None and (not isinstance(version, str) or (
            version != KUBELET_VERSION_CHANGED and version_triple(version) is None)):
        raise SpecError(f"{where}.kubeletVersion: {version!r} is not "
                        f"{KUBELET_VERSION_CHANGED!r} nor a version such as v1.32.1")
    timeout = raw.get("timeoutSeconds")
    # bool is an int in Python; the CRD's `type: integer` refuses it, so here too
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)
                                or timeout < 1):
        raise SpecError(f"{where}.timeoutSeconds: {timeout!r} is not a whole number of "
                        "seconds of at least 1")
    out = MaintainedWhen(annotation=annotation, node_condition=condition,
                         boot_id_changed=boot, kubelet_version=version,
                         timeout_seconds=timeout)
    if not (out.annotation or out.node_condition or out.boot_id_changed
            or out.kubelet_version):
        raise SpecError(f"{where}: nothing would mark a node maintained (annotation is "
                        "false and no nodeCondition, bootIDChanged or kubeletVersion)")
    return out
