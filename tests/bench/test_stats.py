"""The goal bench's statistics: paired ratios, their bootstrap interval, and the verdict."""

from __future__ import annotations

import random

import pytest

from bench.stats import MET, MIN_ROUNDS, NOT_MET, UNDECIDED, paired


def rounds(ratio: float, spread: float, n: int, seed: int = 1) -> tuple[list[float], list[float]]:
    """Baseline times with slow spells (200-400 ms) and a variant ``ratio`` times each, give or
    take ``spread`` (uniform)."""
    draw = random.Random(seed)  # noqa: S311 - test data, not a secret
    base = [draw.choice((200.0, 400.0)) * draw.uniform(0.9, 1.1) for _ in range(n)]
    return [b * ratio * draw.uniform(1 - spread, 1 + spread) for b in base], base


def test_paired_ratio_cancels_the_machines_slow_spells() -> None:
    variant, base = rounds(1.03, 0.0, 40)
    found = paired(variant, base)
    # Every round's ratio is exactly 1.03 although the base time doubles between rounds.
    assert found.median == pytest.approx(1.03)
    assert found.low == pytest.approx(1.03) and found.high == pytest.approx(1.03)
    assert found.rounds == 40


def test_interval_holds_the_median_and_narrows_with_rounds() -> None:
    few = paired(*rounds(1.04, 0.05, 10))
    many = paired(*rounds(1.04, 0.05, 400))
    for found in (few, many):
        assert found.low <= found.median <= found.high
    assert many.high - many.low < (few.high - few.low) / 2
    assert many.low < 1.04 < many.high


def test_verdict_met_not_met_or_undecided() -> None:
    assert paired(*rounds(1.01, 0.01, 60)).verdict(1.05) == MET
    assert paired(*rounds(1.12, 0.01, 60)).verdict(1.05) == NOT_MET
    straddling = paired(*rounds(1.05, 0.08, 30))
    assert straddling.low < 1.05 < straddling.high
    assert straddling.verdict(1.05) == UNDECIDED
    assert straddling.as_dict(1.05)["verdict"] == UNDECIDED


def test_extra_ms_is_the_median_paired_difference() -> None:
    found = paired([210.0, 420.0, 215.0], [200.0, 400.0, 200.0])
    assert found.extra_ms == 15.0
    assert found.median == pytest.approx(1.05)


def test_resampling_is_seeded() -> None:
    data = rounds(1.04, 0.05, 25)
    assert paired(*data, seed=3) == paired(*data, seed=3)


@pytest.mark.parametrize(("variant", "base"), [([1.0], [1.0, 2.0]), ([1.0], [1.0])])
def test_bad_rounds_are_refused(variant: list[float], base: list[float]) -> None:
    with pytest.raises(ValueError, match="round"):
        paired(variant, base)


def test_too_few_rounds_decide_nothing() -> None:
    few = paired(*rounds(1.2, 0.01, MIN_ROUNDS - 1))
    assert few.low > 1.05  # every round far above the goal, and still
    assert few.verdict(1.05) == UNDECIDED
    assert paired(*rounds(1.2, 0.01, MIN_ROUNDS)).verdict(1.05) == NOT_MET
