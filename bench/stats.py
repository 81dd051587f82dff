"""Whether a paired comparison meets a goal: the median of per-round ratios and its bootstrap
95 % interval.

Each round of a bench runs every variant once, back to back, so the ratio of a variant to the
baseline within a round cancels the machine's slow spells; the median of those ratios is the
estimate, and resampling the rounds (with replacement) gives how far it could be off. A goal
``ratio <= limit`` is *met* when the whole interval is at or below the limit, *not met* when
it is wholly above it, and *undecided* when it straddles it (more rounds, or a quieter
machine, would decide it); with fewer than ``MIN_ROUNDS`` rounds every goal is undecided.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

MET, NOT_MET, UNDECIDED = "met", "not met", "undecided"
# Below this many rounds a bootstrap interval of a median is little more than the range of
# the samples (with 3 rounds, all three on one side of the goal happens 1 time in 8 by
# chance): no verdict.
MIN_ROUNDS = 10


@dataclass(frozen=True)
class Paired:
    """One variant against the baseline over the same rounds."""

    median: float  # median of the per-round ratios
    low: float  # bootstrap 95 % interval of that median
    high: float
    extra_ms: float  # median of the per-round differences
    rounds: int

    def verdict(self, limit: float) -> str:
        if self.rounds < MIN_ROUNDS:
            return UNDECIDED
        if self.high <= limit:
            return MET
        if self.low > limit:
            return NOT_MET
        return UNDECIDED

    def as_dict(self, limit: float | None = None) -> dict[str, object]:
        found: dict[str, object] = {
            "ratio": round(self.median, 4),
            "ci95": [round(self.low, 4), round(self.high, 4)],
            "extra_ms": round(self.extra_ms, 2),
            "rounds": self.rounds,
        }
        if limit is not None:
            found["goal"] = limit
            found["verdict"] = self.verdict(limit)
        return found


def paired(variant: list[float], base: list[float], resamples: int = 4000, seed: int = 0) -> Paired:
    """``variant`` against ``base``, sample i of each from round i.

    Raises:
        ValueError: the lists differ in length or hold fewer than two rounds.
    """
    if len(variant) != len(base):
        raise ValueError(f"{len(variant)} rounds of the variant against {len(base)} of the base")
    if len(base) < 2:
        raise ValueError("a paired comparison needs at least two rounds")
    ratios = [a / b for a, b in zip(variant, base, strict=True)]
    n = len(ratios)
    draw = random.Random(seed)  # noqa: S311 - resampling, not a secret
    medians = sorted(statistics.median(draw.choices(ratios, k=n)) for _ in range(max(resamples, 1)))
    return Paired(
        median=statistics.median(ratios),
        low=_percentile(medians, 0.025),
        high=_percentile(medians, 0.975),
        extra_ms=statistics.median(a - b for a, b in zip(variant, base, strict=True)),
        rounds=n,
    )


def _percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks of an ascending list."""
    at = q * (len(ordered) - 1)
    lower = int(at)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (at - lower)
