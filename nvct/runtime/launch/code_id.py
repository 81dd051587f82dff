"""The identity of the nvct code that is installed: what a launcher and a daemon must share.

The native launcher carries the identity of the code it was built with; the shim daemon
computes its own at start, over the code it has loaded. A daemon left running across an
upgrade therefore declines the new launcher's requests (the launcher then runs the shim
itself) instead of preparing containers with yesterday's code.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent


def code_id(package: Path = PACKAGE) -> str:
    """A digest of every Python source of the package and of the native programs' sources."""
    digest = hashlib.sha256()
    native = package / "runtime" / "launch"
    files = [
        *sorted(package.rglob("*.py")),
        *sorted(native.glob("*.[ch]")),  # every native program and header
    ]
    for path in files:
        digest.update(str(path.relative_to(package)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]
