"""Random JSON values as OCI runtimes could write them into a state (nested annotations, text
from every Unicode plane, numbers, literals), for the native programs' scanners to be checked
against Python's json."""

from __future__ import annotations

import random
from collections.abc import Sequence

ALPHABET = ("a", "/", '"', "\\", "\n", "\x7f", "é", "\u2028", "\U0001f600")


class RandomJson:
    """``text()`` and ``value()`` drawn from ``rng``; ``words`` join the alphabet (the keys a
    scanner looks for), ``strings`` are values it may draw whole (paths)."""

    def __init__(
        self, rng: random.Random, words: Sequence[str] = (), strings: Sequence[str] = ()
    ) -> None:
        self.rng = rng
        self.alphabet = [*ALPHABET, *words]
        self.strings = list(strings)
        self.key = words[0] if words else "a"

    def text(self) -> str:
        return "".join(self.rng.choice(self.alphabet) for _ in range(self.rng.randrange(6)))

    def value(self, depth: int = 0) -> object:
        kinds = (3 if self.strings else 2) + (2 if depth < 4 else 0)
        kind = self.rng.randrange(kinds)
        if kind == 0:
            return self.text()
        if kind == 1:
            return self.rng.choice([0, -1, 2.5e-3, 10**20, True, False, None])
        if kind == 2 and self.strings:
            return self.rng.choice(self.strings)
        if kind == kinds - 2:
            return [self.value(depth + 1) for _ in range(self.rng.randrange(3))]
        return {
            self.text() or self.key: self.value(depth + 1) for _ in range(self.rng.randrange(3))
        }
