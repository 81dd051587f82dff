"""A private tmpfs: another filesystem than the rest of a test's files (no hard links across)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size: str = "256m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (made here) for the block; unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "nvct-test", str(path)],
        check=True,
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)
