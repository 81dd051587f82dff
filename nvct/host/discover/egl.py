"""The EGL external platform libraries the driver's platform JSON files name.

``egl_external_platform.d/15_nvidia_gbm.json`` and its siblings (Wayland, XCB, Xlib) name a
library (``libnvidia-egl-gbm.so.1``) that ships with the driver but carries its own version
(``.so.1.1.1``), not the driver's: the version rule of the other libraries would leave it out,
and the mounted JSON file would name a library the container does not have (EGL then fails on
that platform). Each one named is looked up in the driver root's ld.so.cache, both classes.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

from nvct.host.arch import Arch
from nvct.host.discover.libraries import _checked, _kind
from nvct.host.discover.rootpath import resolve_in_root
from nvct.host.inventory import DriverFile
from nvct.host.ldcache import read_ldcache

PLATFORM_DIR = "egl_external_platform.d"
_MAX_JSON = 1 << 16


def platform_sonames(configs: tuple[DriverFile, ...]) -> list[str]:
    """The library each EGL external platform file names (its ``ICD.library_path``)."""
    out = []
    for cfg in configs:
        if PLATFORM_DIR not in cfg.name:
            continue
        try:
            with open(cfg.host_path, encoding="utf-8") as f:
                data = json.loads(f.read(_MAX_JSON))
            library = data["ICD"]["library_path"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(library, str) and library:
            out.append(posixpath.basename(library))
    return list(dict.fromkeys(out))


def discover_platform_libraries(
    driver_root: Path, configs: tuple[DriverFile, ...], arch: Arch, known: set[str]
) -> tuple[tuple[DriverFile, ...], tuple[str, ...]]:
    """The platform libraries, 64- and 32-bit, not already among ``known`` host paths."""
    wanted = set(platform_sonames(configs))
    if not wanted:
        return (), ()
    files: list[DriverFile] = []
    warnings: list[str] = []
    for entry in read_ldcache(driver_root / "etc/ld.so.cache"):
        kind = _kind(entry, arch)
        if entry.soname not in wanted or kind is None:
            continue
        real = resolve_in_root(driver_root, entry.path)
        if real is None or str(real) in known:
            continue
        prefix = entry.soname.rsplit(".so", 1)[0] + ".so"
        lib = _checked(real, kind, arch, ("graphics", prefix), warnings)
        if lib is not None:
            known.add(str(real))
            files.append(lib)
    return tuple(files), tuple(warnings)
