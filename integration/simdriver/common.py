"""Shared by the build steps of the simulated driver: its error, root check, file writing."""

from __future__ import annotations

import os
from pathlib import Path

LIB64 = "usr/lib/x86_64-linux-gnu"
LIB32 = "usr/lib/i386-linux-gnu"


class SimDriverError(RuntimeError):
    """The simulated driver could not be built (missing root, gcc, ldconfig...)."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise SimDriverError(
            "building the simulated driver needs root: it creates character device nodes "
            "(mknod /dev/nvidia*)"
        )


def write_file(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    os.chmod(path, mode)
