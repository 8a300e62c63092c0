"""Kubernetes resource quantities ("500m", "2", "16Gi", "1e3") as numbers.

Suffixes from kubernetes/apimachinery pkg/api/resource/quantity.go: decimal SI
(n u m k M G T P E), binary (Ki Mi Gi Ti Pi Ei), and decimal exponents.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}
_FORM = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


class QuantityError(ValueError):
    pass


def parse_quantity(value: str | int | float) -> Decimal:
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    m = _FORM.match(value.strip())
    if not m or m.group(2) not in _SUFFIX:
        raise QuantityError(f"invalid quantity {value!r}")
    try:
        return Decimal(m.group(1)) * _SUFFIX[m.group(2)]
    except InvalidOperation as exc:
        raise QuantityError(f"invalid quantity {value!r}") from exc
