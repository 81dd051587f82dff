"""The vGPU capability in the PCI config space, read as GPU feature discovery reads it.

The config spaces here are built byte by byte from the layout GFD's ``internal/vgpu`` reads
(status bit 0x10 at 0x06, the list at 0x34, ID/next/length, vendor-specific ID 0x09,
``VF`` at 3-4, records from 5, record 0 = 10 bytes of version + 10 of branch).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nvct.node.labels import node_labels
from nvct.node.vgpu import (
    ConfigSpaceError,
    VgpuDevices,
    host_driver,
    is_vgpu,
    scan,
    vendor_capability,
)
from tests.node.test_labels import inventory

N = "nvidia.com/"


def field(text: bytes) -> bytes:
    return text.ljust(10, b"\0")


def vgpu_capability(version: bytes, branch: bytes, before: bytes = b"") -> bytes:
    """``before``: records ahead of the host driver's (each ``id, length, data``)."""
    body = before + bytes([0, 22]) + field(version) + field(branch)
    return bytes([0x09, 0x00, 5 + len(body)]) + b"VF" + body


def config(*capabilities: tuple[int, bytes], status: int = 0x10, size: int = 256) -> bytes:
    """A config space with ``capabilities`` (offset, bytes) chained in the order given."""
    space = bytearray(size)
    space[6] = status
    space[0x34] = capabilities[0][0] if capabilities else 0
    for i, (at, cap) in enumerate(capabilities):
        space[at : at + len(cap)] = cap
        space[at + 1] = capabilities[i + 1][0] if i + 1 < len(capabilities) else 0
    return bytes(space)


MSI = bytes([0x05, 0, 0x81, 0])
PLAIN_VENDOR = bytes([0x09, 0, 0x14, 0x01])  # a bare-metal GPU's: no VF signature


def test_a_vgpu_reports_its_hosts_driver_version_and_branch() -> None:
    space = config((0x68, MSI), (0xD0, vgpu_capability(b"535.161.05", b"r535_00")))
    capability = vendor_capability(space)
    assert capability is not None and len(capability) == 27 and is_vgpu(capability)
    assert host_driver(capability) == ("535.161.05", "r535_00")  # 10 bytes: no NUL at all


def test_a_bare_metal_gpus_vendor_capability_is_not_a_vgpu() -> None:
    capability = vendor_capability(config((0x60, MSI), (0xB4, PLAIN_VENDOR + bytes(16))))
    assert capability is not None and not is_vgpu(capability)


@pytest.mark.parametrize(
    "space",
    [
        config((0xD0, vgpu_capability(b"1", b"r1")), status=0),  # no capability list
        config((0x60, MSI)),  # no vendor-specific capability
        config((0x60, bytes([0xFF, 0, 0, 0])), (0xD0, vgpu_capability(b"1", b"r1"))),  # broken
    ],
)
def test_no_vendor_capability(space: bytes) -> None:
    assert vendor_capability(space) is None


def test_a_looped_capability_chain_ends() -> None:
    space = bytearray(config((0x60, MSI), (0x68, MSI)))
    space[0x69] = 0x60  # 0x68 points back to 0x60
    assert vendor_capability(bytes(space)) is None


def test_an_unprivileged_read_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigSpaceError, match=r"64 bytes.*CAP_SYS_ADMIN"):
        vendor_capability(bytes(64))


def test_records_before_the_host_drivers_are_skipped() -> None:
    capability = vgpu_capability(b"550.54.16", b"r550_00", before=bytes([7, 4, 0xAA, 0xBB]))
    assert host_driver(capability) == ("550.54.16", "r550_00")


@pytest.mark.parametrize(
    "capability",
    [
        vgpu_capability(b"550", b"r550")[:-1],  # record 0 cut short
        b"\x09\x00\x0b" + b"VF" + bytes([3, 0]) + bytes(4),  # a record of length 0
        b"\x09\x00\x09" + b"VF" + bytes([3, 9]) + bytes(2),  # runs off the end
        b"\x09\x00\x05VF",  # no record at all
    ],
)
def test_no_host_driver_record(capability: bytes) -> None:
    assert is_vgpu(capability) and host_driver(capability) is None


def _device(root: Path, address: str, vendor: str, space: bytes | None) -> None:
    d = root / "bus/pci/devices" / address
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    if space is not None:
        (d / "config").write_bytes(space)


def test_scan_reads_nvidia_functions_and_keeps_the_last_vgpus_host(tmp_path: Path) -> None:
    _device(tmp_path, "0000:00:01.0", "0x8086", None)  # not NVIDIA: its config is not read
    _device(tmp_path, "0000:00:05.0", "0x10de", config((0xB4, PLAIN_VENDOR + bytes(16))))
    for address, version in (("0000:00:07.0", b"535.161.07"), ("0000:00:06.0", b"535.161.05")):
        _device(tmp_path, address, "0x10de", config((0xD0, vgpu_capability(version, b"r535"))))
    assert scan(tmp_path) == VgpuDevices(("0000:00:06.0", "0000:00:07.0"), ("535.161.07", "r535"))


def test_scan_without_vgpus_and_when_unreadable(tmp_path: Path) -> None:
    _device(tmp_path, "0000:00:05.0", "0x10de", config((0xB4, PLAIN_VENDOR + bytes(16))))
    assert scan(tmp_path) == VgpuDevices()
    _device(tmp_path, "0000:00:06.0", "0x10de", bytes(64))  # as an unprivileged reader sees it
    assert scan(tmp_path) is None
    assert scan(tmp_path / "missing") is None


def test_a_vgpu_without_a_host_record_is_present_without_version(tmp_path: Path) -> None:
    _device(tmp_path, "0000:00:06.0", "0x10de", config((0xD0, b"\x09\x00\x05VF")))
    assert scan(tmp_path) == VgpuDevices(("0000:00:06.0",), None)


def test_labels_from_the_scan() -> None:
    inv = inventory("h100x4-550")
    guest = node_labels(inv, vgpu=VgpuDevices(("0000:00:06.0",), ("535.161.05", "r535 00!")))
    assert {k: v for k, v in guest.items() if k.startswith(f"{N}vgpu.")} == {
        f"{N}vgpu.present": "true",
        f"{N}vgpu.host-driver-version": "535.161.05",
        f"{N}vgpu.host-driver-branch": "r535-00",  # sanitised as every other value
    }
    for bare in (node_labels(inv, vgpu=VgpuDevices()), node_labels(inv)):
        assert bare[f"{N}vgpu.present"] == "false" and not [k for k in bare if "host-driver" in k]


def test_without_the_config_space_nvml_says_whether_a_vgpu_is_present() -> None:
    """Unread (an unprivileged labeller): GFD writes no vgpu.* label; nvct still answers
    present from nvmlDeviceGetVirtualizationMode, and cannot know the host's driver."""
    inv = inventory("h100x4-550")
    guest = dataclasses.replace(
        inv, gpus=(dataclasses.replace(inv.gpus[0], virtualization_mode=2),)
    )
    labels = node_labels(guest, vgpu=None)
    assert labels[f"{N}vgpu.present"] == "true" and not [k for k in labels if "host-driver" in k]
    # the config space, when read, is GFD's source and wins over NVML
    assert node_labels(guest, vgpu=VgpuDevices())[f"{N}vgpu.present"] == "false"
