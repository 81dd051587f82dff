"""nvct.base.fastjson (the stdlib's C JSON codec without json's import cost) agrees with json."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvct.base import fastjson

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=25,
)


@given(VALUES)
def test_dumps_is_json_compact(value: Any) -> None:
    assert fastjson.dumps(value) == json.dumps(value, separators=(",", ":"))


@given(VALUES, st.sampled_from(["", " ", "\n\t", "\r\n  "]))
def test_loads_round_trips(value: Any, pad: str) -> None:
    text = pad + json.dumps(value, indent=1) + pad
    assert fastjson.loads(text) == json.loads(text)
    assert fastjson.loads(text.encode()) == json.loads(text)


@given(st.text(max_size=30))
def test_loads_accepts_and_refuses_what_json_does(text: str) -> None:
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            fastjson.loads(text)
        return
    got = fastjson.loads(text)
    assert got == expected or (isinstance(got, float) and math.isnan(got))


@pytest.mark.parametrize("text", ["", "   ", "{", "[1,]", "[1] 2", '{"a" 1}', "nul", "\ufeff{}"])
def test_malformed_raise_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        fastjson.loads(text)


def test_default_converts_unknown_types_and_without_it_they_are_refused() -> None:
    assert fastjson.dumps({"p": {1, 2}.__class__}, default=str) == '{"p":"<class \'set\'>"}'
    with pytest.raises(TypeError, match="not JSON serializable"):
        fastjson.dumps({"x": object()})


def test_invalid_utf8_bytes_raise_value_error() -> None:
    with pytest.raises(ValueError):
        fastjson.loads(b'{"a": "\xff"}')


def test_errors_without_json_loaded() -> None:
    """The shim runs without json imported; _json alone fails with SystemError on bad input."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from nvct.base import fastjson\n"
        "for bad in ('', '{', '[1,]', 'not json', '[1] 2'):\n"
        "    try:\n"
        "        fastjson.loads(bad)\n"
        "    except ValueError as err:\n"
        "        print(type(err).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["JSONDecodeError"] * 4 + ["ValueError"], out.stderr
