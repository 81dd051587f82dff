"""The NVIDIA_REQUIRE_* language: grammar, comparisons, fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvct.base.errors import RequirementError
from nvct.request.requirements import Facts, evaluate, parse_requirement, version_key

HOST = Facts(cuda="12.4", driver="550.54.15", arch="9.0", brand="Nvidia", where="GPU 0")


@pytest.mark.parametrize(
    ("expression", "ok"),
    [
        ("cuda>=12.0", True),
        ("cuda>=12.5", False),
        ("cuda>=12.4", True),
        ("cuda=12.4.0", True),
        ("cuda!=12.4", False),
        ("cuda<13", True),
        ("driver>=550", True),
        ("driver>=555", False),
        ("driver>550.54.14", True),
        ("arch=9.0", True),
        ("arch>=8.0,arch<9.0", False),
        ("brand=nvidia", True),
        ("brand=tesla", False),
        ("brand!=tesla", True),
        ("cuda>=13.0 brand=nvidia", True),  # space = OR
        ("cuda>=12.0,driver>=560", False),  # comma = AND
        ("cuda>=13.0,brand=nvidia cuda>=12.0,driver>=550", True),
        ("", True),
    ],
)
def test_evaluate(expression: str, ok: bool) -> None:
    satisfied, detail = evaluate(parse_requirement(expression, source="NVIDIA_REQUIRE_X"), HOST)
    assert satisfied is ok, detail


def test_unknown_facts_pass() -> None:
    no_gpu = Facts(cuda="12.4", driver="550.54.15")
    assert evaluate(parse_requirement("arch>=10.0", source="R"), no_gpu)[0]


def test_failure_detail_names_values() -> None:
    ok, detail = evaluate(parse_requirement("cuda>=12.5", source="R"), HOST)
    assert not ok
    assert "cuda>=12.5" in detail and "12.4" in detail


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("cuda", "cannot parse"),
        ("cuda>>12", "dotted version"),
        ("gpu>=1", "unknown name 'gpu'"),
        ("brand>=tesla", "only supports"),
        ("cuda>=twelve", "dotted version"),
        ("cuda>=" + "1." * 3000, "characters long"),
    ],
)
def test_malformed(expression: str, message: str) -> None:
    with pytest.raises(RequirementError, match=message):
        parse_requirement(expression, source="NVIDIA_REQUIRE_CUDA")


def test_version_key_ignores_trailing_zeros() -> None:
    assert version_key("12.0.0") == version_key("12")
    assert version_key("12.10") > version_key("12.9")


versions = st.lists(st.integers(0, 999), min_size=1, max_size=4).map(
    lambda xs: ".".join(map(str, xs))
)


@given(versions, versions)
def test_comparison_operators_agree(a: str, b: str) -> None:
    facts = Facts(cuda=a, driver=None)
    results = {
        op: evaluate(parse_requirement(f"cuda{op}{b}", source="R"), facts)[0]
        for op in ("=", "!=", "<", "<=", ">", ">=")
    }
    assert results["="] != results["!="]
    assert results["<"] != results[">="]
    assert results[">"] != results["<="]
    assert results["<="] == (results["<"] or results["="])


@given(st.text(max_size=200))
def test_fuzz_only_requirement_errors(expression: str) -> None:
    try:
        req = parse_requirement(expression, source="R")
    except RequirementError:
        return
    evaluate(req, HOST)
