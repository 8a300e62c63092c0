"""Plain scalars resolved without PyYAML (scalars.py) exactly as PyYAML's SafeLoader resolves
and builds them."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_rsyaml import TRICKY

from drainsafe.check import scalars


def _pyyaml(value: str) -> tuple[str, Any]:
    """What PyYAML's own resolver and SafeConstructor make of a plain scalar: the value's
    type and repr (nan != nan), or the exception's type."""
    tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, value, (True, False))
    if tag not in ("tag:yaml.org,2002:str", "tag:yaml.org,2002:null",
                   "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int",
                   "tag:yaml.org,2002:float"):
        return "Unsupported", tag
    try:
        built = yaml.constructor.SafeConstructor().construct_object(
            yaml.ScalarNode(tag, value))
    except ValueError:
        return "ValueError", None
    return type(built).__name__, repr(built)


def _ours(value: str) -> tuple[str, Any]:
    scalars.CACHE.clear()  # built afresh, not the cached value of an earlier example
    try:
        built = scalars.plain(value)
    except scalars.Unsupported as exc:
        return "Unsupported", exc.args[0]
    except ValueError:
        return "ValueError", None
    return type(built).__name__, repr(built)


def test_the_types_are_tried_as_pyyaml_tries_them() -> None:
    """The same types, in the same order, for the same first characters (what each one
    reads is compared value by value below)."""
    def table(resolvers: dict[Any, list[tuple[str, Any]]]) -> dict[Any, list[str]]:
        return {first: [tag for tag, _ in entries] for first, entries in resolvers.items()}

    assert table(scalars.RESOLVERS) == table(yaml.resolver.Resolver.yaml_implicit_resolvers)


@pytest.mark.parametrize("value", [*TRICKY, "0b_", "0x_", "-.inf", "+.INF", "1:60", "0_7",
                                   "190:20:30", "-0b101", "6.8523015e+5", "1__0"])
def test_tricky_scalars_as_pyyaml_builds_them(value: str) -> None:
    assert _ours(value) == _pyyaml(value)


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="0123456789_-+.:eEbxXoOaAfFnNiItTrRuUyYsSlLZ~<=!&* \t", max_size=14))
@example("1_2:3_0.4_5")
@example("2001-12-14 21:59:43.10 -5")
@example("190:20:30.15")
@example("12345678901234567890:59")
def test_any_scalar_as_pyyaml_builds_it(value: str) -> None:
    assert _ours(value) == _pyyaml(value)


def test_nan_and_infinities_are_floats() -> None:
    assert math.isnan(scalars.plain(".NaN"))
    assert scalars.plain("-.inf") == -math.inf
