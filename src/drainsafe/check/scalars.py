"""YAML 1.1 plain scalars resolved and built as PyYAML's SafeLoader does, without PyYAML.

Check resolves every distinct plain scalar it reads: rsyaml's gate compares PyYAML's value
with yaml-rs's, and a fix snippet quotes a string that would read back as another type.
Importing PyYAML for that (its package imports its reader, scanner, parser, emitter...) was
the largest part of check's start-up, while an input yaml-rs reads needs nothing else of it;
PyYAML is now imported only where it reads (fastyaml.py, the fallback) or writes.

The table is PyYAML 6.0's `Resolver.yaml_implicit_resolvers` (yaml/resolver.py) and the
builders its `SafeConstructor.construct_yaml_bool/int/float` (yaml/constructor.py), copied;
tests/check/test_scalars.py asserts the table equals PyYAML's and compares every value built.
"""

from __future__ import annotations

import re
from typing import Any


class Unsupported(Exception):
    """A construct the fast paths leave to PyYAML's own constructor."""


_IMPLICIT: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = (
    ("tag:yaml.org,2002:bool", re.compile(r'''^(?:yes|Yes|YES|no|No|NO
                    |true|True|TRUE|false|False|FALSE
                    |on|On|ON|off|Off|OFF)$''', re.X), tuple("yYnNtTfFoO")),
    ("tag:yaml.org,2002:float", re.compile(r'''^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$''', re.X), tuple("-+0123456789.")),
    ("tag:yaml.org,2002:int", re.compile(r'''^(?:[-+]?0b[0-1_]+
                    |[-+]?0[0-7_]+
                    |[-+]?(?:0|[1-9][0-9_]*)
                    |[-+]?0x[0-9a-fA-F_]+
                    |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$''', re.X), tuple("-+0123456789")),
    ("tag:yaml.org,2002:merge", re.compile(r'^(?:<<)$'), tuple("<")),
    ("tag:yaml.org,2002:null", re.compile(r'''^(?: ~
                    |null|Null|NULL
                    | )$''', re.X), ("~", "n", "N", "")),
    ("tag:yaml.org,2002:timestamp", re.compile(r'''^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]
                    |[0-9][0-9][0-9][0-9] -[0-9][0-9]? -[0-9][0-9]?
                     (?:[Tt]|[ \t]+)[0-9][0-9]?
                     :[0-9][0-9] :[0-9][0-9] (?:\.[0-9]*)?
                     (?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$''', re.X),
     tuple("0123456789")),
    ("tag:yaml.org,2002:value", re.compile(r'^(?:=)$'), tuple("=")),
    ("tag:yaml.org,2002:yaml", re.compile(r'^(?:!|&|\*)$'), tuple("!&*")),
)

RESOLVERS: dict[str, list[tuple[str, re.Pattern[str]]]] = {}
"""By first character, as PyYAML keys them ("": the empty scalar, which is null)."""
for _tag, _regexp, _first in _IMPLICIT:
    for _char in _first:
        RESOLVERS.setdefault(_char, []).append((_tag, _regexp))

_BOOLS = {"yes": True, "no": False, "true": True, "false": False, "on": True, "off": False}


def _int(value: str) -> int:
    value = value.replace("_", "")
    sign = +1
    if value[0] == "-":
        sign = -1
    if value[0] in "+-":
        value = value[1:]
    if value == "0":
        return 0
    if value.startswith("0b"):
        return sign * int(value[2:], 2)
    if value.startswith("0x"):
        return sign * int(value[2:], 16)
    if value[0] == "0":
        return sign * int(value, 8)
    if ":" in value:
        total = 0
        base = 1
        for digit in reversed([int(part) for part in value.split(":")]):
            total += digit * base
            base *= 60
        return sign * total
    return sign * int(value)


_INF = float("inf")
_NAN = -_INF / _INF  # PyYAML's quiet NaN


def _float(value: str) -> float:
    value = value.replace("_", "").lower()
    sign = +1
    if value[0] == "-":
        sign = -1
    if value[0] in "+-":
        value = value[1:]
    if value == ".inf":
        return sign * _INF
    if value == ".nan":
        return _NAN
    if ":" in value:
        total = 0.0
        base = 1
        for digit in reversed([float(part) for part in value.split(":")]):
            total += digit * base
            base *= 60
        return sign * total
    return sign * float(value)


_BUILDERS: dict[str, Any] = {
    "tag:yaml.org,2002:null": lambda value: None,
    "tag:yaml.org,2002:bool": lambda value: _BOOLS[value.lower()],
    "tag:yaml.org,2002:int": _int,
    "tag:yaml.org,2002:float": _float,
}
_STR = "tag:yaml.org,2002:str"
CACHE: dict[str, Any] = {}
"""Values of short plain scalars already built (names and numbers recur)."""
_CACHE_LIMIT = 50_000
_MISSING = object()


def plain(value: str) -> Any:
    """The value of a plain scalar as PyYAML's SafeLoader builds it; Unsupported for
    timestamps, merge keys and `=` (PyYAML's own constructors); ValueError where PyYAML
    raises it (`0b_`)."""
    cached = CACHE.get(value, _MISSING)
    if cached is not _MISSING:
        return cached
    tag = _STR
    for candidate, regexp in RESOLVERS.get(value[:1], ()):
        if regexp.match(value):
            tag = candidate
            break
    if tag == _STR:
        result: Any = value
    else:
        build = _BUILDERS.get(tag)
        if build is None:
            raise Unsupported(tag)
        result = build(value)
    if len(CACHE) < _CACHE_LIMIT and len(value) < 64:
        CACHE[value] = result
    return result
