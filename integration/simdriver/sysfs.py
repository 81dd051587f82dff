"""The PCI part of sysfs a device plugin reads: `<sys>/bus/pci/devices/<address>/numa_node`.

Plain directories (the kernel's are symlinks into /sys/devices/pci...; readers go through
the bus path, which is what a configurable sysfs root points at).
"""

from __future__ import annotations

from pathlib import Path

from .spec import SimDriverSpec, parse_bus_id

NVIDIA_VENDOR = 0x10DE


def sysfs_address(pci_bus_id: str) -> str:
    """`0000:3b:00.0`: the sysfs name of a GPU (16-bit domain, lower case)."""
    dom, bus, dev, fn = parse_bus_id(pci_bus_id)
    return f"{dom:04x}:{bus:02x}:{dev:02x}.{fn:x}"


def write_sysfs(spec: SimDriverSpec, sys_root: Path) -> None:
    for g in spec.gpus:
        d = sys_root / "bus/pci/devices" / sysfs_address(g.pci_bus_id)
        d.mkdir(parents=True, exist_ok=True)
        files = {
            "numa_node": f"{g.numa_node}\n",
            "vendor": f"0x{NVIDIA_VENDOR:04x}\n",
            "device": f"0x{g.pci_device_id >> 16:04x}\n",
            "class": f"0x{g.pci_class:06x}\n",
        }
        for name, text in files.items():
            (d / name).write_text(text)
            (d / name).chmod(0o444)
