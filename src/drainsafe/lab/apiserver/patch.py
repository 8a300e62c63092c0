"""PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge.

Strategic merge follows kubernetes/apimachinery pkg/util/strategicpatch/patch.go for
the built-in types the lab serves: maps merge recursively and null deletes a key;
lists named in MERGE_KEYS merge element-wise by their patchMergeKey (from the
`patchMergeKey` struct tags in kubernetes/api core/v1/types.go), other lists are
replaced; the directives `$patch` (replace/delete/merge), `$retainKeys`,
`$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>` are honoured.
Pure functions over JSON-shaped data.

Nulls: in both merge patches a null means "delete this key". A value the patch inserts
whole (a key the object did not have, a new item of a merge list, a replaced list or map)
keeps no null keys at any depth: the server never stores a null field. Upstream gets
there in two steps: strategicpatch mergeMap drops them with discardNullValuesFromPatch
(IgnoreUnmatchedNulls, set by StrategicMergeMapPatch), evanphx/json-patch MergePatch
with pruneNulls, and apiserver endpoints/handlers/patch.go then decodes the result into
the typed object, where a null field is simply unset. (Older apimachinery kept nulls in
appended list items and relied on that decode alone; the lab stores plain JSON, so it
has to drop them itself.)
"""

from __future__ import annotations

from typing import Any

from drainsafe.lab.apiserver.status import StatusError, bad_request

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# Lists that merge by key instead of being replaced (patchStrategy:"merge").
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "conditions": "type",
    "addresses": "type",
    "hostAliases": "ip",
    "podIPs": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
# Primitive lists with patchStrategy "merge": union instead of replace.
MERGE_PRIMITIVE = frozenset({"finalizers"})


def apply_patch(content_type: str, target: dict[str, Any], patch: Any) -> dict[str, Any]:
    ctype = content_type.split(";")[0].strip().lower()
    if ctype == JSON_PATCH:
        result = json_patch(target, patch)
    elif ctype == MERGE_PATCH:
        result = merge_patch(target, patch)
    elif ctype == STRATEGIC_MERGE_PATCH:
        result = strategic_merge(target, patch)
    elif ctype == APPLY_PATCH:
        # The API server sends apply patches to drainsafe.lab.apiserver.apply (server-side apply).
        raise StatusError(415, "UnsupportedMediaType",
                          "an apply patch is not a patch of this kind: see lab.apply")
    else:
        raise StatusError(415, "UnsupportedMediaType",
                          f"the body of the request was in an unknown format - accepted "
                          f"media types include: {JSON_PATCH}, {MERGE_PATCH}, "
                          f"{STRATEGIC_MERGE_PATCH}")
    if not isinstance(result, dict):
        raise bad_request("the patch did not produce an object")
    return result


# ---- RFC 7386 -----------------------------------------------------------------------

def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        # RFC 7386 takes a non-object value as it is; Kubernetes stores no nulls inside
        # it either (pruneNulls, then the typed decode), e.g. in a replaced list of objects.
        return _without_nulls(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# ---- RFC 6902 -----------------------------------------------------------------------

def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"json patch: invalid path {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for p in parts:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise StatusError(422, "Invalid", f"json patch: path {path!r} does not exist")
    return cur


def _clone(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _clone(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clone(x) for x in v]
    return v


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise bad_request("json patch: the body must be a list of operations")
    doc = _clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"json patch: invalid operation {op!r}")
        kind, path = op["op"], op["path"]
        parts = _pointer(path)
        if kind == "test":
            if _walk(doc, parts, path) != op.get("value"):
                raise StatusError(422, "Invalid", f"json patch: test failed at {path!r}")
            continue
        if kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            value = _clone(_walk(doc, src, op.get("from", "")))
            if kind == "move":
                doc = _remove(doc, src, op.get("from", ""))
            doc = _add(doc, parts, value, path)
        elif kind == "add":
            doc = _add(doc, parts, _clone(op.get("value")), path)
        elif kind == "remove":
            doc = _remove(doc, parts, path)
        elif kind == "replace":
            doc = _remove(doc, parts, path)
            doc = _add(doc, parts, _clone(op.get("value")), path)
        else:
            raise bad_request(f"json patch: unknown operation {kind!r}")
    return doc


def _add(doc: Any, parts: list[str], value: Any, path: str) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise StatusError(422, "Invalid", f"json patch: bad index in {path!r}")
    else:
        raise StatusError(422, "Invalid", f"json patch: path {path!r} does not exist")
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        return None
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        del parent[int(last)]
    else:
        raise StatusError(422, "Invalid", f"json patch: path {path!r} does not exist")
    return doc


# ---- strategic merge ----------------------------------------------------------------

_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


def strategic_merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return _clone(patch)
    return _merge_map(target if isinstance(target, dict) else {}, patch)


def _merge_map(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any] | None:
    directive = patch.get("$patch")
    body = {k: v for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    if directive == "replace":
        return dict(_strip(body))
    out = _clone(original)
    retain = body.pop("$retainKeys", None)
    orders = {k[len(_ORDER):]: body.pop(k) for k in list(body) if k.startswith(_ORDER)}
    deletes = {k[len(_DELETE_PRIMITIVE):]: body.pop(k)
               for k in list(body) if k.startswith(_DELETE_PRIMITIVE)}
    for key, value in body.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            merged = _merge_map(out.get(key) if isinstance(out.get(key), dict) else {}, value)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, list):
            out[key] = _merge_list(key, out.get(key), value)
        else:
            out[key] = value
    for key, values in deletes.items():
        if isinstance(out.get(key), list):
            out[key] = [v for v in out[key] if v not in values]
    for key, order in orders.items():
        if isinstance(out.get(key), list):
            out[key] = _ordered(key, out[key], order)
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return dict(out)


def _merge_key(field: str, items: list[Any]) -> str | None:
    if field == "ports":
        has_container_port = any(isinstance(i, dict) and "containerPort" in i for i in items)
        return "containerPort" if has_container_port else "port"
    return MERGE_KEYS.get(field)


def _merge_list(field: str, original: Any, patch: list[Any]) -> list[Any]:
    orig = original if isinstance(original, list) else []
    key = _merge_key(field, orig + patch)
    if field in MERGE_PRIMITIVE:
        return orig + [v for v in patch if v not in orig]
    if key is None or not all(isinstance(i, dict) for i in patch):
        return [_strip(i) for i in patch]
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [_strip(i) for i in patch if i.get("$patch") != "replace"]
    out = [_clone(i) for i in orig]
    for item in patch:
        ident = item.get(key)
        pos = next((n for n, o in enumerate(out)
                    if isinstance(o, dict) and o.get(key) == ident), None)
        if item.get("$patch") == "delete":
            if pos is not None:
                del out[pos]
            continue
        if pos is None:
            out.append(_strip(item))
        else:
            merged = _merge_map(out[pos], item)
            if merged is not None:
                out[pos] = merged
    return out


def _ordered(field: str, items: list[Any], order: list[Any]) -> list[Any]:
    key = _merge_key(field, items)
    if key is None:
        rank = {repr(v): n for n, v in enumerate(order)}
        return sorted(items, key=lambda v: rank.get(repr(v), len(rank)))
    rank = {repr(o.get(key)): n for n, o in enumerate(order) if isinstance(o, dict)}
    return sorted(items, key=lambda i: rank.get(repr(i.get(key)) if isinstance(i, dict)
                                                else "", len(rank)))


def _is_directive(key: str) -> bool:
    return key.startswith("$") and (key in ("$patch", "$retainKeys") or key.startswith(_ORDER)
                                    or key.startswith(_DELETE_PRIMITIVE))


def _strip(value: Any) -> Any:
    """A value inserted as a whole: without directives and without null keys, at any
    depth (discardNullValuesFromPatch; a null there has nothing to delete)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if v is not None and not _is_directive(k)}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _without_nulls(value: Any) -> Any:
    """A merge-patch value inserted as a whole, without null keys at any depth (pruneNulls)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
