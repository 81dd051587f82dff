"""A GPU's DRM nodes (``/dev/dri/card<N>``, ``/dev/dri/renderD<N>``), found by PCI bus id.

udev names them in ``/dev/dri/by-path/pci-<bus id>-card`` and ``-render`` (under the dev root,
so a containerized or simulated driver's own dev tree is read); where there are no such links
and the dev root is the host's, the kernel's ``/sys/bus/pci/devices/<bus id>/drm`` lists them,
as NVIDIA's toolkit reads them.
"""

from __future__ import annotations

import os
from pathlib import Path

from nvct.host.discover.devices import device_node
from nvct.host.inventory import DeviceNode

SYS_PCI_DEVICES = "/sys/bus/pci/devices"


def procfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:3B:00.0`` as the kernel names the device: ``0000:3b:00.0``."""
    domain, _, rest = nvml_bus_id.partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest.lower()}"
    except ValueError:
        return nvml_bus_id.lower()


def drm_nodes(dev_root: Path, nvml_bus_id: str) -> tuple[DeviceNode, ...]:
    """The card and render nodes of the GPU at ``nvml_bus_id`` that exist."""
    bus = procfs_bus_id(nvml_bus_id)
    names: list[str] = []
    by_path = dev_root / "dev/dri/by-path"
    for kind in ("card", "render"):
        try:
            names.append(os.path.basename(os.readlink(by_path / f"pci-{bus}-{kind}")))
        except OSError:
            continue
    if not names and os.path.realpath(dev_root) == "/":
        try:
            listed = os.listdir(f"{SYS_PCI_DEVICES}/{bus}/drm")
        except OSError:
            listed = []
        names = sorted(n for n in listed if n.startswith(("card", "renderD")))
    nodes = (device_node(dev_root, f"/dev/dri/{name}") for name in names)
    return tuple(n for n in nodes if n is not None)
