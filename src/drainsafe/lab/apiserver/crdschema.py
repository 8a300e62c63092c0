"""Structural schemas of custom resources: pruning, defaulting and validation.

What kube-apiserver's apiextensions-apiserver does to a custom resource with the
`openAPIV3Schema` of its CustomResourceDefinition version (k8s.io/apiextensions-apiserver
at v0.33, cited per function; the OpenAPI validator is k8s.io/kube-openapi
pkg/validation/validate and its messages pkg/validation/errors/schema.go):

- `prune` drops every field the schema does not specify (pkg/apiserver/schema/pruning/
  algorithm.go): unknown properties of an object go unless it says
  `x-kubernetes-preserve-unknown-fields: true`; `additionalProperties` specifies every
  key; at the root, and in an `x-kubernetes-embedded-resource`, apiVersion, kind and
  metadata stay. The paths returned are what field validation reports as
  `unknown field "spec.foo"` (Strict refuses, Warn warns).
- `default` applies `default` values (pkg/apiserver/schema/defaulting/algorithm.go
  Default): a property that is absent, or null where the schema is not nullable, gets a
  copy of its default, top-down, also under additionalProperties and array items; then
  `prune_nulls` removes the nulls left where nothing is nullable or defaulted
  (prunenulls.go PruneNonNullableNullsWithoutDefaults).
- `validate` checks the value (kube-openapi SchemaValidator: type, nullable, enum,
  minimum/maximum and their exclusive forms, multipleOf, minLength, maxLength, pattern,
  minItems, maxItems, required, minProperties, maxProperties, properties,
  additionalProperties, items, x-kubernetes-int-or-string) and words each failure as
  pkg/apiserver/validation/validation.go kubeOpenAPIResultToFieldErrors turns it into a
  field error: `spec.replicas: Invalid value: "string": spec.replicas in body must be of
  type integer: "string"`, `spec.mode: Unsupported value: "x": supported values: "a",
  "b"`, `spec.size: Required value`, `spec.replicas: Invalid value: -1: spec.replicas in
  body should be greater than or equal to 0`.

On an update, `ratchet` forgives the errors of values the update did not change
(CRDValidationRatcheting, beta and on by default since v1.30: pkg/apiserver/validation/
ratcheting.go), so a schema made stricter does not block unrelated writes.

Then `x-kubernetes-list-type` set and map lists must not repeat an item or a key
(pkg/apiserver/schema/listtype/validation.go): `spec.ports[1]: Duplicate value:
map[string]interface {}{"name":"http"}`, once per repeated value.

String formats (pkg/apiserver/validation/formats.go's supported set, checked as
kube-openapi pkg/validation/strfmt does): date-time, date, uuid (3, 4, 5), ipv4, ipv6,
cidr, mac, hostname, byte; a bad one is `spec.at: Invalid value: "x": spec.at in body
must be of type date-time: "x"`. Other formats are accepted unchecked, and hostnames
are checked as ASCII only (strfmt also takes Unicode letters).

Not checked: `allOf`/`anyOf`/`oneOf`/`not` (beyond the int-or-string pattern),
`x-kubernetes-validations` (CEL), and the order of several errors (upstream follows Go's
map order; here, the document's).
Pure functions over JSON-shaped data.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime as dt
import ipaddress
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from drainsafe.lab.apiserver.validation import (
    DUPLICATE,
    REQUIRED,
    TOO_LONG,
    TOO_MANY,
    TYPE_INVALID,
    FieldError,
    GoValue,
    go_quote,
    invalid,
    not_supported,
    required,
)

Schema = Mapping[str, Any]
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")
PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"
EMBEDDED = "x-kubernetes-embedded-resource"


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# ---- pruning ----------------------------------------------------------------------------

def prune(obj: dict[str, Any], schema: Schema | None) -> list[str]:
    """Remove the fields `schema` does not specify from a whole object; their paths."""
    gone: list[str] = []
    _prune(obj, schema, "", gone, root=True)
    return gone


def _prune(value: Any, schema: Schema | None, path: str, gone: list[str], *,
           root: bool = False) -> None:
    if schema is None or schema.get(INT_OR_STRING):
        return
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_meta = root or bool(schema.get(EMBEDDED))
        for key in list(value):
            if keep_meta and key in _ROOT_FIELDS:
                continue
            if key in props:
                _prune(value[key], props[key], _child(path, key), gone)
            elif isinstance(extra, Mapping):
                _prune(value[key], extra, _child(path, key), gone)
            elif extra is True or schema.get(PRESERVE):
                continue
            else:
                gone.append(_child(path, key))
                del value[key]
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for n, item in enumerate(value):
                _prune(item, items, f"{path}[{n}]", gone)


# ---- defaulting -------------------------------------------------------------------------

def _non_nullable_null(value: Any, schema: Schema | None) -> bool:
    return value is None and schema is not None and not schema.get("nullable")


def default(value: Any, schema: Schema | None) -> None:
    """Fill in defaults in place (algorithm.go Default)."""
    if schema is None:
        return
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties") or {}
        for key, prop in props.items():
            if "default" not in prop:
                continue
            if key not in value or _non_nullable_null(value[key], prop):
                value[key] = copy.deepcopy(prop["default"])
        extra = schema.get("additionalProperties")
        for key in list(value):
            if key in props:
                default(value[key], props[key])
            elif isinstance(extra, Mapping):
                if _non_nullable_null(value[key], extra) and "default" in extra:
                    value[key] = copy.deepcopy(extra["default"])
                default(value[key], extra)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for n, item in enumerate(value):
                if _non_nullable_null(item, items) and "default" in items:
                    value[n] = copy.deepcopy(items["default"])
                default(value[n], items)


def _field_schema(schema: Schema | None, key: str) -> Schema | None:
    if schema is None:
        return None
    props = schema.get("properties") or {}
    if key in props:
        return props[key]  # type: ignore[no-any-return]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def prune_nulls(value: Any, schema: Schema | None) -> None:
    """Remove nulls where the schema is neither nullable nor defaulted (prunenulls.go)."""
    if isinstance(value, dict):
        for key in list(value):
            sub = _field_schema(schema, key)
            if _non_nullable_null(value[key], sub) and sub is not None and "default" not in sub:
                del value[key]
            else:
                prune_nulls(value[key], sub)
    elif isinstance(value, list):
        items = schema.get("items") if schema is not None else None
        for item in value:
            prune_nulls(item, items if isinstance(items, Mapping) else None)


# ---- validation -------------------------------------------------------------------------

def json_type(value: Any) -> str:
    """The JSON type name kube-openapi infers for a decoded value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def go_number(value: float | int) -> str:
    """A float64 as Go's %v prints it (integral values without a fraction)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _type_ok(want: str, value: Any) -> bool:
    got = json_type(value)
    if got == want:
        return True
    if want == "number" and got == "integer":
        return True
    return want == "integer" and got == "number" and float(value).is_integer()


def validate(obj: Any, schema: Schema | None) -> list[FieldError]:
    """The field errors of a whole object against its version's schema."""
    errs: list[FieldError] = []
    if schema is not None:
        _validate(obj, schema, "", errs)
        _list_types(obj, schema, "", errs)
    return errs


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_MISSING = object()


def _at(obj: Any, path: str) -> Any:
    cur = obj
    for name, index in _PATH_PART.findall(path):
        if name and isinstance(cur, dict):
            cur = cur.get(name, _MISSING)
        elif index and isinstance(cur, list) and int(index) < len(cur):
            cur = cur[int(index)]
        else:
            return _MISSING
    return cur


def ratchet(errors: list[FieldError], new: Any, old: Any) -> list[FieldError]:
    """The errors an update still fails with: those whose value it changed. A missing
    required field is judged by its parent object; values inside lists are not
    correlated with the old object, so they are never forgiven (as upstream for
    atomic lists)."""
    kept = []
    for e in errors:
        path = e.field.rpartition(".")[0] if e.type == REQUIRED else e.field
        if "[" in e.field or _at(new, path) != _at(old, path):
            kept.append(e)
    return kept


def go_interface(value: Any) -> str:
    """A decoded JSON value as Go's %#v prints it inside an interface{}."""
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "interface {}(nil)"
    if isinstance(value, float):
        return go_number(value)
    if isinstance(value, dict):
        return "map[string]interface {}{" + ", ".join(
            f"{go_quote(k)}:{go_interface(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(go_interface(v) for v in value) + "}"
    return str(value)


def _repeated(values: list[Any]) -> list[int]:
    """validateListSet: the index of each value's second occurrence."""
    counts: dict[str, int] = {}
    out = []
    for n, v in enumerate(values):
        key = json.dumps(v, sort_keys=True)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] == 2:
            out.append(n)
    return out


def _list_types(value: Any, schema: Schema, path: str, errs: list[FieldError]) -> None:
    """ValidateListSetsAndMaps: no repeated item in a set, no repeated key in a map."""
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, Mapping) else None)
            if sub is not None:
                _list_types(item, sub, _child(path, key), errs)
        return
    if not isinstance(value, list):
        return
    kind = schema.get("x-kubernetes-list-type")
    if kind == "set":
        errs += [FieldError(DUPLICATE, f"{path}[{n}]", GoValue(go_interface(value[n])))
                 for n in _repeated(value)]
    elif kind == "map":
        keys = [str(k) for k in schema.get("x-kubernetes-list-map-keys") or []]
        found = [{k: item[k] for k in keys if k in item} if isinstance(item, dict) else {}
                 for item in value]
        if len(keys) == 1:  # the key's value alone, reported as {key: value}
            errs += [FieldError(DUPLICATE, f"{path}[{n}]", GoValue(go_interface(found[n])))
                     for n in _repeated([f.get(keys[0], _UNSET) for f in found])]
        else:
            errs += [FieldError(DUPLICATE, f"{path}[{n}]", GoValue(go_interface(found[n])))
                     for n in _repeated(found)]
    items = schema.get("items")
    if isinstance(items, Mapping):
        for n, item in enumerate(value):
            _list_types(item, items, f"{path}[{n}]", errs)


_UNSET = {"$unset": True}  # an item without the key: equal to other such items only


def _in_body(path: str, text: str) -> str:
    return f"{path} in body {text}"


def _validate(value: Any, schema: Schema, path: str, errs: list[FieldError]) -> None:
    if value is None:
        want = schema.get("type")
        if want and not schema.get("nullable"):
            errs.append(FieldError(TYPE_INVALID, path, "null", _in_body(
                path, f'must be of type {want}: "null"')))
        return
    if schema.get(INT_OR_STRING):
        if json_type(value) not in ("integer", "string"):
            got = json_type(value)
            errs.append(FieldError(TYPE_INVALID, path, got, _in_body(
                path, f'must be of type integer,string: "{got}"')))
        return
    want = schema.get("type")
    if want and not _type_ok(str(want), value):
        got = json_type(value)
        errs.append(FieldError(TYPE_INVALID, path, got, _in_body(
            path, f'must be of type {want}: "{got}"')))
        return
    if "enum" in schema and value not in schema["enum"]:
        errs.append(not_supported(path, value, [
            v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
            for v in schema["enum"]]))
    if isinstance(value, str):
        _validate_string(value, schema, path, errs)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(value, schema, path, errs)
    elif isinstance(value, list):
        _validate_array(value, schema, path, errs)
    elif isinstance(value, dict):
        _validate_object(value, schema, path, errs)


def _validate_string(value: str, schema: Schema, path: str, errs: list[FieldError]) -> None:
    max_len, min_len = schema.get("maxLength"), schema.get("minLength")
    if max_len is not None and len(value) > int(max_len):
        # field.TooLong (apimachinery v1.31): the value is not shown.
        errs.append(FieldError(TOO_LONG, path, "", f"may not be more than {int(max_len)} "
                               f"{'byte' if int(max_len) == 1 else 'bytes'}"))
    if min_len is not None and len(value) < int(min_len):
        errs.append(invalid(path, value, _in_body(path, f"should be at least {int(min_len)} "
                                                        "chars long")))
    pattern = schema.get("pattern")
    if pattern is not None and re.search(str(pattern), value) is None:
        errs.append(invalid(path, value, _in_body(path, f"should match '{pattern}'")))
    fmt = schema.get("format")
    check = _FORMATS.get(str(fmt).replace("-", "")) if fmt else None
    if check is not None and not check(value):
        errs.append(FieldError(TYPE_INVALID, path, value, _in_body(
            path, f"must be of type {fmt}: {go_quote(value)}")))


_DATE = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})$")


def _is_date(text: str) -> bool:
    """strfmt IsDate: time.Parse("2006-01-02"), so a real calendar day."""
    m = _DATE.match(text)
    if m is None:
        return False
    try:
        dt.date(*(int(g) for g in m.groups()))
    except ValueError:
        return False
    return True


_CLOCK = re.compile(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")


def _is_date_time(text: str) -> bool:
    """strfmt IsDateTime: a full-date, 't', then hh:mm:ss[.frac] and z or an offset."""
    parts = text.lower().split("t")
    if len(text) < 4 or len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _CLOCK.match(parts[1])
    return m is not None and m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _is_ip(text: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version or (
            version == 6 and ":" in text)
    except ValueError:
        return False


def _is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_interface(text)
    except ValueError:
        return False
    return "/" in text


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _matches(pattern: str) -> Callable[[str], bool]:
    rx = re.compile(pattern)
    return lambda text: rx.match(text) is not None


_HOSTNAME = (r"^(?=.{1,255}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
             r"(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$")
_MAC = r"^([0-9A-Fa-f]{2}[:-]){5,19}[0-9A-Fa-f]{2}$"
_FORMATS: dict[str, Callable[[str], bool]] = {
    "datetime": _is_date_time, "date": _is_date,
    "uuid": _matches(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"),
    "uuid3": _matches(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$"),
    "uuid4": _matches(
        r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"),
    "uuid5": _matches(
        r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"),
    "ipv4": lambda text: _is_ip(text, 4) and "." in text,
    "ipv6": lambda text: _is_ip(text, 6),
    "cidr": _is_cidr, "mac": _matches(_MAC), "hostname": _matches(_HOSTNAME),
    "byte": _is_base64,
}


def _validate_number(value: float, schema: Schema, path: str, errs: list[FieldError]) -> None:
    shown = int(value) if isinstance(value, float) and value.is_integer() else value
    maximum, minimum = schema.get("maximum"), schema.get("minimum")
    if maximum is not None:
        if schema.get("exclusiveMaximum") and value >= maximum:
            errs.append(invalid(path, shown, _in_body(
                path, f"should be less than {go_number(float(maximum))}")))
        elif value > maximum:
            errs.append(invalid(path, shown, _in_body(
                path, f"should be less than or equal to {go_number(float(maximum))}")))
    if minimum is not None:
        if schema.get("exclusiveMinimum") and value <= minimum:
            errs.append(invalid(path, shown, _in_body(
                path, f"should be greater than {go_number(float(minimum))}")))
        elif value < minimum:
            errs.append(invalid(path, shown, _in_body(
                path, f"should be greater than or equal to {go_number(float(minimum))}")))
    factor = schema.get("multipleOf")
    if factor and not math.isclose(value / factor, round(value / factor)):
        errs.append(invalid(path, shown, _in_body(
            path, f"should be a multiple of {go_number(float(factor))}")))


def _validate_array(value: list[Any], schema: Schema, path: str,
                    errs: list[FieldError]) -> None:
    lo, hi = schema.get("minItems"), schema.get("maxItems")
    if lo is not None and len(value) < int(lo):
        errs.append(invalid(path, len(value), _in_body(
            path, f"should have at least {int(lo)} items")))
    if hi is not None and len(value) > int(hi):
        errs.append(FieldError(TOO_MANY, path, len(value), f"must have at most {int(hi)} items"))
    items = schema.get("items")
    if isinstance(items, Mapping):
        for n, item in enumerate(value):
            _validate(item, items, f"{path}[{n}]", errs)


def _validate_object(value: dict[str, Any], schema: Schema, path: str,
                     errs: list[FieldError]) -> None:
    lo, hi = schema.get("minProperties"), schema.get("maxProperties")
    if lo is not None and len(value) < int(lo):
        errs.append(invalid(path, len(value), _in_body(
            path, f"should have at least {int(lo)} properties")))
    if hi is not None and len(value) > int(hi):
        errs.append(FieldError(TOO_MANY, path, len(value),
                               f"must have at most {int(hi)} items"))
    for key in schema.get("required") or []:
        if key not in value:
            errs.append(required(_child(path, str(key))))
    props: Mapping[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if path == "" and key in _ROOT_FIELDS:
            continue  # metadata is ObjectMeta, validated as such
        sub = props.get(key, extra if isinstance(extra, Mapping) else None)
        if sub is not None:
            _validate(item, sub, _child(path, key), errs)
