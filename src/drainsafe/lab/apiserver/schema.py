"""The field names of the served kinds, for server-side field validation.

kube-apiserver decodes a request body strictly against the Go types and reports each
field it does not know (sigs.k8s.io/json UnmarshalStrict: `unknown field "spec.foo"`,
list items as `containers[0]`); what it does with them depends on `fieldValidation`
(kubernetes/apiserver pkg/endpoints/handlers/create.go, update.go, patch.go):
Strict refuses the request (400), Warn (the default since v1.27) answers with a
`Warning: 299 - "unknown field ..."` header per field, Ignore says nothing.

The lab has no Go types; `schema.json` beside this module lists, per type, its JSON
field names and their types. It is derived from the typed models of the official
Kubernetes Python client (kubernetes-client/python, generated from the API's OpenAPI
document) by
`python -m drainsafe.lab.apiserver.schema > src/drainsafe/lab/apiserver/schema.json`, which
needs the `kubernetes` package (a dev dependency); the lab itself only reads the file.
Type names: "str", "int", "bool", "float", "datetime", "object" (anything:
IntOrString, RawExtension), "List[T]", "Dict[str, T]", or another type's name.
"""

from __future__ import annotations

import functools
import json
import pathlib
import re
import sys
from collections.abc import Iterator
from typing import Any

from drainsafe.lab.apiserver.discovery import RESOURCES, ResourceType

SCHEMA_FILE = pathlib.Path(__file__).with_name("schema.json")
_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")
_PRIMITIVES = frozenset({"str", "int", "bool", "float", "datetime", "date", "object",
                         "bytearray", "bytes"})


def model_name(rt: ResourceType) -> str:
    """The client's model class for a served kind (core Event is CoreV1Event)."""
    if rt.group == "" and rt.kind == "Event":
        return "CoreV1Event"
    return f"{rt.version.capitalize()}{rt.kind}"


@functools.cache
def _load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return data


def types() -> dict[str, dict[str, str]]:
    """Type name -> {JSON field name: type name}."""
    found: dict[str, dict[str, str]] = _load()["types"]
    return found


def unknown_fields(rt: ResourceType, obj: Any) -> list[str]:
    """The paths of the fields in `obj` that the kind does not have, in document order."""
    return [text for text, _ in _walk(types(), model_name(rt), obj, "", ())]


def drop_unknown_fields(rt: ResourceType, obj: Any) -> list[str]:
    """Remove the fields the kind does not have, as decoding into the Go type does;
    returns their paths."""
    return drop_unknown(model_name(rt), obj)


def drop_unknown(type_name: str, obj: Any, path: str = "") -> list[str]:
    """Remove the fields a value of `type_name` does not have (e.g. V1ObjectMeta under
    a custom resource's "metadata"); returns their paths, prefixed by `path`."""
    found = list(_walk(types(), type_name, obj, path, ()))
    for _, keys in reversed(found):
        parent = obj
        for k in keys[:-1]:
            parent = parent[k]
        del parent[keys[-1]]
    return [text for text, _ in found]


Key = str | int


def _walk(types: dict[str, dict[str, str]], type_name: str, value: Any, path: str,
          keys: tuple[Key, ...]) -> Iterator[tuple[str, tuple[Key, ...]]]:
    if value is None or type_name in _PRIMITIVES:
        return
    if m := _LIST.match(type_name):
        if isinstance(value, list):
            for n, item in enumerate(value):
                yield from _walk(types, m.group(1), item, f"{path}[{n}]", (*keys, n))
        return
    if m := _DICT.match(type_name):
        if isinstance(value, dict):
            for key, item in value.items():
                yield from _walk(types, m.group(1), item, f"{path}.{key}" if path else key,
                                 (*keys, key))
        return
    fields = types.get(type_name)
    if fields is None or not isinstance(value, dict):
        return
    for key, item in value.items():
        child = f"{path}.{key}" if path else key
        if key not in fields:
            yield child, (*keys, key)
        else:
            yield from _walk(types, fields[key], item, child, (*keys, key))


def generate() -> dict[str, Any]:
    """Walk the client's models from the served kinds (needs `kubernetes`)."""
    from kubernetes import client

    types: dict[str, dict[str, str]] = {}
    pending = [model_name(rt) for rt in RESOURCES]
    while pending:
        name = pending.pop()
        if name in types or name in _PRIMITIVES:
            continue
        if m := (_LIST.match(name) or _DICT.match(name)):
            pending.append(m.group(1))
            continue
        model = getattr(client, name)
        types[name] = {model.attribute_map[attr]: kind
                       for attr, kind in sorted(model.openapi_types.items())}
        pending.extend(types[name].values())
    version = getattr(sys.modules["kubernetes"], "__version__", "?")
    return {"source": f"kubernetes-client/python {version} models",
            "types": dict(sorted(types.items()))}


if __name__ == "__main__":
    json.dump(generate(), sys.stdout, indent=0, sort_keys=False)
    sys.stdout.write("\n")
