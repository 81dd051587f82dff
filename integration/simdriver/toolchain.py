"""The simulated driver's build tools: gcc, the host's ldconfig, root, file writes."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"
# Bump when the built layout changes, so cached drivers are rebuilt.
BUILD_FORMAT = "2"

LIB64 = "usr/lib/x86_64-linux-gnu"
LIB32 = "usr/lib/i386-linux-gnu"


ENV_DEV_ROOT = "NVCT_SIM_DEV_ROOT"


class SimDriverError(RuntimeError):
    """The simulated driver could not be built (missing root, gcc, ldconfig...)."""


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise SimDriverError("the simulated driver needs gcc to compile its libraries")
    return gcc


def _ldconfig() -> str:
    for cand in (shutil.which("ldconfig"), "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise SimDriverError("the simulated driver needs ldconfig to write its ld.so.cache")


@functools.lru_cache(maxsize=1)
def gcc_m32_works() -> bool:
    """True if `gcc -m32` can link a shared library (gcc-multilib installed)."""
    try:
        gcc = _gcc()
    except SimDriverError:
        return False
    with tempfile.TemporaryDirectory(prefix="simdriver-m32-") as tmp:
        src = Path(tmp, "t.c")
        src.write_text("int f(void) { return 1; }\n")
        proc = subprocess.run(
            [gcc, "-m32", "-shared", "-fPIC", "-o", str(Path(tmp, "t.so")), str(src)],
            capture_output=True,
            check=False,
        )
        return proc.returncode == 0


def require_root() -> None:
    if os.geteuid() != 0:
        raise SimDriverError(
            "building the simulated driver needs root: it creates character device nodes "
            "(mknod /dev/nvidia*)"
        )


def _write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    os.chmod(path, mode)
