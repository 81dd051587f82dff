"""Other ways a driver is laid out on a host, made from a copy of a simulated driver root.

``own_prefix``: the driver under a prefix of its own, as GKE and Container-Optimized OS
install it (``/usr/local/nvidia/{bin,lib64}``, listed in ld.so.conf.d), with ``/usr/bin``
holding shell wrappers that exec the real binaries by their host path — what the GPU machine
nvct was checked on (driver 580) has.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from integration.simdriver.build import _run_ldconfig
from integration.simdriver.common import LIB64

WRAPPER = '#!/bin/sh\nexec {target} "$@"\n'


def own_prefix(root: Path, prefix: str = "usr/local/nvidia") -> Path:
    """Move the 64-bit driver libraries to ``<prefix>/lib64`` and the binaries to
    ``<prefix>/bin`` inside ``root`` (a copy of a simulated driver root), leave a wrapper
    script in ``/usr/bin`` for each binary, and remake the ld.so.cache; returns the prefix."""
    lib = root / prefix / "lib64"
    bindir = root / prefix / "bin"
    lib.mkdir(parents=True)
    bindir.mkdir(parents=True)
    for path in sorted((root / LIB64).iterdir()):
        if path.name.startswith(("libnvidia", "libcuda", "libEGL_nvidia", "libGLX_nvidia")):
            shutil.move(str(path), lib / path.name)
    for path in sorted((root / "usr/bin").iterdir()):
        if path.name.startswith("nvidia"):
            shutil.move(str(path), bindir / path.name)
            path.write_text(WRAPPER.format(target=f"/{prefix}/bin/{path.name}"))
            path.chmod(0o755)
    (root / "etc/ld.so.conf.d/000-nvidia.conf").write_text(f"/{prefix}/lib64\n")
    (root / "etc/ld.so.cache").unlink()
    _run_ldconfig(root)
    return root / prefix
