"""Kubernetes quantities (``10Gi``, ``512Mi``, ``1G``, ``1.5Gi``, ``1e9``) as a claim's config
writes memory limits, read exactly (no float rounding: ``Fraction``)."""

from __future__ import annotations

import re
from fractions import Fraction

from nvct.base.errors import NvctError

_FORM = re.compile(
    r"^([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
MIB = 1024 * 1024


class QuantityError(NvctError):
    """Not a Kubernetes quantity."""


def quantity(value: object) -> Fraction:
    """The number ``value`` (a quantity string, or a whole number as YAML gives one) stands for.

    Raises:
        QuantityError: not a quantity (negative ones included: no limit is negative).
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return Fraction(value)
    match = _FORM.match(value) if isinstance(value, str) else None
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity (e.g. 10Gi, 512Mi, 1G)")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * Fraction(1024) ** _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * Fraction(10) ** _DECIMAL[suffix]
    if suffix:
        return number * Fraction(10) ** int(suffix[1:])
    return number


def mebibytes(value: object) -> int:
    """``value`` in whole MiB, rounded down (MPS takes limits in MiB).

    Raises:
        QuantityError: not a quantity.
    """
    return int(quantity(value) // MIB)
