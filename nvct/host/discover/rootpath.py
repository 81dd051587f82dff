"""Resolve paths inside a host root (driver root, dev root) without leaving it.

A containerized driver (``/run/nvidia/driver``) or the simulated driver holds absolute
symlinks that are meant relative to that root; they are followed as if the root were ``/``.
"""

from __future__ import annotations

import os
from pathlib import Path

_MAX_LINKS = 40


def resolve_in_root(root: Path, path: str) -> Path | None:
    """The host path that ``path`` (absolute, as seen from ``root``) names, or None.

    Symlinks are followed relative to ``root`` and ``..`` never climbs above it, the way
    the kernel's RESOLVE_IN_ROOT treats a root. Returns None for a missing path.
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, part)
        try:
            target = os.readlink(candidate)
        except FileNotFoundError:
            return None
        except OSError:  # not a symlink (EINVAL) or not a dir on the way (ENOTDIR)
            if not candidate.exists():
                return None
            resolved.append(part)
            continue
        links += 1
        if links > _MAX_LINKS:
            return None
        if target.startswith("/"):
            resolved = []
        parts = [p for p in target.split("/") if p not in ("", ".")] + parts
    return root.joinpath(*resolved)


def strip_root(root: Path, path: Path) -> str:
    """``path`` as seen from inside ``root`` (``/`` + the part under root)."""
    rel = path.relative_to(root)
    return "/" + str(rel) if str(rel) != "." else "/"
