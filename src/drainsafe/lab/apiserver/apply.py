"""Server-side apply and managedFields, to the degree kubectl, kustomize and controller
manifests need them.

Follows kubernetes-sigs/structured-merge-diff (fieldpath sets, typed merge) as wired
into kube-apiserver by kubernetes/apimachinery pkg/util/managedfields/internal
(fieldmanager.go, structuredmerge.go, managedfields.go, conflict.go) and
kubernetes/apiserver pkg/endpoints/handlers/patch.go (applyPatcher):

- Every write through the API records who changed which fields in
  metadata.managedFields (FieldsV1). A non-apply write (create, update, patch) is an
  `Update` operation: its manager (the `fieldManager` parameter, else the User-Agent up to
  the first "/") takes the fields it changed, which other managers lose. A write that
  changes nothing leaves managedFields alone.
- `PATCH` with `application/apply-patch+yaml` is an `Apply`: the applied configuration is
  merged into the live object (or creates it); associative lists merge by their keys
  (containers by name, container ports by containerPort+protocol, ...), other lists and
  atomic structs (LabelSelector) are replaced; fields this manager applied before and
  no longer applies are removed unless another manager also owns them. A field the
  apply changes that another manager owns is a conflict: 409 with the real message
  ("Apply failed with 1 conflict: conflict with \"kubectl-patch\" using apps/v1:
  .spec.replicas"), unless `force=true`, which takes the field over.

Custom resources (drainsafe.lab.apiserver.crd) are typed as a structural schema without
x-kubernetes-map-type or x-kubernetes-list-type is: every object a granular map, every
list atomic, metadata ObjectMeta (structured-merge-diff's deduced defaults for CRDs).

Not emulated: ownership of fields set by the lab's in-process controllers (they write
to the store directly, as no manager), the managed-fields upgrade kubectl performs
when switching a client-side-applied object to server-side apply, apply on
subresources, and version conversion of managed fields (one version per kind here).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from drainsafe.kube.objects import rfc3339
from drainsafe.lab.apiserver import schema
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import ResourceType
from drainsafe.lab.apiserver.store import Obj, clone

Path = tuple[str, ...]

# +listType=map list keys (k8s.io/api types.go listMapKey / patchMergeKey), by the
# owning type and field; lists of primitives with patchStrategy merge are sets; every
# other list is atomic.
LIST_KEYS: dict[tuple[str, str], tuple[str, ...]] = {
    ("V1PodSpec", "containers"): ("name",),
    ("V1PodSpec", "initContainers"): ("name",),
    ("V1PodSpec", "ephemeralContainers"): ("name",),
    ("V1PodSpec", "volumes"): ("name",),
    ("V1PodSpec", "imagePullSecrets"): ("name",),
    ("V1PodSpec", "hostAliases"): ("ip",),
    ("V1PodSpec", "resourceClaims"): ("name",),
    ("V1PodSpec", "topologySpreadConstraints"): ("topologyKey", "whenUnsatisfiable"),
    ("V1Container", "env"): ("name",),
    ("V1Container", "ports"): ("containerPort", "protocol"),
    ("V1Container", "volumeMounts"): ("mountPath",),
    ("V1Container", "volumeDevices"): ("devicePath",),
    ("V1EphemeralContainer", "env"): ("name",),
    ("V1EphemeralContainer", "ports"): ("containerPort", "protocol"),
    ("V1EphemeralContainer", "volumeMounts"): ("mountPath",),
    ("V1ServiceSpec", "ports"): ("port", "protocol"),
    ("V1ObjectMeta", "ownerReferences"): ("uid",),
}
SET_LISTS = frozenset({("V1ObjectMeta", "finalizers"), ("V1NamespaceSpec", "finalizers")})
ATOMIC_TYPES = frozenset({"V1LabelSelector", "V1NodeSelector"})  # +structType=atomic
KEY_DEFAULTS = {"protocol": "TCP"}  # list-map keys the schema defaults
# The type names of custom resources: the root, and every object below it.
CUSTOM_ROOT = "<custom resource>"
CUSTOM_MAP = "<custom object>"
# Set by the server, never owned by a manager (fieldmanager stripMeta).
_SYSTEM_META = frozenset({"name", "namespace", "uid", "resourceVersion", "generation",
                          "creationTimestamp", "deletionTimestamp", "selfLink",
                          "deletionGracePeriodSeconds", "managedFields", "generateName"})


@dataclass(frozen=True)
class Writer:
    """Who is writing which object in the current request (set by the API server)."""

    resource: str
    namespace: str
    name: str
    manager: str
    subresource: str | None = None


CURRENT: contextvars.ContextVar[Writer | None] = contextvars.ContextVar("lab_writer",
                                                                       default=None)


@contextlib.contextmanager
def writing(writer: Writer) -> Iterator[None]:
    token = CURRENT.set(writer)
    try:
        yield
    finally:
        CURRENT.reset(token)


def manager_from(field_manager: str | None, user_agent: str | None) -> str:
    """handlers/rest.go: the fieldManager parameter, else the User-Agent's first part."""
    if field_manager:
        return field_manager
    return (user_agent or "").split("/", 1)[0][:128]


# ---- field sets ---------------------------------------------------------------------

def _key_element(item: dict[str, Any], keys: tuple[str, ...]) -> str:
    values = {k: item.get(k, KEY_DEFAULTS.get(k)) for k in keys}
    return "k:" + json.dumps(dict(sorted(values.items())), separators=(",", ":"))


def _child_type(type_name: str, field: str) -> str | None:
    if type_name == CUSTOM_ROOT:
        return "V1ObjectMeta" if field == "metadata" else CUSTOM_MAP
    if type_name == CUSTOM_MAP:
        return CUSTOM_MAP
    return schema.types().get(type_name, {}).get(field)


def _is_struct(type_name: str | None) -> bool:
    return type_name in (CUSTOM_ROOT, CUSTOM_MAP) or type_name in schema.types()


def root_type(rt: ResourceType) -> str:
    """The type name of a kind's objects: its model's, or the custom resource's."""
    name = schema.model_name(rt)
    return name if name in schema.types() else CUSTOM_ROOT


def fieldset(obj: Obj, type_name: str) -> set[Path]:
    """The paths `obj` sets (typed/tofieldset.go), leaves and list items as members."""
    out: set[Path] = set()
    _collect_struct(_strip_top(obj), type_name, (), out)
    return out


def _collect_struct(value: dict[str, Any], type_name: str, path: Path, out: set[Path]) -> None:
    for key, item in value.items():
        if item is None:
            continue
        child = (*path, f"f:{key}")
        kind = _child_type(type_name, key)
        _collect(item, kind, type_name, key, child, out)


def _collect(value: Any, kind: str | None, parent: str, field: str, path: Path,
             out: set[Path]) -> None:
    if kind is None or kind in ATOMIC_TYPES or not isinstance(value, dict | list):
        out.add(path)
        return
    if kind.startswith("List[") and isinstance(value, list):
        inner = kind[5:-1]
        keys = LIST_KEYS.get((parent, field))
        if keys is not None:
            for item in value:
                if isinstance(item, dict):
                    member = (*path, _key_element(item, keys))
                    out.add(member)
                    _collect_struct(item, inner, member, out)
        elif (parent, field) in SET_LISTS:
            for item in value:
                out.add((*path, "v:" + json.dumps(item)))
        else:
            out.add(path)
        return
    if kind.startswith("Dict[") and isinstance(value, dict):
        inner = kind[len("Dict[str, "):-1]
        if not value:
            out.add(path)
        for key, item in value.items():
            _collect(item, inner if inner in schema.types() else None, "", key,
                     (*path, f"f:{key}"), out)
        return
    if isinstance(value, dict) and _is_struct(kind):
        if not value or kind == CUSTOM_MAP:  # a custom resource's maps are members
            out.add(path)
        _collect_struct(value, kind, path, out)
        return
    out.add(path)


def _strip_top(obj: Obj) -> Obj:
    top = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    meta = {k: v for k, v in (top.get("metadata") or {}).items() if k not in _SYSTEM_META}
    top["metadata"] = meta
    if not meta:
        del top["metadata"]
    return top


def diff(old: Obj, new: Obj, type_name: str) -> tuple[set[Path], set[Path]]:
    """(paths set or changed in `new`, paths of `old` gone from `new`), walking both
    together and skipping equal subtrees (typed/compare.go, in one pass)."""
    touched: set[Path] = set()
    gone: set[Path] = set()
    _diff_struct(_strip_top(old), _strip_top(new), type_name, (), touched, gone)
    return touched, gone


def _diff_struct(old: dict[str, Any], new: dict[str, Any], type_name: str, path: Path,
                 touched: set[Path], gone: set[Path]) -> None:
    for key, item in new.items():
        if item is None:
            continue
        was = old.get(key)
        if was == item:
            continue
        child = (*path, f"f:{key}")
        kind = _child_type(type_name, key)
        if was is None:
            _collect(item, kind, type_name, key, child, touched)
            if kind is not None and (kind.startswith("Dict[") or kind == CUSTOM_MAP):
                # An added map is itself added (typed/compare.go), so an Update owns it
                # as a member too: `f:labels: {.: {}, f:app: {}}`. Structs are not
                # marked: most are non-pointer fields the zero object already has.
                touched.add(child)
        else:
            _diff_value(was, item, kind, type_name, key, child, touched, gone)
    for key, was in old.items():
        if was is not None and new.get(key) is None:
            _collect(was, _child_type(type_name, key), type_name, key, (*path, f"f:{key}"),
                     gone)


def _diff_value(old: Any, new: Any, kind: str | None, parent: str, field: str, path: Path,
                touched: set[Path], gone: set[Path]) -> None:
    types = schema.types()
    if kind is None or kind in ATOMIC_TYPES or type(old) is not type(new) \
            or not isinstance(new, dict | list):
        touched.add(path)
        return
    if isinstance(new, list):
        keys = LIST_KEYS.get((parent, field)) if kind.startswith("List[") else None
        if keys is None:
            if (parent, field) in SET_LISTS:
                for v in new:
                    if v not in old:
                        touched.add((*path, "v:" + json.dumps(v)))
                for v in old:
                    if v not in new:
                        gone.add((*path, "v:" + json.dumps(v)))
            else:
                touched.add(path)
            return
        inner = kind[5:-1]
        before = {_key_element(i, keys): i for i in old if isinstance(i, dict)}
        after = {_key_element(i, keys): i for i in new if isinstance(i, dict)}
        for el, item in after.items():
            member = (*path, el)
            if el not in before:
                touched.add(member)
                _collect_struct(item, inner, member, touched)
            elif before[el] != item:
                _diff_struct(before[el], item, inner, member, touched, gone)
        for el, item in before.items():
            if el not in after:
                member = (*path, el)
                gone.add(member)
                _collect_struct(item, inner, member, gone)
        return
    if kind.startswith("Dict["):
        inner = kind[len("Dict[str, "):-1]
        inner_kind = inner if inner in types else None
        for key, item in new.items():
            if item is not None and old.get(key) != item:
                child = (*path, f"f:{key}")
                if old.get(key) is None:
                    _collect(item, inner_kind, "", key, child, touched)
                else:
                    _diff_value(old[key], item, inner_kind, "", key, child, touched, gone)
        for key, was in old.items():
            if was is not None and new.get(key) is None:
                _collect(was, inner_kind, "", key, (*path, f"f:{key}"), gone)
        return
    if _is_struct(kind):
        _diff_struct(old, new, kind, path, touched, gone)
        return
    touched.add(path)


_ABSENT = object()


def value_at(obj: Any, path: Path) -> Any:
    cur = obj
    for el in path:
        if el.startswith("f:") and isinstance(cur, dict):
            cur = cur.get(el[2:], _ABSENT)
        elif el.startswith("k:") and isinstance(cur, list):
            want = json.loads(el[2:])
            cur = next((i for i in cur if isinstance(i, dict) and all(
                i.get(k, KEY_DEFAULTS.get(k)) == v for k, v in want.items())), _ABSENT)
        elif el.startswith("v:") and isinstance(cur, list):
            v = json.loads(el[2:])
            cur = v if v in cur else _ABSENT
        else:
            return _ABSENT
        if cur is _ABSENT:
            return _ABSENT
    return cur


def _is_member_item(path: Path) -> bool:
    return bool(path) and path[-1][:2] in ("k:", "v:")


def changed(old: Any, new: Any, paths: set[Path], *, maps_are_members: bool = False
            ) -> set[Path]:
    """The paths of `paths` whose value differs between old and new (an item of an
    associative list counts as changed only when it is new or gone; so does a map of a
    custom resource, which its fields' owners share: `maps_are_members`)."""
    out = set()
    for p in paths:
        a, b = value_at(old, p), value_at(new, p)
        if _is_member_item(p) or (maps_are_members and isinstance(a, dict)
                                  and isinstance(b, dict)):
            if (a is _ABSENT) != (b is _ABSENT):
                out.add(p)
        elif a != b:
            out.add(p)
    return out


# ---- FieldsV1 -----------------------------------------------------------------------

def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    members: set[Path] = set(paths)
    for p in sorted(paths):
        node = tree
        for el in p:
            node = node.setdefault(el, {})
    def mark(node: dict[str, Any], path: Path) -> None:
        for key, child in node.items():
            if key == ".":
                continue
            here = (*path, key)
            if child and here in members:
                child["."] = {}
            mark(child, here)
    mark(tree, ())
    return _sorted_tree(tree)


def _sorted_tree(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: _sorted_tree(v) for k, v in sorted(tree.items())}


def from_fields_v1(tree: Any, path: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(tree, dict):
        return out
    for key, child in tree.items():
        if key == ".":
            continue
        here = (*path, key)
        if not child or "." in child:
            out.add(here)
        out |= from_fields_v1(child, here)
    return out


def path_text(path: Path) -> str:
    """fieldpath.Path.String(): .spec.containers[name="c"].image."""
    parts = []
    for el in path:
        kind, body = el[:2], el[2:]
        if kind == "f:":
            parts.append(f".{body}")
        elif kind == "k:":
            parts.append("[" + ",".join(f"{k}={json.dumps(v)}"
                                         for k, v in json.loads(body).items()) + "]")
        elif kind == "v:":
            parts.append(f"[={body}]")
        else:
            parts.append(f"[{body}]")
    return "".join(parts)


# ---- managedFields entries ----------------------------------------------------------

@dataclass
class Entry:
    manager: str
    operation: str
    api_version: str
    time: str
    fields: set[Path]
    subresource: str | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Entry:
        return cls(str(raw.get("manager", "")), str(raw.get("operation", "")),
                   str(raw.get("apiVersion", "")), str(raw.get("time", "")),
                   from_fields_v1(raw.get("fieldsV1")), raw.get("subresource"))

    def render(self) -> dict[str, Any]:
        out: dict[str, Any] = {"manager": self.manager, "operation": self.operation,
                               "apiVersion": self.api_version, "time": self.time,
                               "fieldsType": "FieldsV1",
                               "fieldsV1": to_fields_v1(self.fields)}
        if self.subresource:
            out["subresource"] = self.subresource
        return out

    def same_slot(self, other: Entry) -> bool:
        return (self.manager, self.operation, self.subresource) == (
            other.manager, other.operation, other.subresource) and (
            self.operation == "Apply" or self.api_version == other.api_version)

    def who(self) -> str:
        """printManager in conflict.go (the identifier carries no time)."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == "Update":
            text += f" using {self.api_version}"
        return text


def _entries(obj: Obj | None) -> list[Entry]:
    raw = ((obj or {}).get("metadata") or {}).get("managedFields") or []
    return [Entry.parse(e) for e in raw if isinstance(e, dict)]


def _store_entries(obj: Obj, entries: list[Entry]) -> None:
    kept = [e.render() for e in entries if e.fields]
    if kept:
        obj["metadata"]["managedFields"] = kept
    else:
        obj["metadata"].pop("managedFields", None)


def record_update(rt: ResourceType, obj: Obj, old: Obj | None, writer: Writer,
                  now: float) -> None:
    """An Update operation: the writer takes the fields it changed."""
    type_name = root_type(rt)
    # A write that leaves managedFields out keeps the stored ones (managedfields.go).
    if old is not None and not (obj.get("metadata") or {}).get("managedFields") \
            and old["metadata"].get("managedFields"):
        obj["metadata"]["managedFields"] = clone(old["metadata"]["managedFields"])
    touched, gone = diff(old or {}, obj, type_name)
    if not touched and not gone:
        return
    entries = _entries(obj)
    mine = Entry(writer.manager, "Update", rt.api_version, rfc3339(now), set(),
                 writer.subresource)
    slot = next((e for e in entries if e.same_slot(mine)), None)
    if slot is None:
        entries.append(mine)
        slot = mine
    slot.time = mine.time
    for e in entries:
        if e is not slot:
            e.fields -= touched | gone
    slot.fields = (slot.fields | touched) - gone
    _store_entries(obj, entries)


def record(rt: ResourceType, obj: Obj, old: Obj | None, now: float) -> None:
    """Store admission hook: record the current request's Update on its own object."""
    writer = CURRENT.get()
    if writer is None or writer.manager == "" or writer.resource != rt.key:
        return
    m = obj.get("metadata") or {}
    # (a create by generateName has no name yet in the request: its own object then)
    if (m.get("namespace", "") if rt.namespaced else "") != writer.namespace \
            or (m.get("name") != writer.name and not (old is None and writer.name == "")):
        return
    record_update(rt, obj, old, writer, now)


# ---- apply --------------------------------------------------------------------------

def merge(live: Any, applied: Any, type_name: str | None, parent: str = "",
          field: str = "") -> Any:
    """Merge an applied configuration into the live value (typed/merge.go)."""
    if isinstance(applied, dict) and isinstance(live, dict) and type_name is not None \
            and type_name not in ATOMIC_TYPES:
        types = schema.types()
        if type_name.startswith("Dict["):
            inner: str | None = type_name[len("Dict[str, "):-1]
            out = dict(live)
            for k, v in applied.items():
                if v is not None:
                    out[k] = merge(live.get(k), v, inner if inner in types else None)
            return out
        if _is_struct(type_name):
            out = dict(live)
            for k, v in applied.items():
                if v is not None:
                    out[k] = merge(live.get(k), v, _child_type(type_name, k), type_name, k)
            return out
    if isinstance(applied, list) and isinstance(live, list) and type_name is not None \
            and type_name.startswith("List["):
        inner = type_name[5:-1]
        keys = LIST_KEYS.get((parent, field))
        if keys is not None:
            result = [clone(i) for i in live]
            for item in applied:
                if not isinstance(item, dict):
                    continue
                want = json.loads(_key_element(item, keys)[2:])
                pos = next((n for n, i in enumerate(result) if isinstance(i, dict) and all(
                    i.get(k, KEY_DEFAULTS.get(k)) == v for k, v in want.items())), None)
                if pos is None:
                    result.append(clone(item))
                else:
                    result[pos] = merge(result[pos], item, inner)
            return result
        if (parent, field) in SET_LISTS:
            return list(live) + [v for v in applied if v not in live]
    return clone(applied)


def _remove(obj: Any, path: Path) -> None:
    parent = value_at(obj, path[:-1]) if len(path) > 1 else obj
    if parent is _ABSENT:
        return
    el = path[-1]
    if el.startswith("f:") and isinstance(parent, dict):
        parent.pop(el[2:], None)
    elif el.startswith("k:") and isinstance(parent, list):
        target = value_at(obj, path)
        if target is not _ABSENT:
            parent.remove(target)
    elif el.startswith("v:") and isinstance(parent, list):
        v = json.loads(el[2:])
        if v in parent:
            parent.remove(v)


def conflict_error(conflicts: list[tuple[Entry, Path]]) -> st.StatusError:
    """conflict.go NewConflictError / getConflictMessage."""
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {e.who()}",
               "field": path_text(p)} for e, p in conflicts]
    if len(conflicts) == 1:
        e, p = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {e.who()}: {path_text(p)}"
    else:
        by_manager: dict[str, list[str]] = {}
        for e, p in conflicts:
            by_manager.setdefault(e.who(), []).append(path_text(p))
        lines = []
        for who in sorted(by_manager):
            lines.append(f"conflicts with {who}:")
            lines += [f"- {p}" for p in by_manager[who]]
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return st.StatusError(409, "Conflict", message, details={"causes": causes})


def _content(obj: Obj) -> Obj:
    out = dict(obj)
    out["metadata"] = {k: v for k, v in (obj.get("metadata") or {}).items()
                       if k != "managedFields"}
    return out


def apply(rt: ResourceType, live: Obj | None, applied: Obj, manager: str, *, force: bool,
          now: float) -> Obj:
    """The object an Apply of `applied` by `manager` makes of `live` (None: create)."""
    if not manager:
        raise st.bad_request("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: "
                             "Required value: is required for apply patch")
    if applied.get("apiVersion") != rt.api_version or applied.get("kind") != rt.kind:
        raise st.bad_request(
            f"the API version in the data ({applied.get('apiVersion')}) does not match the "
            f"expected API version ({rt.api_version})" if applied.get("apiVersion") !=
            rt.api_version else
            f"the kind in the data ({applied.get('kind')}) does not match the expected "
            f"kind ({rt.kind})")
    unknown = schema.unknown_fields(rt, applied)
    if unknown:
        raise st.bad_request(
            f"failed to create typed patch object ({rt.api_version}, Kind={rt.kind}): "
            f".{unknown[0]}: field not declared in schema")
    type_name = root_type(rt)
    applied_set = fieldset(applied, type_name)
    entries = _entries(live)
    mine = Entry(manager, "Apply", rt.api_version, rfc3339(now), applied_set)
    previous = next((e for e in entries if e.same_slot(mine)), None)
    base = clone(live) if live is not None else {}
    merged = merge(base, {k: v for k, v in applied.items() if k not in ("status",)},
                   type_name)
    others = [e for e in entries if e is not previous]
    before = [set(e.fields) for e in others]
    if live is not None:
        touched = changed(live, merged, applied_set,
                          maps_are_members=type_name == CUSTOM_ROOT)
        conflicts = [(e, p) for e in others for p in sorted(touched & e.fields)]
        if conflicts and not force:
            raise conflict_error(conflicts)
        for e in others:
            e.fields -= touched
        if previous is not None:
            owned_elsewhere = set().union(*(e.fields for e in others)) if others else set()
            # Outermost first (an item is found by its key fields, so they go with it);
            # kept when another manager owns something inside it.
            for p in sorted(previous.fields - applied_set - owned_elsewhere, key=len):
                if not any(q[:len(p)] == p for q in owned_elsewhere):
                    _remove(merged, p)
    entries = [*others, mine]
    merged.setdefault("metadata", {})
    if live is not None and previous is not None and previous.fields == applied_set \
            and _content(merged) == _content(live) \
            and [e.fields for e in others] == before:
        # Nothing changed: keep managedFields as they are, timestamps included, so the
        # write is a no-op (the fieldmanager ignores timestamp-only changes).
        merged["metadata"]["managedFields"] = clone(live["metadata"]["managedFields"])
        return merged  # type: ignore[no-any-return]
    merged["metadata"]["managedFields"] = [e.render() for e in entries if e.fields]
    merged["apiVersion"], merged["kind"] = rt.api_version, rt.kind
    return merged  # type: ignore[no-any-return]
