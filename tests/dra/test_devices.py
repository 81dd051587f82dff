"""dra_devices: one DRA device per whole GPU and per MIG device, named and described as the
scheduler matches them. Unprivileged: recorded inventories and the simulated driver's sysfs."""

from __future__ import annotations

import re
from pathlib import Path

from integration.simdriver import preset
from integration.simdriver.sysfs import write_sysfs
from nvct.dra.devices import PCIE_ROOT, dra_devices, nvlink_domains, semver
from nvct.host.inventory import Inventory
from tests.inventories import read_fixture

LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _inventory(name: str, sys_root: Path) -> Inventory:
    write_sysfs(preset(name), sys_root)
    return Inventory.from_dict(read_fixture(name))


def test_whole_gpus_carry_the_attributes_a_claim_selects_on(tmp_path: Path) -> None:
    inventory = _inventory("h100x4-550", tmp_path)
    devices = dra_devices(inventory, sysfs_root=tmp_path)
    assert [d.name for d in devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert [d.uuid for d in devices] == [g.uuid for g in inventory.gpus]
    first, gpu = devices[0], inventory.gpus[0]
    attributes = first.attributes
    assert attributes["type"] == {"string": "gpu"}
    assert attributes["productName"] == {"string": gpu.name}
    assert attributes["brand"] == {"string": gpu.brand}
    assert attributes["architecture"] == {"string": "Hopper"}
    assert attributes["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attributes["driverVersion"] == {"version": "550.54.15"}
    assert attributes["cudaDriverVersion"] == {"version": "12.4.0"}
    assert attributes["pciBusID"] == {"string": gpu.pci_bus_id.lower()[4:]}
    assert attributes[PCIE_ROOT]["string"].startswith("pci0000:")
    assert "numaNode" not in attributes  # the preset's sysfs says -1: none
    assert first.capacity["memory"] == {"value": f"{gpu.memory_mib}Mi"}
    assert first.nodes == (gpu.node,)
    numa = tmp_path / "bus/pci/devices" / gpu.pci_bus_id.lower()[4:] / "numa_node"
    numa.chmod(0o644)
    numa.write_text("1\n")
    again = dra_devices(inventory, sysfs_root=tmp_path)[0]
    assert again.attributes["numaNode"] == {"int": 1}
    # The API's limit: 32 attributes and capacities per device.
    assert all(len(d.attributes) + len(d.capacity) <= 32 for d in devices)


def test_a_mig_gpu_is_offered_as_its_mig_devices_only(tmp_path: Path) -> None:
    inventory = _inventory("a100x8-570-mig", tmp_path)
    devices = dra_devices(inventory, sysfs_root=tmp_path)
    mig_gpus = [g for g in inventory.gpus if g.mig_enabled]
    assert mig_gpus
    migs = [d for d in devices if d.kind == "mig"]
    assert len(migs) == sum(len(g.migs) for g in mig_gpus)
    assert {d.gpu for d in devices if d.kind == "gpu"}.isdisjoint(g.index for g in mig_gpus)
    gpu = mig_gpus[0]
    mig = gpu.migs[0]
    device = next(d for d in migs if d.uuid == mig.uuid)
    profile = mig.profile.replace(".", "-")
    expected = f"gpu-{gpu.index}-mig-{profile}-{mig.gpu_instance}-{mig.compute_instance}"
    assert device.name == expected
    assert device.attributes["profile"] == {"string": mig.profile}
    assert device.attributes["parentUUID"] == {"string": gpu.uuid}
    assert device.capacity["memory"] == {"value": f"{mig.memory_mib}Mi"}
    assert device.capacity["memorySlices"] == {"value": str(mig.slices_gi)}
    assert device.nodes == (gpu.node, *mig.caps)
    assert all(LABEL.match(d.name) for d in devices)
    assert len({d.name for d in devices}) == len(devices)


def test_gpus_joined_by_nvlink_share_a_domain_and_lone_gpus_have_none(tmp_path: Path) -> None:
    inventory = _inventory("h100x4-550", tmp_path)
    devices = dra_devices(inventory, sysfs_root=tmp_path, nvlinks={(0, 1): 3, (2, 1): 1})
    domains = [d.attributes.get("nvlinkDomain") for d in devices]
    assert domains[0] == domains[1] == domains[2] == {"string": inventory.gpus[0].uuid}
    assert domains[3] is None
    assert nvlink_domains(inventory, {(0, 1): 0}) == {}


def test_gpus_on_the_same_nvswitches_share_a_domain(tmp_path: Path) -> None:
    """HGX: no link joins two GPUs, every link reaches a switch; GPUs sharing a switch (even
    through a third GPU's) are one domain, a GPU alone on its switch is on none."""
    inventory = _inventory("h100x4-550", tmp_path)
    c3, c4, c9 = "00000000:c3:00.0", "00000000:c4:00.0", "00000000:c9:00.0"
    switches = {0: frozenset({c3, c4}), 1: frozenset({c4}), 2: frozenset({c3}), 3: frozenset({c9})}
    domains = nvlink_domains(inventory, {}, switches)
    assert domains == {i: inventory.gpus[0].uuid for i in (0, 1, 2)}
    together = nvlink_domains(inventory, {(2, 3): 2}, switches)  # and a bridge to GPU 3
    assert set(together.values()) == {inventory.gpus[0].uuid} and len(together) == 4


def test_pcie_root_is_read_through_the_bus_link_and_absent_where_sysfs_is_flat(
    tmp_path: Path,
) -> None:
    inventory = _inventory("h100x4-550", tmp_path / "linked")
    roots = {
        d.attributes[PCIE_ROOT]["string"]
        for d in dra_devices(inventory, sysfs_root=tmp_path / "linked")
    }
    assert roots and all(re.match(r"^pci0000:[0-9a-f]{2}$", r) for r in roots)
    flat = tmp_path / "flat"
    for gpu in inventory.gpus:
        (flat / "bus/pci/devices" / gpu.pci_bus_id.lower()[4:]).mkdir(parents=True)
    assert all(PCIE_ROOT not in d.attributes for d in dra_devices(inventory, sysfs_root=flat))


def test_versions_are_semantic() -> None:
    assert semver("12.4") == "12.4.0"
    assert semver("9.0") == "9.0.0"
    assert semver("570.86.15") == "570.86.15"
    assert semver("535.104.05") == "535.104.5"
