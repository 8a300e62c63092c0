"""Field selectors (?fieldSelector=spec.nodeName=n1,status.phase!=Succeeded).

Grammar from kubernetes/apimachinery pkg/fields/selector.go: comma-separated terms,
each `key=value`, `key==value` or `key!=value`; a backslash escapes `\\`, `,` and `=` in a
value (EscapeValue / UnescapeValue, splitTerms, splitTerm), which fields.Set.AsSelector
writes for any value that has them. The real server accepts a fixed set of keys per
resource (pods: spec.nodeName, status.phase, metadata.name, ...); the lab accepts any
dotted path into the object, which is a superset, except where a key is not the object's
path: an Event's `source` is source.component, or reportingComponent when that is empty
(kubernetes pkg/registry/core/event/strategy.go ToSelectableFields, read on the main
branch; its involvedObject.kind/.namespace/.name/.uid/.apiVersion/.resourceVersion/
.fieldPath, reason, reportingComponent and type are the object's paths, and the four
involvedObject keys kubectl sends are there in every release). `kubectl describe` lists a
cluster-scoped object's Events with `involvedObject.namespace=` (empty), which an
involvedObject without a namespace matches. Pure functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from drainsafe.lab.apiserver.status import bad_request

Reader = Callable[[Mapping[str, Any]], str]


def _event_source(obj: Mapping[str, Any]) -> str:
    return str((obj.get("source") or {}).get("component") or obj.get("reportingComponent")
               or "")


# resource plural -> selector key -> how the server reads it, where not the object's path
COMPUTED: dict[str, dict[str, Reader]] = {"events": {"source": _event_source}}


@dataclass(frozen=True)
class FieldTerm:
    path: tuple[str, ...]
    equals: bool
    value: str
    read: Reader | None = None  # a computed key (COMPUTED); None: the path

    def matches(self, obj: Mapping[str, Any]) -> bool:
        got = self.read(obj) if self.read is not None else field_value(obj, self.path)
        return (got == self.value) == self.equals


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(t.matches(obj) for t in self.terms)

    def value_of(self, path: str) -> str | None:
        """The value an equality term pins `path` to (for index look-ups), if any."""
        wanted = tuple(path.split("."))
        for t in self.terms:
            if t.path == wanted and t.equals and t.read is None:
                return t.value
        return None


EVERYTHING = FieldSelector()


def field_value(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    cur: Any = obj
    for part in path:
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def _split_terms(text: str) -> list[str]:
    """Split on commas not escaped by a backslash (the escapes stay for _split_term)."""
    terms, cur, escaped = [], "", False
    for ch in text:
        if escaped:
            cur += ch
            escaped = False
        elif ch == "\\":
            cur += ch
            escaped = True
        elif ch == ",":
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    """key, operator, unescaped value; None without an operator."""
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, _unescape(term[i + len(op):])
        i += 1
    return None


def _unescape(value: str) -> str:
    out, escaped = "", False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise bad_request(f"invalid field selector: invalid escape sequence '\\{ch}'")
            out += ch
            escaped = False
        elif ch == "\\":
            escaped = True
        else:
            out += ch
    if escaped:
        raise bad_request("invalid field selector: unterminated escape sequence")
    return out


def parse(text: str | None, resource: str = "") -> FieldSelector:
    if not text or not text.strip():
        return EVERYTHING
    computed = COMPUTED.get(resource, {})
    terms = []
    for raw in _split_terms(text):
        term = raw.strip()
        if not term:
            continue
        split = _split_term(term)
        if split is None or not split[0].strip():
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        key, op, value = split
        key = key.strip()
        terms.append(FieldTerm(tuple(key.split(".")), op != "!=", value.strip(),
                               computed.get(key)))
    return FieldSelector(tuple(terms))
