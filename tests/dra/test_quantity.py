"""Kubernetes quantities as a claim's MPS limits write them, read exactly."""

from __future__ import annotations

from fractions import Fraction

import pytest

from nvct.dra.quantity import QuantityError, mebibytes, quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10Gi", 10 * 2**30),
        ("512Mi", 512 * 2**20),
        ("1.5Gi", 3 * 2**29),
        ("1G", 10**9),
        ("1500M", 15 * 10**8),
        ("2k", 2000),
        ("1e9", 10**9),
        ("1E3", 1000),
        ("500m", Fraction(1, 2)),
        (".5Ki", 512),
        ("1024", 1024),
        (4096, 4096),
    ],
)
def test_quantities_are_exact(text: object, value: float) -> None:
    assert quantity(text) == value


def test_mebibytes_round_down() -> None:
    assert mebibytes("1G") == 953  # 10**9 bytes: 953.67 MiB
    assert mebibytes("40779Mi") == 40779
    assert mebibytes("1Ki") == 0


@pytest.mark.parametrize("text", ["10 Gi", "10GiB", "-1Gi", "Gi", "", "1.2.3", True, 1.5, -3])
def test_what_is_not_a_quantity_is_named(text: object) -> None:
    with pytest.raises(QuantityError, match="is not a quantity"):
        quantity(text)
