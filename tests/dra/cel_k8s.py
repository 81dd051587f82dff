"""The Kubernetes CEL extensions DRA's selectors use, for cel-python (test-only).

cel-python implements the CEL language; Kubernetes adds libraries of its own. Those nvct's
example claims use are here, with Kubernetes' semantics:

- quantities (k8s.io/apiserver/pkg/cel/library/quantity.go): ``quantity('40Gi')``,
  ``isQuantity(s)``, ``q.compareTo(r)`` (-1, 0, 1), ``q.isGreaterThan(r)``,
  ``q.isLessThan(r)``, ``q.asInteger()``; a device's capacities are quantities;
- semantic versions (library/semver.go): ``semver('12.4.0')``, ``isSemver(s)``,
  ``v.compareTo(w)``, ``v.isGreaterThan(w)``, ``v.isLessThan(w)``, ``v.major()``,
  ``v.minor()``, ``v.patch()``; a device's ``version`` attributes are semantic versions.

Quantities are exact (fractions), as Kubernetes' are: ``quantity('1Gi')`` equals
``quantity('1073741824')`` and exceeds ``quantity('1G')``.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import total_ordering
from typing import Any

from celpy import celtypes

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|n|u|m|k|M|G|T|P|E|)$"
)
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"
)


class ExtensionError(ValueError):
    """A string the extension does not accept (Kubernetes: a CEL runtime error)."""


@total_ordering
class _Ordered:
    """A value compared by ``key`` (and only with its own kind)."""

    key: Any = None
    text = ""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.key == other.key  # type: ignore[attr-defined]

    def __lt__(self, other: _Ordered) -> bool:
        return bool(self.key < other.key)

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"{type(self).__name__.lower()}({self.text!r})"


class Quantity(_Ordered):
    def __init__(self, text: str) -> None:
        found = _QUANTITY.match(text)
        if not found:
            raise ExtensionError(f"invalid quantity {text!r}")
        number, suffix = Fraction(found.group(1)), found.group(2)
        if suffix in _BINARY:
            self.key = number * 1024 ** _BINARY[suffix]
        elif suffix[:1] in ("e", "E"):
            self.key = number * Fraction(10) ** int(suffix[1:])
        else:
            self.key = number * Fraction(10) ** _DECIMAL[suffix]
        self.text = text


class Semver(_Ordered):
    def __init__(self, text: str) -> None:
        found = _SEMVER.match(text)
        if not found:
            raise ExtensionError(f"invalid semver {text!r}")
        self.key = tuple(int(p) for p in found.groups())
        self.text = text


def _same_kind(a: Any, b: Any, method: str) -> None:
    if type(a) is not type(b) or not isinstance(a, (Quantity, Semver)):
        raise ExtensionError(f"no such overload: {method}({type(a).__name__}, {type(b).__name__})")


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    _same_kind(a, b, "compareTo")
    return celtypes.IntType((a > b) - (a < b))


def _greater(a: Any, b: Any) -> celtypes.BoolType:
    _same_kind(a, b, "isGreaterThan")
    return celtypes.BoolType(a > b)


def _less(a: Any, b: Any) -> celtypes.BoolType:
    _same_kind(a, b, "isLessThan")
    return celtypes.BoolType(a < b)


def _is(kind: type) -> Any:
    def check(text: Any) -> celtypes.BoolType:
        try:
            kind(str(text))
        except ExtensionError:
            return celtypes.BoolType(False)
        return celtypes.BoolType(True)

    return check


def _as_integer(q: Quantity) -> celtypes.IntType:
    if q.key.denominator != 1:
        raise ExtensionError(f"{q!r} is not an integer")
    return celtypes.IntType(int(q.key))


def _part(index: int) -> Any:
    return lambda v: celtypes.IntType(v.key[index])


FUNCTIONS: dict[str, Any] = {
    "quantity": lambda s: Quantity(str(s)),
    "isQuantity": _is(Quantity),
    "semver": lambda s: Semver(str(s)),
    "isSemver": _is(Semver),
    "compareTo": _compare_to,
    "isGreaterThan": _greater,
    "isLessThan": _less,
    "asInteger": _as_integer,
    "major": _part(0),
    "minor": _part(1),
    "patch": _part(2),
}


def attribute_value(typed: dict[str, Any]) -> Any:
    """A ResourceSlice attribute (``{"string": ...}``, ``{"int"}``, ``{"bool"}``,
    ``{"version"}``) as the CEL value a selector sees."""
    ((kind, value),) = typed.items()
    return {
        "string": lambda: celtypes.StringType(value),
        "int": lambda: celtypes.IntType(value),
        "bool": lambda: celtypes.BoolType(value),
        "version": lambda: Semver(value),
    }[kind]()
