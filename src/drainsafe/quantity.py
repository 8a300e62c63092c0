"""Kubernetes resource quantities ("500m", "2", "16Gi", "1e3") as numbers, read as the API
server reads them.

The grammar is kubernetes/apimachinery pkg/api/resource/quantity.go (parseQuantityString
and ParseQuantity, commit 357557a6), followed character by character:

    <quantity>     ::= <sign>? <digits>? ("." <digits>?)? <suffix>
    <suffix>       ::= "" | n | u | m | k | M | G | T | P | E      (decimal SI)
                     | Ki | Mi | Gi | Ti | Pi | Ei                 (binary SI)
                     | (e | E) <sign>? <digits>                    (decimal exponent)

which admits a few forms people would not write ("5.", ".5", "+1", even "-" and ".", both
zero) and refuses the rest ("abc", "1.2.3", "1 Gi", "0x10", "1e", "2gi", ""). A manifest
value reaches ParseQuantity through Quantity.UnmarshalJSON: a JSON string with its
surrounding white space trimmed (strings.TrimSpace), or a JSON number as written; true,
false, lists and mappings are refused, null is unset.

What the API server then validates for a container's requests and limits
(kubernetes/kubernetes pkg/apis/core/validation/validation.go ValidateResourceQuantityValue):
a quantity >= 0, and a whole number for extended resources (pkg/apis/core/helper
IsIntegerResourceName / IsExtendedResourceName: a name with a `/` outside `kubernetes.io/`,
not starting `requests.`), e.g. `nvidia.com/gpu`.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation, localcontext
from functools import lru_cache

_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
               "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SCAN = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
"""parseQuantityString's scan: sign, numerator, denominator, then suffix characters, an
optional sign and digits; a string it does not consume whole is ErrFormatWrong."""
_EXPONENT = re.compile(r"[eE][+-]?[0-9]+")
_INT64 = 2**63
_GO_SPACE = " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007" \
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
"""What strings.TrimSpace trims (unicode.IsSpace)."""


class QuantityError(ValueError):
    pass


def parse_quantity(value: str | int | float) -> Decimal:
    """The quantity's value; QuantityError when the API server would refuse it."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):  # no JSON number spells it
            raise QuantityError(f"invalid quantity {value!r}")
        return Decimal(repr(value))
    return _parse(value.strip(_GO_SPACE))


@lru_cache(maxsize=4096)  # manifests repeat a few quantities ("1", "64Gi") many times
def _parse(text: str) -> Decimal:
    scan = _SCAN.fullmatch(text)
    if not text or scan is None:
        raise QuantityError(f"invalid quantity {text!r}")
    sign, whole, fraction, suffix = scan.groups()
    if suffix in _DECIMAL_SI:
        base, exponent = 10, _DECIMAL_SI[suffix]
    elif suffix in _BINARY_SI:
        base, exponent = 2, _BINARY_SI[suffix]
    elif _EXPONENT.fullmatch(suffix) and -_INT64 <= int(suffix[1:]) < _INT64:
        base, exponent = 10, int(suffix[1:])  # strconv.ParseInt(suffix[1:], 10, 64)
    else:
        raise QuantityError(f"invalid quantity {text!r}: unknown suffix {suffix!r}")
    digits = f"{sign}{whole or '0'}.{fraction or '0'}"
    try:
        if base == 10:  # from text: no context limits on the exponent
            return Decimal(f"{digits}E{exponent}")
        with localcontext() as exact:
            exact.prec = 100
            scaled: Decimal = Decimal(digits) * (2 ** exponent)
            return scaled
    except InvalidOperation as exc:  # pragma: no cover - the scan admits only digits
        raise QuantityError(f"invalid quantity {text!r}") from exc


def is_integer_resource(name: str) -> bool:
    """An extended resource (nvidia.com/gpu, ...), which the API server takes only as a whole
    number (module docstring)."""
    native = "/" not in name or "kubernetes.io/" in name
    return not native and not name.startswith("requests.")


def resource_quantity_problem(name: str, value: object) -> str | None:
    """Why the API server refuses `value` as the quantity of resource `name` in a
    container's requests or limits; None when it takes it (or it is unset)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"expected a quantity (\"1\", \"500m\", \"16Gi\"), got {_shown(value)}"
    try:
        amount = parse_quantity(value)
    except QuantityError:
        return f"invalid quantity {_shown(value)} (expected e.g. \"1\", \"500m\", \"16Gi\")"
    if amount < 0:
        return f"must be greater than or equal to 0, got {_shown(value)}"
    if is_integer_resource(name) and amount != amount.to_integral_value():
        return f"must be a whole number for an extended resource, got {_shown(value)}"
    return None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
