"""Validation as kube-apiserver words it: 422 Invalid with one cause per field error.

The messages follow Kubernetes v1.31 (the version the lab reports):

- kubernetes/apimachinery pkg/util/validation/field/errors.go: `Error()` is
  "<field>: <body>"; the body is the type's text ("Required value", "Invalid value",
  "Unsupported value", "Duplicate value", "Forbidden") then, for value-carrying types,
  the bad value (ints plain, strings %q, pointers dereferenced, anything else Go's
  `%#v`, e.g. `map[string]string{"app":"web"}`; JSON rendering only arrived with
  kubernetes/kubernetes#132314 in v1.34), then ": <detail>". `ErrorList.ToAggregate`
  drops repeated messages and brackets two or more: "[a, b]".
- kubernetes/apimachinery pkg/api/errors/errors.go `NewInvalid`: message
  `<Kind>.<group> "<name>" is invalid: <aggregate>`, details {name, group, kind,
  causes: [{reason: <error type>, message: <body>, field}]}.
- kubernetes/kubernetes pkg/apis/apps/validation/validation.go (ValidateDeploymentSpec,
  ValidateReplicaSetSpec, ValidateDaemonSetSpec, ValidatePodTemplateSpecForReplicaSet,
  ValidateDeploymentUpdate, ValidateStatefulSetSpec, ValidateStatefulSetUpdate),
  pkg/apis/core/validation/validation.go (validateContainers,
  ValidateNonnegativeField, ValidateImmutableField, service ClusterIP updates),
  pkg/apis/policy/validation/validation.go (ValidatePodDisruptionBudgetSpec).

Pure functions of the v1 JSON objects; `check(rt, obj, old)` raises the StatusError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import ResourceType

REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
NOT_SUPPORTED = "FieldValueNotSupported"
DUPLICATE = "FieldValueDuplicate"
FORBIDDEN = "FieldValueForbidden"
TYPE_INVALID = "FieldValueTypeInvalid"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"

_TYPE_TEXT = {
    REQUIRED: "Required value",
    INVALID: "Invalid value",
    NOT_SUPPORTED: "Unsupported value",
    DUPLICATE: "Duplicate value",
    FORBIDDEN: "Forbidden",
    TYPE_INVALID: "Invalid value",
    TOO_LONG: "Too long",
    TOO_MANY: "Too many",
}
_NO_VALUE = frozenset({REQUIRED, FORBIDDEN, TOO_LONG})

IS_NEGATIVE = "must be greater than or equal to 0"  # apivalidation isNegativeErrorMsg
IMMUTABLE = "field is immutable"  # apivalidation fieldImmutableErrorMsg
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
    "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
    "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
# Stand-ins for the heap addresses Go prints for pointer fields under %#v.
_ADDRESSES = ("0xc000a1c0a0", "0xc000a1c0c0", "0xc000a1c0e0")


class GoValue(str):
    """A bad value already rendered as Go's %#v would print it."""


def go_quote(text: str) -> str:
    """strconv.Quote for the printable text API fields hold."""
    return json.dumps(text, ensure_ascii=False)


def go_string_map(m: Mapping[str, Any] | None) -> GoValue:
    if m is None:
        return GoValue("map[string]string(nil)")
    items = ", ".join(f"{go_quote(k)}:{go_quote(str(v))}" for k, v in sorted(m.items()))
    return GoValue(f"map[string]string{{{items}}}")


def go_string_slice(values: Sequence[Any] | None) -> GoValue:
    if values is None:
        return GoValue("[]string(nil)")
    return GoValue("[]string{" + ", ".join(go_quote(str(v)) for v in values) + "}")


def go_label_selector(sel: Mapping[str, Any] | None) -> GoValue:
    """A *metav1.LabelSelector, dereferenced (as ErrorBody does for pointers)."""
    if sel is None:
        return GoValue("null")
    exprs = sel.get("matchExpressions")
    if exprs is None:
        rendered = "[]v1.LabelSelectorRequirement(nil)"
    else:
        rendered = "[]v1.LabelSelectorRequirement{" + ", ".join(
            f"v1.LabelSelectorRequirement{{Key:{go_quote(str(e.get('key', '')))}, "
            f"Operator:{go_quote(str(e.get('operator', '')))}, "
            f"Values:{go_string_slice(e.get('values'))}}}" for e in exprs) + "}"
    return GoValue(f"v1.LabelSelector{{MatchLabels:{go_string_map(sel.get('matchLabels'))}, "
                   f"MatchExpressions:{rendered}}}")


def go_int_or_string(value: Any) -> GoValue:
    if isinstance(value, int):
        return GoValue(f'intstr.IntOrString{{Type:0, IntVal:{value}, StrVal:""}}')
    return GoValue(f"intstr.IntOrString{{Type:1, IntVal:0, StrVal:{go_quote(str(value))}}}")


def _go_pointer(type_name: str, present: bool, n: int) -> str:
    return f"(*{type_name})({_ADDRESSES[n] if present else 'nil'})"


@dataclass(frozen=True)
class FieldError:
    type: str
    field: str
    value: Any = ""
    detail: str = ""

    def body(self) -> str:
        """ErrorBody (apimachinery field/errors.go, before v1.34)."""
        text = _TYPE_TEXT[self.type]
        if self.type not in _NO_VALUE:
            v = self.value
            if isinstance(v, GoValue):
                text += f": {v}"
            elif isinstance(v, bool):
                text += f": {'true' if v else 'false'}"
            elif isinstance(v, int | float):
                text += f": {v}"
            elif isinstance(v, str):
                text += f": {go_quote(v)}"
            elif v is None:
                text += ": null"
            else:
                text += f": {v!r}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(REQUIRED, path, "", detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(INVALID, path, value, detail)


def not_supported(path: str, value: Any, supported: Iterable[str]) -> FieldError:
    quoted = ", ".join(go_quote(s) for s in supported)
    return FieldError(NOT_SUPPORTED, path, value, f"supported values: {quoted}" if quoted else "")


def aggregate(errors: Sequence[FieldError]) -> str:
    """ErrorList.ToAggregate().Error(): repeated messages once; 2+ in brackets."""
    seen: list[str] = []
    for e in errors:
        if str(e) not in seen:
            seen.append(str(e))
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


def invalid_error(group: str, kind: str, name: str, errors: Sequence[FieldError]
                  ) -> st.StatusError:
    """apierrors.NewInvalid for `<Kind>.<group>`."""
    qualified = f"{kind}.{group}" if group else kind
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [{"reason": e.type, "message": e.body(), "field": e.field}
                         for e in errors]
    return st.StatusError(422, "Invalid", f"{qualified} {go_quote(name)} is invalid: "
                          f"{aggregate(errors)}", details=details)


# ---- the checks ---------------------------------------------------------------------

def nonnegative(value: Any, path: str) -> list[FieldError]:
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return [invalid(path, value, IS_NEGATIVE)]
    return []


def containers(items: Any, path: str) -> list[FieldError]:
    """validateContainers: names required, RFC 1123 labels, unique; probe thresholds."""
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, c in enumerate(items if isinstance(items, list) else []):
        p = f"{path}[{i}]"
        if not isinstance(c, dict):
            continue
        name = c.get("name") or ""
        if not name:
            errs.append(required(f"{p}.name"))
        elif not _DNS1123_LABEL.match(name) or len(name) > 63:
            errs.append(invalid(f"{p}.name", name, _DNS1123_LABEL_MSG))
        elif name in seen:
            errs.append(FieldError(DUPLICATE, f"{p}.name", name))
        seen.add(name)
        for probe in ("livenessProbe", "startupProbe"):
            threshold = (c.get(probe) or {}).get("successThreshold")
            if isinstance(threshold, int) and threshold != 1:
                errs.append(invalid(f"{p}.{probe}.successThreshold", threshold, "must be 1"))
    return errs


def pod_spec(spec: Mapping[str, Any], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if not spec.get("containers"):
        errs.append(required(f"{path}.containers"))
    else:
        errs += containers(spec.get("containers"), f"{path}.containers")
    errs += containers(spec.get("initContainers"), f"{path}.initContainers")
    errs += nonnegative(spec.get("terminationGracePeriodSeconds"),
                        f"{path}.terminationGracePeriodSeconds")
    return errs


def _selector_matches(sel: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    from drainsafe.labels import SelectorError, from_label_selector

    try:
        return from_label_selector(sel).matches(labels)
    except SelectorError:
        return True


def controller_spec(spec: Mapping[str, Any], what: str, *, template_restart: bool = True
                    ) -> list[FieldError]:
    """The selector/template part shared by Deployment, ReplicaSet and DaemonSet."""
    errs: list[FieldError] = []
    sel = spec.get("selector")
    if sel is None:
        errs.append(required("spec.selector"))
    elif not (sel.get("matchLabels") or sel.get("matchExpressions")):
        errs.append(invalid("spec.selector", go_label_selector(sel),
                            f"empty selector is invalid for {what}"))
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels")
    if sel and (sel.get("matchLabels") or sel.get("matchExpressions")) \
            and not _selector_matches(sel, labels or {}):
        errs.append(invalid("spec.template.metadata.labels", go_string_map(labels),
                            "`selector` does not match template `labels`"))
    errs += pod_spec(template.get("spec") or {}, "spec.template.spec")
    restart = (template.get("spec") or {}).get("restartPolicy")
    if template_restart and restart not in (None, "Always"):
        errs.append(not_supported("spec.template.spec.restartPolicy", restart, ["Always"]))
    return errs


def _int_or_percent(value: Any, path: str) -> list[FieldError]:
    """ValidatePositiveIntOrPercent + IsNotMoreThan100Percent."""
    if value is None:
        return []
    if isinstance(value, int):
        return nonnegative(value, path)
    text = str(value)
    if not re.fullmatch(r"[0-9]+%", text):
        return [invalid(path, go_int_or_string(text),
                        "must be an integer or percentage (e.g '5%')")]
    if int(text[:-1]) > 100:
        return [invalid(path, go_int_or_string(text), "must not be greater than 100%")]
    return []


def deployment(obj: Mapping[str, Any]) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errs = nonnegative(spec.get("replicas"), "spec.replicas")
    errs += nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds")
    errs += controller_spec(spec, "deployment")
    ru = (spec.get("strategy") or {}).get("rollingUpdate")
    if isinstance(ru, dict):
        base = "spec.strategy.rollingUpdate"
        errs += _int_or_percent(ru.get("maxUnavailable"), f"{base}.maxUnavailable")
        errs += _int_or_percent(ru.get("maxSurge"), f"{base}.maxSurge")
        if ru.get("maxUnavailable") in (0, "0%") and ru.get("maxSurge") in (0, "0%"):
            errs.append(invalid(f"{base}.maxUnavailable",
                                go_int_or_string(ru.get("maxUnavailable")),
                                "may not be 0 when `maxSurge` is 0"))
    errs += nonnegative(spec.get("revisionHistoryLimit"), "spec.revisionHistoryLimit")
    deadline = spec.get("progressDeadlineSeconds")
    errs += nonnegative(deadline, "spec.progressDeadlineSeconds")
    if isinstance(deadline, int) and deadline <= int(spec.get("minReadySeconds") or 0):
        errs.append(invalid("spec.progressDeadlineSeconds", deadline,
                            "must be greater than minReadySeconds"))
    return errs


def replicaset(obj: Mapping[str, Any]) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errs = nonnegative(spec.get("replicas"), "spec.replicas")
    errs += nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds")
    return errs + controller_spec(spec, "deployment")  # sic: upstream's wording for RS too


def daemonset(obj: Mapping[str, Any]) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errs = controller_spec(spec, "daemonset")
    errs += nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds")
    return errs


def statefulset(obj: Mapping[str, Any]) -> list[FieldError]:
    """ValidateStatefulSetSpec (v1.31), on the defaulted object."""
    spec = obj.get("spec") or {}
    errs: list[FieldError] = []
    policy = spec.get("podManagementPolicy")
    if not policy:
        errs.append(required("spec.podManagementPolicy"))
    elif policy not in ("OrderedReady", "Parallel"):
        errs.append(invalid("spec.podManagementPolicy", policy,
                            "must be 'OrderedReady' or 'Parallel'"))
    strategy = spec.get("updateStrategy") or {}
    kind = strategy.get("type")
    ru = strategy.get("rollingUpdate")
    if not kind:
        errs.append(required("spec.updateStrategy"))
    elif kind == "OnDelete":
        if ru is not None:
            value = GoValue(
                f"apps.RollingUpdateStatefulSetStrategy{{Partition:{ru.get('partition', 0)}, "
                "MaxUnavailable:"
                f"{_go_pointer('intstr.IntOrString', ru.get('maxUnavailable') is not None, 0)}}}")
            errs.append(invalid("spec.updateStrategy.rollingUpdate", value,
                                "only allowed for updateStrategy 'RollingUpdate'"))
    elif kind == "RollingUpdate":
        if isinstance(ru, dict):
            base = "spec.updateStrategy.rollingUpdate"
            errs += nonnegative(ru.get("partition"), f"{base}.partition")
            mu = ru.get("maxUnavailable")
            if mu is not None:
                errs += _int_or_percent(mu, f"{base}.maxUnavailable")
                if mu in (0, "0%"):
                    errs.append(invalid(f"{base}.maxUnavailable", go_int_or_string(mu),
                                        "must be greater than 0"))
    else:
        errs.append(invalid("spec.updateStrategy", kind,
                            "must be 'RollingUpdate' or 'OnDelete'"))
    retention = spec.get("persistentVolumeClaimRetentionPolicy") or {}
    for key in ("whenDeleted", "whenScaled"):
        when = retention.get(key)
        if when is not None and when not in ("Retain", "Delete"):
            errs.append(not_supported(f"spec.persistentVolumeClaimRetentionPolicy.{key}",
                                      when, ["Retain", "Delete"]))
    errs += nonnegative(spec.get("replicas"), "spec.replicas")
    errs += nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds")
    errs += nonnegative((spec.get("ordinals") or {}).get("start"), "spec.ordinals.start")
    return errs + controller_spec(spec, "statefulset")


# ValidateStatefulSetUpdate: the fields a StatefulSet update may change.
STATEFULSET_MUTABLE = ("replicas", "ordinals", "template", "updateStrategy",
                       "persistentVolumeClaimRetentionPolicy", "minReadySeconds")


def pod_disruption_budget(obj: Mapping[str, Any]) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errs: list[FieldError] = []
    has_min, has_max = spec.get("minAvailable") is not None, \
        spec.get("maxUnavailable") is not None
    if has_min and has_max:
        # field.Invalid(fldPath, spec, ...): the internal struct, its pointers as addresses.
        has_policy = spec.get("unhealthyPodEvictionPolicy") is not None
        value = GoValue(
            "policy.PodDisruptionBudgetSpec{"
            f"MinAvailable:{_go_pointer('intstr.IntOrString', True, 0)}, "
            f"Selector:{_go_pointer('v1.LabelSelector', spec.get('selector') is not None, 1)}, "
            f"MaxUnavailable:{_go_pointer('intstr.IntOrString', True, 2)}, "
            "UnhealthyPodEvictionPolicy:"
            f"{_go_pointer('policy.UnhealthyPodEvictionPolicyType', has_policy, 0)}}}")
        errs.append(invalid("spec", value, "minAvailable and maxUnavailable cannot be both set"))
    errs += _int_or_percent(spec.get("minAvailable"), "spec.minAvailable")
    errs += _int_or_percent(spec.get("maxUnavailable"), "spec.maxUnavailable")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in ("IfHealthyBudget", "AlwaysAllow"):
        errs.append(not_supported("spec.unhealthyPodEvictionPolicy", policy,
                                  ["AlwaysAllow", "IfHealthyBudget"]))
    return errs


def service(obj: Mapping[str, Any]) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errs: list[FieldError] = []
    ports = spec.get("ports") or []
    if not ports and spec.get("type", "ClusterIP") != "ExternalName" \
            and spec.get("clusterIP") != "None":
        errs.append(required("spec.ports"))
    names: set[str] = set()
    for i, p in enumerate(ports):
        name = p.get("name") or ""
        if len(ports) > 1 and not name:
            errs.append(required(f"spec.ports[{i}].name"))
        elif name and name in names:
            errs.append(FieldError(DUPLICATE, f"spec.ports[{i}].name", name))
        names.add(name)
        port = p.get("port")
        if not isinstance(port, int) or not 1 <= port <= 65535:
            errs.append(invalid(f"spec.ports[{i}].port", port,
                                "must be between 1 and 65535, inclusive"))
    return errs


_ON_WRITE = {
    "apps/deployments": deployment,
    "apps/replicasets": replicaset,
    "apps/daemonsets": daemonset,
    "apps/statefulsets": statefulset,
    "policy/poddisruptionbudgets": pod_disruption_budget,
    "services": service,
}


def on_update(rt: ResourceType, obj: Mapping[str, Any], old: Mapping[str, Any]
              ) -> list[FieldError]:
    """Immutable fields (ValidateDeploymentUpdate & co., ValidateServiceUpdate)."""
    errs: list[FieldError] = []
    if rt.key == "apps/statefulsets":
        new_spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
        fixed = {k for k in set(new_spec) | set(old_spec) if k not in STATEFULSET_MUTABLE}
        if any(new_spec.get(k) != old_spec.get(k) for k in fixed):
            errs.append(FieldError(FORBIDDEN, "spec", "", (
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', "
                "'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and "
                "'minReadySeconds' are forbidden")))
    if rt.key in ("apps/deployments", "apps/replicasets", "apps/daemonsets"):
        new_sel = (obj.get("spec") or {}).get("selector")
        if new_sel != (old.get("spec") or {}).get("selector"):
            errs.append(invalid("spec.selector", go_label_selector(new_sel), IMMUTABLE))
    if rt.key == "services":
        new_ips = (obj.get("spec") or {}).get("clusterIPs") or []
        old_ips = (old.get("spec") or {}).get("clusterIPs") or []
        if old_ips and new_ips and old_ips[0] != "None" and new_ips[0] != old_ips[0]:
            errs.append(invalid("spec.clusterIPs[0]", go_string_slice(new_ips),
                                "may not change once set"))
    return errs


def check(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Raise 422 Invalid if `obj` (defaulted) would be refused by the real server."""
    errs: list[FieldError] = []
    if rt.key == "pods":
        if old is None:
            errs += pod_spec(obj.get("spec") or {}, "spec")
    else:
        fn = _ON_WRITE.get(rt.key)
        if fn is not None:
            errs += fn(obj)
    if old is not None:
        # ValidateServiceUpdate checks ClusterIPs before the rest; the apps strategies'
        # ValidateUpdate add the immutable selector after the spec's own errors.
        update = on_update(rt, obj, old)
        errs = update + errs if rt.key == "services" else errs + update
    if errs:
        raise invalid_error(rt.group, rt.kind, str((obj.get("metadata") or {}).get("name", "")),
                            errs)
