"""A GPU's PCI config space, the bytes of sysfs `config`, laid out as real NVIDIA functions'.

A bare-metal GPU (PCIe, 4096 bytes as root reads them) lists power management at 0x60, MSI
at 0x68, PCI Express at 0x78 and a 20-byte vendor-specific capability at 0xb4 that is not a
vGPU's. A vGPU guest's function (256 bytes) starts its list at 0xd0 with NVIDIA's vGPU
capability: ID 0x09, next 0x68 (MSI), length 27, signature `VF`, then record 0 of length 22:
the host's vGPU manager version and branch, 10 NUL-padded bytes each. These are the layouts
of the two devices in k8s-device-plugin's internal/vgpu tests, written from the spec's GPU.
"""

from __future__ import annotations

import struct

from .spec import VGPU_GUEST, SimGpu

NVIDIA_VENDOR = 0x10DE
_STATUS_CAPABILITIES = 0x0010
_PM, _MSI, _EXPRESS, _VENDOR_SPECIFIC = 0x01, 0x05, 0x10, 0x09
_FIELD = 10


def _header(gpu: SimGpu, first_capability: int) -> bytearray:
    config = bytearray(64)
    # vendor, device, command (memory + bus master), status (capability list)
    struct.pack_into(
        "<HHHH", config, 0, NVIDIA_VENDOR, gpu.pci_device_id >> 16, 0x0006, _STATUS_CAPABILITIES
    )
    config[8] = 0xA1  # revision
    config[9:12] = gpu.pci_class.to_bytes(3, "little")  # prog-if, subclass, base class
    struct.pack_into("<HH", config, 0x2C, NVIDIA_VENDOR, gpu.pci_subsystem_id >> 16)
    config[0x34] = first_capability
    return config


def _put(config: bytearray, at: int, capability: bytes) -> None:
    config[at : at + len(capability)] = capability


def config_space(gpu: SimGpu) -> bytes:
    """The sysfs `config` of `gpu`: a vGPU guest's when its virtualization mode says so."""
    if gpu.virtualization_mode == VGPU_GUEST and gpu.vgpu_host is not None:
        config = _header(gpu, 0xD0) + bytearray(256 - 64)
        version, branch = (v.encode().ljust(_FIELD, b"\0") for v in gpu.vgpu_host)
        record = bytes([0x00, 2 + 2 * _FIELD]) + version + branch
        _put(config, 0xD0, bytes([_VENDOR_SPECIFIC, 0x68, 5 + len(record)]) + b"VF" + record)
        _put(config, 0x68, bytes([_MSI, 0x00, 0x81, 0x00]))
        return bytes(config)
    config = _header(gpu, 0x60) + bytearray(4096 - 64)
    _put(config, 0x60, bytes([_PM, 0x68, 0x03, 0x00]))
    _put(config, 0x68, bytes([_MSI, 0x78, 0x81, 0x00]))
    _put(config, 0x78, bytes([_EXPRESS, 0xB4, 0x02, 0x00]))
    _put(config, 0xB4, bytes([_VENDOR_SPECIFIC, 0x00, 0x14, 0x01]))
    return bytes(config)
