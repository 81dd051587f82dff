"""A vGPU guest's GPUs and its host's vGPU manager version, from the PCI config space.

GPU feature discovery (``internal/vgpu``) reads every NVIDIA function's sysfs ``config``: a
vGPU carries a vendor-specific capability (ID 0x09) whose bytes 3-4 are the signature ``VF``;
from byte 5 it holds records (``id``, ``length``, data), and record 0 is the host driver: 10
bytes of version, 10 of branch, NUL-padded. NVML has no call for the host's version, so this
is the only source; nvct reads it the same way so ``vgpu.*`` labels mean what GFD's do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger("nvct")
_told: set[str] = set()

NVIDIA_VENDOR = "0x10de"
CONFIG_HEADER = 256  # GFD refuses less: without CAP_SYS_ADMIN the kernel gives 64 bytes
_STATUS, _CAPABILITIES_LISTED = 0x06, 0x10
_CAPABILITY_POINTER = 0x34
_VENDOR_SPECIFIC, _CHAIN_BROKEN = 0x09, 0xFF
_SIGNATURE = b"VF"
_FIRST_RECORD, _HOST_DRIVER_RECORD = 5, 0
_FIELD = 10  # bytes of version, then of branch


class ConfigSpaceError(ValueError):
    """A PCI config space that cannot be read as GFD reads it."""


@dataclass(frozen=True, slots=True)
class VgpuDevices:
    """The vGPUs among the node's NVIDIA PCI functions (``addresses``, sysfs names) and the
    host's vGPU manager as the last of them reports it (GFD's loop keeps the last); None
    where a vGPU has no host driver record."""

    addresses: tuple[str, ...] = ()
    host_driver: tuple[str, str] | None = None


def vendor_capability(config: bytes) -> bytes | None:
    """The first vendor-specific capability of a PCI config space, or None without one.

    Raises:
        ConfigSpaceError: fewer than 256 bytes (read without privilege).
    """
    if len(config) < CONFIG_HEADER:
        raise ConfigSpaceError(
            f"PCI config space of {len(config)} bytes, GFD needs {CONFIG_HEADER}: "
            "read it with CAP_SYS_ADMIN (GFD runs privileged)"
        )
    if not config[_STATUS] & _CAPABILITIES_LISTED:
        return None
    seen: set[int] = set()
    pos = config[_CAPABILITY_POINTER]
    # a looped or broken chain ends the walk, as GFD's does, instead of spinning or failing
    while pos and pos not in seen and pos + 2 < len(config):
        cap_id, following, length = config[pos], config[pos + 1], config[pos + 2]
        if cap_id == _CHAIN_BROKEN:
            break
        if cap_id == _VENDOR_SPECIFIC:
            return config[pos : pos + length]
        seen.add(pos)
        pos = following
    return None


def is_vgpu(capability: bytes) -> bool:
    """A vendor capability with NVIDIA's vGPU signature."""
    return capability[3:5] == _SIGNATURE


def host_driver(capability: bytes) -> tuple[str, str] | None:
    """(version, branch) of the host's vGPU manager from a vGPU capability's host driver
    record, or None where it has none. GFD walks records while the current one is not
    record 0; a record of length 0 would never end, so it ends the walk here."""
    pos = _FIRST_RECORD
    record = capability[pos] if pos < len(capability) else None
    while record not in (None, _HOST_DRIVER_RECORD):
        step = capability[pos + 1] if pos + 1 < len(capability) else 0
        if not step:
            return None
        pos += step
        record = capability[pos] if pos < len(capability) else None
    data = pos + 2
    if record is None or data + 2 * _FIELD > len(capability):
        return None
    version = capability[data : data + _FIELD].strip(b"\0")
    branch = capability[data + _FIELD : data + 2 * _FIELD].strip(b"\0")
    # Go's string(byte) is the byte's code point: latin-1
    return version.decode("latin-1"), branch.decode("latin-1")


def scan(sysfs_root: Path) -> VgpuDevices | None:
    """Every NVIDIA PCI function under ``<sysfs_root>/bus/pci/devices`` in name order, as
    GFD lists them; None (GFD writes no ``vgpu.*`` label then) where one is unreadable or
    short (read without CAP_SYS_ADMIN)."""
    devices = sysfs_root / "bus/pci/devices"
    vgpus: list[str] = []
    drivers: list[tuple[str, str] | None] = []
    try:
        for entry in sorted(devices.iterdir()):
            if (entry / "vendor").read_text().strip() != NVIDIA_VENDOR:
                continue
            capability = vendor_capability((entry / "config").read_bytes())
            if capability is not None and is_vgpu(capability):
                vgpus.append(entry.name)
                drivers.append(host_driver(capability))
    except (OSError, ConfigSpaceError) as err:
        if str(err) not in _told:  # a labeller rescans every round: say it once
            _told.add(str(err))
            log.warning("vgpu_config_space_unreadable", sysfs=str(devices), error=str(err))
        return None
    if None in drivers:  # GFD fails the round; nvct keeps vgpu.present and says why
        log.warning("vgpu_host_driver_record_missing", devices=vgpus)
        return VgpuDevices(tuple(vgpus))
    return VgpuDevices(tuple(vgpus), drivers[-1] if drivers else None)
