"""The simulated sysfs `config`: a PCI config space agreeing with the sysfs files beside it,
with NVIDIA's vGPU capability only on a vGPU guest's GPU."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from integration.simdriver import preset
from integration.simdriver.sysfs import write_sysfs


def _capabilities(config: bytes) -> dict[int, bytes]:
    """Capability ID -> its bytes from the pointer at 0x34 (ID, next, then data; the vendor
    capability's third byte is its length)."""
    found: dict[int, bytes] = {}
    pos = config[0x34]
    while pos:
        end = pos + (config[pos + 2] if config[pos] == 0x09 else 4)
        found[config[pos]] = config[pos:end]
        pos = config[pos + 1]
    return found


@pytest.mark.parametrize("name", ["h100x4-550", "mixed-ecc-x3", "l40s-vgpu-guest"])
def test_the_config_space_agrees_with_sysfs(name: str, tmp_path: Path) -> None:
    spec = preset(name)
    write_sysfs(spec, tmp_path)
    for d in sorted((tmp_path / "bus/pci/devices").iterdir()):
        config = (d / "config").read_bytes()
        vendor, device, _, status = struct.unpack_from("<HHHH", config)
        assert f"0x{vendor:04x}" == (d / "vendor").read_text().strip() == "0x10de"
        assert f"0x{device:04x}" == (d / "device").read_text().strip()
        assert (
            f"0x{int.from_bytes(config[9:12], 'little'):06x}" == (d / "class").read_text().strip()
        )
        assert status & 0x10  # a capability list
        vendor_specific = _capabilities(config)[0x09]
        if name == "l40s-vgpu-guest":
            assert len(config) == 256
            assert vendor_specific[3:5] == b"VF" and vendor_specific[5:7] == bytes([0, 22])
            assert vendor_specific[7:17] == b"535.161.05"  # all 10 bytes: no NUL
            assert vendor_specific[17:27] == b"r535_00\0\0\0"
        else:
            assert len(config) == 4096  # PCIe extended space, as root reads it
            assert vendor_specific[3:5] != b"VF" and {0x01, 0x05, 0x10} <= set(
                _capabilities(config)
            )


def test_a_vgpu_host_needs_a_vgpu_guest_and_fits_ten_bytes() -> None:
    spec = preset("l40s-vgpu-guest")
    guest = spec.gpus[0]
    for bad in (
        dataclasses.replace(guest, virtualization_mode=0),
        dataclasses.replace(guest, vgpu_host=None),
        dataclasses.replace(guest, vgpu_host=("535.161.05.1", "r535_00")),
    ):
        with pytest.raises(ValueError, match="vgpu_host"):
            dataclasses.replace(spec, gpus=(bad,)).validate()
