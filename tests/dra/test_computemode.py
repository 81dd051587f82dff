"""A GPU's compute mode is the GPU's: a claim needing another mode than the one another
prepared claim holds it in is refused before nvidia-smi runs, in one line naming both; a
claim needing the mode it is held in inherits the mode it had before the first."""

from __future__ import annotations

import pytest

from nvct.dra.claim import ClaimError
from nvct.dra.computemode import ComputeModes

HELD = {"GPU-a": ("GPU-a", "EXCLUSIVE_PROCESS", "PROHIBITED")}


def test_a_gpu_held_in_another_mode_is_refused_in_one_line() -> None:
    modes = ComputeModes("no nvidia-smi under /drv")  # never reached
    with pytest.raises(ClaimError) as raised:
        modes.claim({"GPU-a": "DEFAULT"}, HELD, what="claim ns/c (u)")
    line = raised.value.one_line()
    assert "GPU GPU-a is in compute mode EXCLUSIVE_PROCESS for another prepared claim" in line
    assert "this claim needs DEFAULT (fix: " in line and "\n" not in line


def test_a_gpu_held_in_the_same_mode_keeps_the_mode_it_had_before() -> None:
    modes = ComputeModes("no nvidia-smi under /drv")  # nothing to read or set
    wanted = {"GPU-a": "EXCLUSIVE_PROCESS"}
    assert modes.claim(wanted, HELD, what="c") == (HELD["GPU-a"],)
    modes.give_back([HELD["GPU-a"]], {"GPU-a"}, what="c")  # another claim holds it: untouched
