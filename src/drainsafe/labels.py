"""Label selectors: the LabelSelector object form and the string form of ?labelSelector=.

Semantics from kubernetes/apimachinery pkg/labels (string form) and
pkg/apis/meta/v1 LabelSelector (matchLabels AND matchExpressions; In, NotIn, Exists,
DoesNotExist). Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Labels = Mapping[str, str]


class SelectorError(ValueError):
    """A selector that the API server would reject."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist (=, == and != map onto In/NotIn)
    values: tuple[str, ...] = ()

    def matches(self, labels: Labels) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        raise SelectorError(f"unknown operator {self.operator!r}")


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Labels | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


EVERYTHING = Selector()


def from_label_selector(obj: Mapping[str, Any] | None) -> Selector:
    """A metav1.LabelSelector object (matchLabels + matchExpressions)."""
    if not obj:
        return EVERYTHING
    reqs = [Requirement(k, "In", (str(v),)) for k, v in (obj.get("matchLabels") or {}).items()]
    for expr in obj.get("matchExpressions") or []:
        op = expr.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise SelectorError(f"matchExpressions: unknown operator {op!r}")
        values = tuple(str(v) for v in expr.get("values") or ())
        if op in ("In", "NotIn") and not values:
            raise SelectorError(f"matchExpressions: {op} on {expr.get('key')!r} needs values")
        reqs.append(Requirement(str(expr.get("key")), op, values))
    return Selector(tuple(reqs))


# Matched with re.match (compiled at first use, then from re's cache): drainsafe check
# imports this module for its objects' selectors, never parses the string form, and
# compiling both was ~0.5 ms of its start-up.
_SET = r"^\s*(!)?\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$"
_EQ = r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)\s*$"


def parse(text: str | None) -> Selector:
    """The string form, e.g. 'app=web,tier!=db,env in (a,b),!legacy'."""
    if not text or not text.strip():
        return EVERYTHING
    return Selector(tuple(_parse_term(term) for term in _split_terms(text)))


def _split_terms(text: str) -> Sequence[str]:
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _parse_term(term: str) -> Requirement:
    if m := re.match(_EQ, term):
        key, op, value = m.groups()
        return Requirement(key, "NotIn" if op == "!=" else "In", (value,))
    if m := re.match(_SET, term):
        bang, key, op, values = m.groups()
        if op:
            if bang:
                raise SelectorError(f"invalid selector term {term.strip()!r}")
            vals = tuple(v.strip() for v in values.split(",") if v.strip())
            return Requirement(key, "NotIn" if op == "notin" else "In", vals)
        return Requirement(key, "DoesNotExist" if bang else "Exists")
    raise SelectorError(f"invalid selector term {term.strip()!r}")


def format_selector(labels: Labels) -> str:
    """matchLabels as the string form, for ?labelSelector=."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
