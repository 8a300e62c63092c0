"""Field selectors (?fieldSelector=spec.nodeName=n1,status.phase!=Succeeded).

Grammar from kubernetes/apimachinery pkg/fields/selector.go: comma-separated terms,
each `key=value`, `key==value` or `key!=value`. The real server accepts a fixed set of
keys per resource (pods: spec.nodeName, status.phase, metadata.name, ...); the lab
accepts any dotted path into the object, which is a superset. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drainsafe.lab.apiserver.status import bad_request


@dataclass(frozen=True)
class FieldTerm:
    path: tuple[str, ...]
    equals: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.path) == self.value) == self.equals


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(t.matches(obj) for t in self.terms)

    def value_of(self, path: str) -> str | None:
        """The value an equality term pins `path` to (for index look-ups), if any."""
        wanted = tuple(path.split("."))
        for t in self.terms:
            if t.path == wanted and t.equals:
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


def parse(text: str | None) -> FieldSelector:
    if not text or not text.strip():
        return EVERYTHING
    terms = []
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        op = next((o for o in ("!=", "==", "=") if o in term), None)
        key, _, value = term.partition(op) if op else ("", "", "")
        if not op or not key.strip():
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        terms.append(FieldTerm(tuple(key.strip().split(".")), op != "!=", value.strip()))
    return FieldSelector(tuple(terms))
