"""Device nodes of the optional NVIDIA features a container can ask for by variable.

MIG management caps (``NVIDIA_MIG_CONFIG_DEVICES``/``NVIDIA_MIG_MONITOR_DEVICES``), IMEX
channels (``NVIDIA_IMEX_CHANNELS``), GPUDirect Storage (``NVIDIA_GDS``), MOFED
(``NVIDIA_MOFED``), NVSwitch (``NVIDIA_NVSWITCH``) and GDRCopy (``NVIDIA_GDRCOPY``): the nodes
that exist under the dev root, the MIG capability minors the driver lists in procfs, and the
IMEX channel major from ``<proc-root>/devices`` (channel nodes may be made in the container
from it without existing on the host, as NVIDIA's toolkit makes them).
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

from nvct.host.discover.devices import device_node
from nvct.host.inventory import DeviceNode

# Directory under /dev, and the names in it, of each feature's nodes.
FEATURE_GLOBS = (
    ("/dev", "nvidia-fs*"),
    ("/dev/infiniband", "*"),
    ("/dev", "nvidia-nvswitch*"),
    ("/dev", "gdrdrv"),
    ("/dev/nvidia-caps", "nvidia-cap*"),
    ("/dev/nvidia-caps-imex-channels", "channel*"),
)
IMEX_DRIVER = "nvidia-caps-imex-channels"
_NAME_MINOR = re.compile(r"^(\S+)\s+(\d+)\s*$")


def discover_feature_nodes(dev_root: Path) -> tuple[DeviceNode, ...]:
    """Every character device of ``FEATURE_GLOBS`` under the dev root, sorted by path."""
    nodes = []
    for directory, pattern in FEATURE_GLOBS:
        try:
            names = os.listdir(dev_root / directory.lstrip("/"))
        except OSError:
            continue
        for name in sorted(fnmatch.filter(names, pattern)):
            node = device_node(dev_root, f"{directory}/{name}")
            if node is not None:
                nodes.append(node)
    return tuple(nodes)


def discover_cap_minors(proc_root: Path) -> tuple[tuple[str, int], ...]:
    """``driver/nvidia-caps/mig-minors`` as (name, minor): ``config``, ``monitor``,
    ``gpuN/giG/access``, ``gpuN/giG/ciC/access``."""
    try:
        text = (proc_root / "driver/nvidia-caps/mig-minors").read_text()
    except OSError:
        return ()
    out = []
    for line in text.splitlines():
        match = _NAME_MINOR.match(line.strip())
        if match:
            out.append((match.group(1), int(match.group(2))))
    return tuple(out)


def discover_imex_major(proc_root: Path) -> int | None:
    """The char major of ``nvidia-caps-imex-channels`` in ``<proc-root>/devices``, if loaded."""
    try:
        text = (proc_root / "devices").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1] == IMEX_DRIVER and fields[0].isdigit():
            return int(fields[0])
        if line.startswith("Block"):
            break
    return None
