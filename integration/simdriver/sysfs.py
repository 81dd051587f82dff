"""The PCI part of sysfs a device plugin reads: `<sys>/bus/pci/devices/<address>/numa_node`.

As the kernel lays it out: each GPU's directory sits under its root complex and, behind a
PCIe switch, the switch's port (`<sys>/devices/pci0000:<hb>/0000:<hb>:<port>.0/<address>`),
and `bus/pci/devices/<address>` is a relative symlink to it. Readers go through the bus path;
the DRA plugin resolves it for `resource.kubernetes.io/pcieRoot` (the `pci0000:<hb>` part).
"""

from __future__ import annotations

import os
from pathlib import Path

from .spec import SimDriverSpec, parse_bus_id

NVIDIA_VENDOR = 0x10DE


def sysfs_address(pci_bus_id: str) -> str:
    """`0000:3b:00.0`: the sysfs name of a GPU (16-bit domain, lower case)."""
    dom, bus, dev, fn = parse_bus_id(pci_bus_id)
    return f"{dom:04x}:{bus:02x}:{dev:02x}.{fn:x}"


def pcie_path(pci_bus_id: str, host_bridge: int, pci_switch: int) -> str:
    """The directories above a GPU: its root complex, then its switch's port if it has one."""
    dom = parse_bus_id(pci_bus_id)[0]
    root = f"pci{dom:04x}:{host_bridge:02x}"
    if pci_switch < 0:
        return root
    return f"{root}/{dom:04x}:{host_bridge:02x}:{pci_switch + 1:02x}.0"


def write_sysfs(spec: SimDriverSpec, sys_root: Path) -> None:
    bus = sys_root / "bus/pci/devices"
    bus.mkdir(parents=True, exist_ok=True)
    for g in spec.gpus:
        address = sysfs_address(g.pci_bus_id)
        d = sys_root / "devices" / pcie_path(g.pci_bus_id, g.host_bridge, g.pci_switch) / address
        d.mkdir(parents=True, exist_ok=True)
        link = bus / address
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(d, bus))
        files = {
            "numa_node": f"{g.numa_node}\n",
            "vendor": f"0x{NVIDIA_VENDOR:04x}\n",
            "device": f"0x{g.pci_device_id >> 16:04x}\n",
            "class": f"0x{g.pci_class:06x}\n",
        }
        for name, text in files.items():
            (d / name).write_text(text)
            (d / name).chmod(0o444)
