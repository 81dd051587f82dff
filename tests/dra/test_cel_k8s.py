"""The Kubernetes CEL extensions of the test allocator (tests/dra/cel_k8s.py), evaluated by
cel-python as selectors are: quantities and semantic versions with Kubernetes' semantics."""

from __future__ import annotations

from typing import Any

import pytest

celpy = pytest.importorskip("celpy")

from tests.dra.cel_k8s import FUNCTIONS, ExtensionError, Quantity, Semver  # noqa: E402


def cel(expression: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression), functions=FUNCTIONS).evaluate({})


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("40Gi", 40 * 2**30),
        ("81559Mi", 81559 * 2**20),
        ("1G", 10**9),
        ("1.5k", 1500),
        ("500m", 0.5),
        ("1e3", 1000),
        ("12", 12),
        (".5Ki", 512),
    ],
)
def test_quantities_are_exact_numbers(text: str, value: float) -> None:
    assert Quantity(text).key == value


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("quantity('1Gi').compareTo(quantity('1073741824')) == 0", True),
        ("quantity('1Gi').compareTo(quantity('1G')) == 1", True),
        ("quantity('81559Mi').compareTo(quantity('80Gi')) == -1", True),  # an "80GB" H100
        ("quantity('80Gi').isGreaterThan(quantity('40Gi'))", True),
        ("quantity('40Gi').isLessThan(quantity('40Gi'))", False),
        ("quantity('2Ki').asInteger() == 2048", True),
        ("isQuantity('40Gi') && !isQuantity('40 GiB')", True),
        ("semver('9.0.0').compareTo(semver('8.0.0')) == 1", True),
        ("semver('12.4.0').compareTo(semver('12.10.0')) == -1", True),  # not string order
        ("semver('550.54.15').isGreaterThan(semver('535.0.0'))", True),
        ("semver('8.9.0').isLessThan(semver('8.9.0'))", False),
        ("semver('8.9.1').major() == 8 && semver('8.9.1').minor() == 9", True),
        ("semver('8.9.1').patch() == 1", True),
        ("isSemver('1.2.3') && !isSemver('1.2') && !isSemver('01.2.3')", True),
    ],
)
def test_the_extensions_in_cel(expression: str, result: bool) -> None:
    assert bool(cel(expression)) is result


@pytest.mark.parametrize(
    "expression",
    [
        "quantity('forty')",
        "semver('12.4')",
        "quantity('1Gi').compareTo(semver('1.0.0'))",
        "quantity('500m').asInteger()",
    ],
)
def test_what_kubernetes_refuses_is_an_error_not_false(expression: str) -> None:
    with pytest.raises(celpy.CELEvalError) as raised:
        cel(expression)
    assert ExtensionError.__name__ in str(raised.value)


def test_versions_order_by_number() -> None:
    assert Semver("12.10.0") > Semver("12.4.0") and Semver("1.0.0") == Semver("1.0.0")
