"""Device nodes under the dev root, with major/minor read from the nodes themselves."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from nvct.host.inventory import DeviceNode

CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


def device_node(dev_root: Path, container_path: str) -> DeviceNode | None:
    """The character device at ``dev_root + container_path``, or None if absent/not a char dev."""
    host = dev_root / container_path.lstrip("/")
    try:
        st = os.stat(host)
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return DeviceNode(
        path=container_path,
        host_path=str(host),
        major=os.major(st.st_rdev),
        minor=os.minor(st.st_rdev),
        mode=stat.S_IMODE(st.st_mode),
    )


def discover_control_nodes(dev_root: Path) -> tuple[DeviceNode, ...]:
    """nvidiactl, nvidia-uvm, nvidia-uvm-tools and nvidia-modeset, those that exist."""
    nodes = (device_node(dev_root, f"/dev/{name}") for name in CONTROL_NODES)
    return tuple(n for n in nodes if n is not None)


_MINOR_RE = re.compile(r"^DeviceFileMinor:\s*(\d+)\s*$", re.MULTILINE)


def mig_cap_node(
    dev_root: Path, proc_root: Path, gpu_minor: int, gi: int, ci: int | None
) -> DeviceNode | None:
    """The /dev/nvidia-caps node granting access to a MIG GPU instance (or compute instance).

    The minor comes from procfs:
    ``driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access``.
    """
    rel = f"driver/nvidia/capabilities/gpu{gpu_minor}/mig/gi{gi}"
    if ci is not None:
        rel += f"/ci{ci}"
    try:
        text = (proc_root / rel / "access").read_text()
    except OSError:
        return None
    match = _MINOR_RE.search(text)
    if match is None:
        return None
    return device_node(dev_root, f"/dev/nvidia-caps/nvidia-cap{match.group(1)}")
