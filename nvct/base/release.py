"""The version a program's ``--version`` prints, for the checks that depend on it (engines'
configure refuses keys an older engine ignores; doctor judges what an engine can do)."""

from __future__ import annotations

import re

_RELEASE = re.compile(r"(?:\s|^)v?(\d+)\.(\d+)(\.\d+)?\S*")


def parse_release(text: str) -> tuple[tuple[int, int], str] | None:
    """((major, minor), the version as printed) of the first version in ``text``, e.g.
    ``containerd github.com/containerd/containerd 1.6.20~ds1 ...`` -> ((1, 6), "1.6.20~ds1")."""
    match = _RELEASE.search(text)
    if match is None:
        return None
    return (int(match.group(1)), int(match.group(2))), match.group(0).strip()
