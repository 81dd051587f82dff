"""The host driver's own programs, run by nvct's node daemons (never a binary of an image):
where one is, and the library path it needs when the driver is under a driver root."""

from __future__ import annotations

import os
from pathlib import Path

from nvct.config import Config
from nvct.host.inventory import Inventory


def driver_binary(inventory: Inventory, name: str) -> Path | None:
    """The driver's program ``name`` as the inventory found it (ELF, under the driver root)."""
    for found in inventory.files_of("bin"):
        if found.name == name or os.path.basename(found.host_path) == name:
            return Path(found.host_path)
    return None


def driver_library_path(config: Config, inventory: Inventory) -> str:
    """LD_LIBRARY_PATH for the driver's programs: "" where the driver root is /; from a pod,
    the node's driver libraries are under the driver root, not where the image's loader
    looks."""
    if Path(config.driver_root) == Path("/"):
        return ""
    dirs = dict.fromkeys(os.path.dirname(f.host_path) for f in inventory.files_of("lib"))
    return ":".join(dirs)
