"""YAML 1.1 plain scalars resolved and built as PyYAML's SafeLoader does, without PyYAML.

Check resolves every distinct plain scalar it reads: rsyaml's gate compares PyYAML's value
with yaml-rs's, and a fix snippet quotes a string that would read back as another type.
Importing PyYAML for that (its package imports its reader, scanner, parser, emitter...) was
the largest part of check's start-up, while an input yaml-rs reads needs nothing else of it;
PyYAML is now imported only where it reads (fastyaml.py, the fallback) or writes.

The formats are those of the YAML 1.1 type repository (yaml.org/type/ bool, int, float,
null, merge, timestamp, value), as PyYAML 6.0 resolves them (yaml/resolver.py): its booleans
leave out y/Y/n/N, its floats need a digit before the point or after it, a space may stand
before a timestamp's zone, and a resolver is tried only for the first characters it lists,
in its order. tests/check/test_scalars.py checks the tags, their order and first characters
against PyYAML's table, and every value built (or refused) against PyYAML's own, over
generated scalars.
"""

from __future__ import annotations

import re
from typing import Any


class Unsupported(Exception):
    """A construct the fast paths leave to PyYAML's own constructor."""


_DIGITS = "0123456789"
_FORMATS: tuple[tuple[str, str, str | tuple[str, ...]], ...] = (
    # (type, its plain forms, the first characters PyYAML tries it for)
    ("bool", r"yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF",
     "yYnNtTfFoO"),
    ("float", r"[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?"  # base 10
              r"|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
              r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*"  # base 60
              r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
     "-+." + _DIGITS),
    ("int", r"[-+]?0b[01_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+"
            r"|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+",
     "-+" + _DIGITS),
    ("merge", r"<<", "<"),
    ("null", r"~|null|Null|NULL|", ("~", "n", "N", "")),  # "": the empty scalar
    ("timestamp", r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
                  r"|[0-9]{4}-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9]{2}:[0-9]{2}"
                  r"(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9]{2})?))?",
     _DIGITS),
    ("value", r"=", "="),
    ("yaml", r"!|&|\*", "!&*"),
)

RESOLVERS: dict[str, list[tuple[str, re.Pattern[str]]]] = {}
"""By first character, as PyYAML keys them ("": the empty scalar, which is null)."""
for _type, _forms, _firsts in _FORMATS:
    for _first in _firsts:
        RESOLVERS.setdefault(_first, []).append(
            (f"tag:yaml.org,2002:{_type}", re.compile(f"(?:{_forms})$")))

_BOOLS = {"yes": True, "no": False, "true": True, "false": False, "on": True, "off": False}


def _signed(text: str) -> tuple[int, str]:
    """The sign and the rest, underscores dropped (digit separators in YAML 1.1)."""
    text = text.replace("_", "")
    if text[:1] in "+-":
        return (-1 if text[0] == "-" else 1), text[1:]
    return 1, text


def _sexagesimal(parts: list[Any]) -> Any:
    """`1:30:00` as 5400: each part a digit in base 60, summed from the last (the order
    PyYAML adds floats in)."""
    return sum(part * 60 ** k for k, part in enumerate(reversed(parts)))


def _int(text: str) -> int:
    sign, digits = _signed(text)
    if ":" in digits:
        return sign * int(_sexagesimal([int(part) for part in digits.split(":")]))
    base = {"0b": 2, "0x": 16}.get(digits[:2])
    if base is not None:
        return sign * int(digits[2:], base)
    return sign * int(digits, 8 if digits[:1] == "0" and digits != "0" else 10)


_INF = float("inf")
_NAN = -_INF / _INF  # the NaN PyYAML builds (its sign bit set)


def _float(text: str) -> float:
    sign, digits = _signed(text.lower())
    if digits == ".inf":
        return sign * _INF
    if digits == ".nan":
        return _NAN
    if ":" in digits:
        return sign * float(_sexagesimal([float(part) for part in digits.split(":")]))
    return sign * float(digits)


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
