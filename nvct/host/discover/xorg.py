"""The X server's NVIDIA modules, for the ``display`` capability (as libnvidia-container).

``nvidia_drv.so`` (the DDX driver) and ``libglxserver_nvidia.so.<driver version>`` (GLX),
under the Xorg module directory of the distribution (Debian/Ubuntu and the .run installer:
``/usr/lib/xorg/modules``; RPM packages: ``/usr/lib64/xorg/modules``). A container running
its own X server on the GPU needs them at the same paths.
"""

from __future__ import annotations

from pathlib import Path

from nvct.host.discover.rootpath import resolve_in_root
from nvct.host.inventory import DriverFile

MODULE_DIRS = ("usr/lib/xorg/modules", "usr/lib64/xorg/modules")
GLX_LINK = "libglxserver_nvidia.so"  # the name Xorg loads; a link to the versioned file


def discover_xorg_modules(driver_root: Path, version: str) -> tuple[DriverFile, ...]:
    """The driver's Xorg modules that exist (kind ``config``, capability ``display``)."""
    out = []
    for base in MODULE_DIRS:
        for rel in ("drivers/nvidia_drv.so", f"extensions/{GLX_LINK}.{version}"):
            found = resolve_in_root(driver_root, f"/{base}/{rel}")
            if found is not None and found.is_file():
                name = f"{base}/{rel}"
                out.append(
                    DriverFile(host_path=str(found), kind="config", capability="display", name=name)
                )
    return tuple(out)
