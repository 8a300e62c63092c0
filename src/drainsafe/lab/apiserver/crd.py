"""CustomResourceDefinitions (apiextensions.k8s.io/v1) and the custom resources they serve.

As kube-apiserver's apiextensions-apiserver does it (k8s.io/apiextensions-apiserver,
v0.33; files named below are under its pkg/):

- A CRD is defaulted (apis/apiextensions/v1/defaults.go: names.singular = lower-case
  kind, names.listKind = kind + "List", conversion.strategy None, status.storedVersions
  = the storage version) and validated (apis/apiextensions/validation/validation.go: the
  name must be `<plural>.<group>`, a group with a dot, scope Namespaced or Cluster,
  exactly one storage version, a schema for every version).
- The naming controller (controller/status/naming_controller.go) accepts the names that
  no other CRD of the group holds (NamesAccepted True/NoConflicts, or False with
  PluralConflict, SingularConflict, ShortNamesConflict, KindConflict or ListKindConflict
  and `"x" is already in use`) and sets Established False/Installing; the establishing
  controller (controller/establish/establishing_controller.go) then sets Established
  True/InitialNamesAccepted. `CRDStatusController` below is both.
- Custom resources are served while NamesAccepted or Established is True
  (apiserver/customresource_handler.go ServeHTTP), at every served version; discovery
  lists a CRD's resources only once it is Established, with the accepted short names
  and categories (apiserver/customresource_discovery_controller.go).
- Writes: unknown fields pruned (and reported per fieldValidation), defaults applied,
  the schema validated (drainsafe.lab.apiserver.crdschema; on updates, unchanged values
  are not held against the object: validation ratcheting); with the status
  subresource, a create drops `status`, main-resource writes keep the stored status,
  status writes keep everything else, and metadata.generation moves only when
  something outside metadata and status changes (registry/customresource/strategy.go);
  without it, status is part of the object and counts for generation.
- Reads apply the current schema's defaults again (the decoder defaults what it reads
  from storage), and an object is returned at the version asked for (conversion
  strategy None: only apiVersion changes).
- The scale subresource reads and writes `specReplicasPath`, `statusReplicasPath` and
  `labelSelectorPath` (registry/customresource/etcd.go ScaleREST, scaleFromCustomResource).
- Tables: the version's additionalPrinterColumns, or just Age when there are none
  (apis/apiextensions/helpers.go serveDefaultColumnsIfEmpty), after Name; cells as
  registry/customresource/tableconvertor/tableconvertor.go makes them (a simple JSONPath,
  the first result; `date` columns as an age, `integer`/`number`/`boolean` typed,
  anything else nil).
- Strategic merge patch is not accepted for custom resources: 415 (the handler's
  supportedTypes are JSON patch, merge patch and apply).
- Deleting a CRD deletes its custom resources (the customresourcecleanup finalizer),
  ends their watches and stops serving them.

Not followed, and why: the lab models no Terminating phase (as for namespaces), so a
deleted CRD goes at once with its custom resources, even those holding finalizers (no
405 "create not allowed while custom resource definition is terminating"); the 2 s
hold of a create right after Established (for HA API servers) is not applied;
conversion webhooks are not called (strategy Webhook is served as None); CEL rules
(x-kubernetes-validations) are not checked; selectableFields are not indexed (the lab's
field selectors accept any path anyway).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from drainsafe.kube.objects import condition, parse_time, rfc3339
from drainsafe.lab.apiserver import crdschema, schema
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import (
    BY_KEY,
    ResourceType,
    Subresource,
    version_priority,
)
from drainsafe.lab.apiserver.store import Event, Obj, Store, clone
from drainsafe.lab.apiserver.table import human_duration
from drainsafe.lab.apiserver.validation import (
    FieldError,
    GoValue,
    invalid,
    invalid_error,
    not_supported,
    required,
)
from drainsafe.lab.controllers import Controller

CRDS = BY_KEY["apiextensions.k8s.io/customresourcedefinitions"]
NAMES_ACCEPTED = "NamesAccepted"
ESTABLISHED = "Established"
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VERSIONS_VALUE = GoValue("[]apiextensions.CustomResourceDefinitionVersion{...}")
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
CUSTOM_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
                      "application/apply-patch+yaml")


# ---- what a CRD defines -------------------------------------------------------------------

@dataclass(frozen=True)
class ScalePaths:
    spec_replicas: str
    status_replicas: str
    label_selector: str | None


@dataclass(frozen=True)
class Version:
    """One version of a custom kind, as served."""

    name: str
    served: bool
    storage: bool
    schema: Mapping[str, Any] | None
    columns: tuple[Mapping[str, Any], ...]
    status: bool
    scale: ScalePaths | None
    warning: str | None = None  # sent with every request to a deprecated version


@dataclass(frozen=True)
class CustomKind:
    crd: str  # the CRD's name, <plural>.<group>
    group: str
    plural: str
    singular: str
    kind: str
    list_kind: str
    namespaced: bool
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    versions: tuple[Version, ...]

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}"

    def version(self, name: str) -> Version | None:
        return next((v for v in self.versions if v.name == name), None)

    @property
    def storage(self) -> Version:
        return next((v for v in self.versions if v.storage), self.versions[0])


def kind_of(crd: Obj) -> CustomKind:
    """The custom kind a (valid) CRD defines, with the names it was granted."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    accepted = (crd.get("status") or {}).get("acceptedNames") or {}
    versions = []
    for v in spec.get("versions") or []:
        warning = None
        if v.get("deprecated"):
            warning = v.get("deprecationWarning") or deprecation_warning(str(v.get("name")),
                                                                         spec)
        subs = v.get("subresources") or {}
        scale = subs.get("scale")
        versions.append(Version(
            name=str(v.get("name", "")), served=bool(v.get("served")),
            storage=bool(v.get("storage")),
            schema=(v.get("schema") or {}).get("openAPIV3Schema"),
            columns=tuple(v.get("additionalPrinterColumns") or ()),
            status="status" in subs,
            scale=None if scale is None else ScalePaths(
                str(scale.get("specReplicasPath", "")),
                str(scale.get("statusReplicasPath", "")),
                scale.get("labelSelectorPath")),
            warning=warning))
    return CustomKind(
        crd=str(crd["metadata"]["name"]), group=str(spec.get("group", "")),
        plural=str(names.get("plural", "")),
        singular=str(names.get("singular") or str(names.get("kind", "")).lower()),
        kind=str(names.get("kind", "")),
        list_kind=str(names.get("listKind") or f"{names.get('kind', '')}List"),
        namespaced=spec.get("scope") == "Namespaced",
        short_names=tuple(accepted.get("shortNames") or ()),
        categories=tuple(accepted.get("categories") or ()),
        versions=tuple(versions))


def deprecation_warning(version: str, spec: Mapping[str, Any]) -> str:
    """customresource_handler.go defaultDeprecationWarning: the served, not deprecated
    version of highest priority above this one is suggested."""
    kind = (spec.get("names") or {}).get("kind", "")
    text = f"{spec.get('group')}/{version} {kind} is deprecated"
    newer = sorted((str(v.get("name")) for v in spec.get("versions") or []
                    if v.get("served") and not v.get("deprecated")
                    and version_priority(str(v.get("name"))) < version_priority(version)),
                   key=version_priority)
    return f"{text}; use {spec.get('group')}/{newer[0]} {kind}" if newer else text


def resource_types(kind: CustomKind) -> list[ResourceType]:
    """What the catalog serves for a custom kind: one type per served version."""
    out = []
    for v in kind.versions:
        if not v.served:
            continue
        subs: list[Subresource] = []
        if v.status:
            subs.append(Subresource("status", kind.kind, ("get", "patch", "update")))
        if v.scale is not None:
            subs.append(Subresource("scale", "Scale", ("get", "patch", "update"),
                                    "autoscaling", "v1"))
        out.append(ResourceType(kind.group, v.name, kind.plural, kind.kind, kind.namespaced,
                                kind.short_names, kind.categories, tuple(subs),
                                has_status=v.status, singular_name=kind.singular))
    return out


def is_true(crd: Obj, kind: str) -> bool:
    c = condition(crd, kind)
    return c is not None and c.get("status") == "True"


# ---- the CRD object itself ----------------------------------------------------------------

def default_crd(crd: Obj, old: Obj | None) -> None:
    """SetDefaults_CustomResourceDefinition(Spec), and the strategy's storedVersions."""
    spec = crd.setdefault("spec", {})
    names = spec.setdefault("names", {})
    if not names.get("singular") and names.get("kind"):
        names["singular"] = str(names["kind"]).lower()
    if not names.get("listKind") and names.get("kind"):
        names["listKind"] = f"{names['kind']}List"
    spec.setdefault("conversion", {"strategy": "None"})
    for v in spec.get("versions") or []:
        if isinstance(v, dict):
            svc = ((v.get("conversion") or {}).get("webhook") or {}).get("clientConfig")
            if isinstance(svc, dict) and isinstance(svc.get("service"), dict):
                svc["service"].setdefault("port", 443)
    status = crd.setdefault("status", {}) if old is None else crd.get("status")
    if isinstance(status, dict):
        stored = list(status.get("storedVersions") or [])
        storage = next((v.get("name") for v in spec.get("versions") or []
                        if isinstance(v, dict) and v.get("storage")), None)
        if storage and storage not in stored:
            stored.append(storage)
        status["storedVersions"] = stored
        status.setdefault("acceptedNames", {"plural": "", "kind": ""})
        status.setdefault("conditions", [])


def validate_crd(crd: Obj, old: Obj | None) -> list[FieldError]:
    """The checks of ValidateCustomResourceDefinition a lab manifest can fail."""
    errs: list[FieldError] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = str(spec.get("group") or "")
    name = str(crd["metadata"].get("name", ""))
    if name != f"{names.get('plural', '')}.{group}":
        errs.append(invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    if not group:
        errs.append(required("spec.group"))
    elif not _DNS1123_SUBDOMAIN.match(group):
        errs.append(invalid("spec.group", group, "a lowercase RFC 1123 subdomain must consist "
                            "of lower case alphanumeric characters, '-' or '.', and must start "
                            "and end with an alphanumeric character (e.g. 'example.com', regex "
                            "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]"
                            "([-a-z0-9]*[a-z0-9])?)*')"))
    elif "." not in group:
        errs.append(invalid("spec.group", group, "should be a domain with at least one dot"))
    scope = spec.get("scope")
    if not scope:
        errs.append(required("spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        errs.append(not_supported("spec.scope", scope, ["Cluster", "Namespaced"]))
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    for i, v in enumerate(versions):
        if not (v.get("schema") or {}).get("openAPIV3Schema"):
            errs.append(required(f"spec.versions[{i}].schema.openAPIV3Schema",
                                 "schemas are required"))
        for j, col in enumerate(v.get("additionalPrinterColumns") or []):
            if not _parse_path(str(col.get("jsonPath", ""))):
                errs.append(invalid(f"spec.versions[{i}].additionalPrinterColumns[{j}]"
                                    ".jsonPath", col.get("jsonPath", ""),
                                    "must be a simple json path starting with ."))
    if len({v.get("name") for v in versions}) != len(versions):
        errs.append(invalid("spec.versions", _VERSIONS_VALUE, "must contain unique version names"))
    if sum(1 for v in versions if v.get("storage")) != 1:
        errs.append(invalid("spec.versions", _VERSIONS_VALUE,
                            "must have exactly one version marked as storage version"))
    for fld in ("plural", "singular", "kind", "listKind"):
        if not names.get(fld):
            errs.append(required(f"spec.names.{fld}"))
    if old is not None:
        if (old.get("spec") or {}).get("scope") != scope:
            errs.append(invalid("spec.scope", scope, "field is immutable"))
        if (old.get("spec") or {}).get("group") != group:
            errs.append(invalid("spec.group", group, "field is immutable"))
    return errs


def names_and_conditions(crd: Obj, others: Iterable[Obj], now: str
                         ) -> tuple[Obj, Obj, Obj]:
    """The naming controller's calculateNamesAndConditions: (acceptedNames,
    NamesAccepted, Established) given the other CRDs of the same group."""
    spec = crd.get("spec") or {}
    group = spec.get("group")
    resources: set[str] = set()
    kinds: set[str] = set()
    for other in others:
        if (other.get("spec") or {}).get("group") != group or \
                other["metadata"]["name"] == crd["metadata"]["name"]:
            continue
        got = (other.get("status") or {}).get("acceptedNames") or {}
        resources.update(filter(None, [got.get("plural"), got.get("singular"),
                                       *(got.get("shortNames") or [])]))
        kinds.update(filter(None, [got.get("kind"), got.get("listKind")]))
    want = spec.get("names") or {}
    have = (crd.get("status") or {}).get("acceptedNames") or {}
    names = dict(have)
    reason, message = "NoConflicts", "no conflicts found"

    def fresh(requested: Any, accepted: Any, used: set[str]) -> bool:
        return requested == accepted or requested not in used

    for fld, used, why in (("plural", resources, "PluralConflict"),
                           ("singular", resources, "SingularConflict")):
        if fresh(want.get(fld), have.get(fld), used):
            names[fld] = want.get(fld)
        else:
            reason, message = why, f'"{want.get(fld)}" is already in use'
    short = list(want.get("shortNames") or [])
    if short != list(have.get("shortNames") or []):
        taken = [s for s in short if s not in (have.get("shortNames") or []) and s in resources]
        if taken:
            reason = "ShortNamesConflict"
            texts = [f'"{s}" is already in use' for s in taken]
            message = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
        elif short:
            names["shortNames"] = short
        else:
            names.pop("shortNames", None)
    for fld, why in (("kind", "KindConflict"), ("listKind", "ListKindConflict")):
        if fresh(want.get(fld), have.get(fld), kinds):
            names[fld] = want.get(fld)
        else:
            reason, message = why, f'"{want.get(fld)}" is already in use'
    if want.get("categories"):
        names["categories"] = list(want["categories"])
    else:
        names.pop("categories", None)
    ok = reason == "NoConflicts"
    accepted = _next_condition(crd, NAMES_ACCEPTED, "True" if ok else "False", reason,
                               message, now)
    established = dict(condition(crd, ESTABLISHED) or {}) or _next_condition(
        crd, ESTABLISHED, "False", "NotAccepted", "not all names are accepted", now)
    if established.get("status") != "True" and ok:
        established = _next_condition(crd, ESTABLISHED, "False", "Installing",
                                      "the initial names have been accepted", now)
    return names, accepted, established


def _next_condition(crd: Obj, kind: str, status: str, reason: str, message: str, now: str) -> Obj:
    old = condition(crd, kind)
    since = old.get("lastTransitionTime") if old and old.get("status") == status else now
    return {"type": kind, "status": status, "lastTransitionTime": since, "reason": reason,
            "message": message}


def with_conditions(crd: Obj, conditions: Iterable[Obj]) -> list[Obj]:
    mine = {c["type"]: c for c in conditions}
    out = [mine.pop(c.get("type"), c) for c in (crd.get("status") or {}).get("conditions") or []]
    return out + list(mine.values())


class CRDStatusController(Controller):
    """The naming and establishing controllers, one step per pass."""

    name = "crd-status"
    watches = frozenset({CRDS.key})
    batch_seconds = 0.0

    def reconcile(self) -> float | None:
        now = rfc3339(self.store.clock())
        crds = list(self.store.items(CRDS))
        for crd in crds:
            if crd["metadata"].get("deletionTimestamp"):
                continue
            names, accepted, established = names_and_conditions(crd, crds, now)
            status = crd.get("status") or {}
            if names != status.get("acceptedNames") or condition(crd, NAMES_ACCEPTED) != \
                    accepted or (not is_true(crd, ESTABLISHED)
                                 and condition(crd, ESTABLISHED) != established):
                self._write(crd, names, [accepted, established])
            elif is_true(crd, NAMES_ACCEPTED) and not is_true(crd, ESTABLISHED):
                self._write(crd, names, [_next_condition(crd, ESTABLISHED, "True",
                                                    "InitialNamesAccepted",
                                                    "the initial names have been accepted",
                                                    now)])
        return None

    def _write(self, crd: Obj, names: Obj, conditions: list[Obj]) -> None:
        new = clone(crd)
        status = new.setdefault("status", {})
        status["acceptedNames"] = names
        status["conditions"] = with_conditions(crd, conditions)
        try:
            self.store.update(CRDS, new, subresource="status")
        except st.StatusError as err:  # changed or gone meanwhile: the next pass sees it
            if err.code not in (404, 409):
                raise


# ---- JSONPath for printer columns --------------------------------------------------------

_STEP = re.compile(r"""\.([A-Za-z0-9_$-]+)|\[(\d+|\*)\]|\[['"]([^'"]+)['"]\]"""
                   r"""|\[\?\(@\.([A-Za-z0-9_.$-]+)\s*==\s*(?:"([^"]*)"|'([^']*)'|(\S+?))\)\]""")
Step = tuple[str, Any]


def _parse_path(text: str) -> list[Step] | None:
    """The simple JSON paths columns use: .a.b, [n], [*], ['k'], [?(@.k=="v")]."""
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if not text.startswith("."):
        return None
    steps: list[Step] = []
    pos = 0
    while pos < len(text):
        m = _STEP.match(text, pos)
        if m is None:
            return None
        if m.group(1) is not None:
            steps.append(("field", m.group(1)))
        elif m.group(2) is not None:
            steps.append(("all", None) if m.group(2) == "*" else ("index", int(m.group(2))))
        elif m.group(3) is not None:
            steps.append(("field", m.group(3)))
        else:
            value = next(g for g in (m.group(5), m.group(6), m.group(7)) if g is not None)
            steps.append(("filter", (tuple(m.group(4).split(".")), value)))
        pos = m.end()
    return steps


def find(obj: Any, path: str) -> list[Any]:
    """Every value `path` reaches in `obj` (missing keys give nothing)."""
    steps = _parse_path(path) or []
    values = [obj]
    for kind, arg in steps:
        out: list[Any] = []
        for v in values:
            if (kind == "field" and isinstance(v, dict) and arg in v) or (
                    kind == "index" and isinstance(v, list) and -len(v) <= arg < len(v)):
                out.append(v[arg])
            elif kind == "all" and isinstance(v, list):
                out.extend(v)
            elif kind == "filter" and isinstance(v, list):
                keys, want = arg
                for item in v:
                    cur = item
                    for k in keys:
                        cur = cur.get(k) if isinstance(cur, dict) else None
                    if cur is not None and _text(cur) == want.strip("'\""):
                        out.append(item)
        values = out
    return values


def _text(value: Any) -> str:
    """A value as the jsonpath printer writes it."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return crdschema.go_number(value)
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def cell(column: Mapping[str, Any], obj: Obj, now: float) -> Any:
    """One cell, as tableconvertor.go's ConvertToTable and cellForJSONValue make it."""
    found = find(obj, str(column.get("jsonPath", "")))
    if not found:
        return None
    value = found[0]
    kind = column.get("type")
    if kind == "string":
        return _text(value) if value is not None else None
    if value is None:
        return None
    if kind == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        when = parse_time(value)
        return "<invalid>" if when is None else human_duration(now - when)
    return None


AGE_COLUMN: Mapping[str, Any] = {
    "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
    "description": "CreationTimestamp is a timestamp representing the server time when "
                   "this object was created."}


def columns_of(version: Version) -> tuple[Mapping[str, Any], ...]:
    return version.columns or (AGE_COLUMN,)


def table(version: Version, objs: list[Obj], list_meta: dict[str, Any], now: float
          ) -> dict[str, Any]:
    columns = columns_of(version)
    return {
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name",
             "description": "Name must be unique within a namespace.", "priority": 0},
            *({"name": c.get("name", ""), "type": c.get("type", ""),
               "format": c.get("format", ""),
               "description": c.get("description") or "Custom resource definition column "
               f"(in JSONPath format): {c.get('jsonPath', '')}",
               "priority": int(c.get("priority", 0))} for c in columns)],
        "rows": [{"cells": [o["metadata"]["name"], *(cell(c, o, now) for c in columns)],
                  "object": {"kind": "PartialObjectMetadata",
                             "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}}
                 for o in objs],
    }


# ---- scale subresource --------------------------------------------------------------------

def _dotted(path: str) -> list[str]:
    return [p for p in path.split(".") if p]


def _get(obj: Any, path: str) -> Any:
    for part in _dotted(path):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def scale_of(kind: CustomKind, paths: ScalePaths, obj: Obj) -> Obj:
    """The autoscaling/v1 Scale of a custom resource (scaleFromCustomResource)."""
    m = obj["metadata"]
    status: Obj = {"replicas": int(_get(obj, paths.status_replicas) or 0)}
    if paths.label_selector:
        selector = _get(obj, paths.label_selector)
        if isinstance(selector, str) and selector:
            status["selector"] = selector
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {k: m[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                       "creationTimestamp") if k in m},
        "spec": {"replicas": int(_get(obj, paths.spec_replicas) or 0)},
        "status": status,
    }


def set_replicas(paths: ScalePaths, obj: Obj, replicas: Any) -> None:
    """Write a Scale's spec.replicas into the custom resource (ScaleREST.Update)."""
    parts = _dotted(paths.spec_replicas)
    cur = obj
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = cur[part] = {}
        cur = nxt
    cur[parts[-1]] = replicas


def scale_paths(store: Store, rt: ResourceType) -> ScalePaths | None:
    """The scale subresource of a custom kind as its CRD defines it now (None for a
    built-in kind, or a version without one)."""
    found = store.peek(CRDS, "", f"{rt.plural}.{rt.group}")
    if found is None or not store.catalog.is_custom(rt):
        return None
    version = kind_of(found).version(rt.version)
    return None if version is None else version.scale


def spec_replicas(paths: ScalePaths, obj: Obj) -> int:
    value = _get(obj, paths.spec_replicas)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def validate_scale(replicas: Any, name: str) -> None:
    """autoscaling ValidateScale, which ScaleREST.Update runs: a non-negative integer."""
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise invalid_error("autoscaling", "Scale", name, [
            invalid("spec.replicas", replicas, "must be greater than or equal to 0")])


# ---- OpenAPI v3 ---------------------------------------------------------------------------

OBJECT_META_REF = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
OBJECT_META_SCHEMA: Mapping[str, Any] = {
    "description": "ObjectMeta is metadata that all persisted resources must have, which "
                   "includes all objects users must create.",
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Name must be unique within a namespace."},
        "namespace": {"type": "string", "description": "Namespace defines the space within "
                      "which each name must be unique."},
        "labels": {"type": "object", "additionalProperties": {"type": "string"},
                   "description": "Map of string keys and values that can be used to "
                   "organize and categorize (scope and select) objects."},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "Annotations is an unstructured key value map stored "
                        "with a resource."},
        "uid": {"type": "string", "description": "UID is the unique in time and space value "
                "for this object."},
        "resourceVersion": {"type": "string", "description": "An opaque value that represents "
                            "the internal version of this object."},
        "generation": {"type": "integer", "format": "int64", "description": "A sequence "
                       "number representing a specific generation of the desired state."},
        "creationTimestamp": {"type": "string", "format": "date-time", "description":
                              "CreationTimestamp is a timestamp representing the server "
                              "time when this object was created."},
    },
}


def schema_name(kind: CustomKind, version: str, kind_name: str | None = None) -> str:
    """builder.go's definition name: the reversed group, the version, the kind."""
    reversed_group = ".".join(reversed(kind.group.split(".")))
    return f"{reversed_group}.{version}.{kind_name or kind.kind}"


def openapi_schemas(kind: CustomKind, version: Version) -> dict[str, Any]:
    """The component schemas of one version (apiserver/schema/builder, simplified: the
    CRD's own schema with apiVersion, kind and metadata filled in)."""
    base = copy.deepcopy(dict(version.schema or {"type": "object"}))
    props = base.setdefault("properties", {})
    props["apiVersion"] = {"type": "string", "description": "APIVersion defines the "
                           "versioned schema of this representation of an object."}
    props["kind"] = {"type": "string", "description": "Kind is a string value representing "
                     "the REST resource this object represents."}
    props["metadata"] = {"$ref": f"#/components/schemas/{OBJECT_META_REF}",
                         "description": "Standard object's metadata."}
    base.setdefault("type", "object")
    gvk = {"group": kind.group, "version": version.name}
    base["x-kubernetes-group-version-kind"] = [{**gvk, "kind": kind.kind}]
    item = schema_name(kind, version.name)
    return {
        item: base,
        schema_name(kind, version.name, kind.list_kind): {
            "type": "object", "required": ["items"],
            "description": f"{kind.list_kind} is a list of {kind.kind}",
            "properties": {
                "apiVersion": props["apiVersion"], "kind": props["kind"],
                "items": {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}},
                "metadata": {"type": "object"}},
            "x-kubernetes-group-version-kind": [{**gvk, "kind": kind.list_kind}]},
        OBJECT_META_REF: dict(OBJECT_META_SCHEMA),
    }


# ---- serving ------------------------------------------------------------------------------

class CustomResources:
    """The custom kinds one API server serves, kept in step with its CRDs.

    Registers the write chain for CRDs and custom resources on the store, and updates
    the store's catalog (drainsafe.lab.apiserver.discovery.Catalog) on every CRD change."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._kinds: dict[str, CustomKind] = {}  # by store key
        store.admission.append(self._admit)
        store.listen(self._on_event)

    # ---- look-ups ----

    def kind(self, rt: ResourceType) -> CustomKind | None:
        if not self.store.catalog.is_custom(rt):
            return None
        return self._kinds.get(rt.key)

    def version(self, rt: ResourceType) -> tuple[CustomKind, Version] | None:
        kind = self.kind(rt)
        version = kind.version(rt.version) if kind is not None else None
        return None if kind is None or version is None else (kind, version)

    def crd(self, rt: ResourceType) -> Obj | None:
        kind = self.kind(rt)
        return None if kind is None else self.store.peek(CRDS, "", kind.crd)

    def serving(self, rt: ResourceType) -> bool:
        """Requests reach the kind while NamesAccepted or Established is True."""
        crd = self.crd(rt)
        return crd is not None and (is_true(crd, NAMES_ACCEPTED) or is_true(crd, ESTABLISHED))

    def discoverable(self) -> list[ResourceType]:
        """The catalog without the custom kinds that are not Established yet."""
        out = []
        for rt in self.store.catalog.all():
            crd = self.crd(rt)
            if crd is None and self.store.catalog.is_custom(rt):
                continue
            if crd is None or is_true(crd, ESTABLISHED):
                out.append(rt)
        return out

    # ---- reading and writing custom resources ----

    def present(self, rt: ResourceType, obj: Obj) -> Obj:
        """A stored custom resource as read at `rt`'s version: defaulted by the current
        schema, apiVersion that version's. `obj` is a copy the caller owns."""
        found = self.version(rt)
        if found is None:
            return obj
        _, version = found
        obj["apiVersion"] = rt.api_version
        crdschema.default(obj, version.schema)
        crdschema.prune_nulls(obj, version.schema)
        return obj

    def unknown_fields(self, rt: ResourceType, obj: Obj, *, drop: bool) -> list[str]:
        """What pruning would remove from `obj` (removed when `drop`)."""
        found = self.version(rt)
        if found is None:
            return []
        return prune(obj if drop else copy.deepcopy(obj), found[1].schema)

    def _admit(self, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        if rt.key == CRDS.key:
            default_crd(obj, old)
            errs = validate_crd(obj, old)
            if errs:
                raise invalid_error(CRDS.group, CRDS.kind, str(obj["metadata"].get("name", "")),
                                    errs)
            return
        found = self.version(rt)
        if found is None:
            return
        kind, version = found
        # Stored at the storage version (conversion None: only apiVersion differs).
        obj["apiVersion"] = f"{kind.group}/{kind.storage.name}"
        if old is None and version.status:
            obj.pop("status", None)
        prune(obj, version.schema)
        crdschema.default(obj, version.schema)
        crdschema.prune_nulls(obj, version.schema)
        errs = crdschema.validate(obj, version.schema)
        if old is not None:
            errs = crdschema.ratchet(errs, obj, old)
        if errs:
            raise invalid_error(kind.group, kind.kind, str(obj["metadata"].get("name", "")),
                                errs)

    def _on_event(self, ev: Event) -> None:
        if ev.resource != CRDS.key:
            return
        if ev.type == "DELETED":
            kind = kind_of(ev.obj)
            rt = self.store.catalog.by_key(kind.key)
            if rt is not None and self._kinds.get(kind.key, kind).crd == kind.crd:
                self._kinds.pop(kind.key, None)
                self.store.forget(rt)
                self.store.catalog.withdraw(kind.key)
            return
        kind = kind_of(ev.obj)
        self._kinds[kind.key] = kind
        self.store.catalog.serve(kind.key, resource_types(kind))


def prune(obj: Obj, version_schema: Mapping[str, Any] | None) -> list[str]:
    """Drop what a custom resource may not hold: metadata fields ObjectMeta lacks
    (schema/objectmeta coerce.go), then what the schema does not specify."""
    gone = []
    if isinstance(obj.get("metadata"), dict):
        gone = schema.drop_unknown("V1ObjectMeta", obj["metadata"], "metadata")
    return gone + crdschema.prune(obj, version_schema)


def strategic_merge_refused() -> st.StatusError:
    """negotiation.NewUnsupportedMediaTypeError with the custom resource patch types."""
    return st.StatusError(415, "UnsupportedMediaType",
                          "the body of the request was in an unknown format - accepted "
                          "media types include: " + ", ".join(CUSTOM_PATCH_TYPES))


Pruner = Callable[[Obj, bool], list[str]]
