"""Topology, NUMA and MIG attributes of the simulated NVML, read through pynvml (in a
subprocess) and sysfs, for the topology presets."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from integration.simdriver import SimDriver, preset
from integration.simdriver.spec import NVSWITCH_BUS_IDS

_PROBE = r"""
import json, pynvml as n
n.nvmlInit()
count = n.nvmlDeviceGetCount()
h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
bus = [n.nvmlDeviceGetPciInfo(x).busId for x in h]
bus = [b.decode() if isinstance(b, bytes) else b for b in bus]
out = {"links": [], "types": [], "ancestor": [], "numa": []}
for i, x in enumerate(h):
    links, types = [], []
    for link in range(n.NVML_NVLINK_MAX_LINKS):
        try:
            if n.nvmlDeviceGetNvLinkState(x, link) != n.NVML_FEATURE_ENABLED:
                continue
        except (n.NVMLError_NotSupported, n.NVMLError_InvalidArgument):
            break
        remote = n.nvmlDeviceGetNvLinkRemotePciInfo(x, link).busId
        links.append(remote.decode() if isinstance(remote, bytes) else remote)
        types.append(n.nvmlDeviceGetNvLinkRemoteDeviceType(x, link))
    out["links"].append([bus.index(r) if r in bus else r for r in links])
    out["types"].append(sorted(set(types)))
    out["ancestor"].append([n.nvmlDeviceGetTopologyCommonAncestor(x, y) for y in h])
    try:
        out["numa"].append(n.nvmlDeviceGetNumaNodeId(x))
    except n.NVMLError_NotSupported:
        out["numa"].append(None)
print(json.dumps(out))
"""


def _probe(driver: SimDriver, script: str = _PROBE) -> dict[str, list[object]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVCT_SIM_")}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env | driver.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, list[object]] = json.loads(proc.stdout)
    return out


def _numa_from_sysfs(driver: SimDriver) -> list[int]:
    devices = driver.sys_root / "bus/pci/devices"
    by_bus = {
        g.pci_bus_id: int((devices / _sysfs_name(g.pci_bus_id) / "numa_node").read_text())
        for g in driver.spec.gpus
    }
    return [by_bus[g.pci_bus_id] for g in sorted(driver.spec.gpus, key=lambda g: g.minor)]


def _sysfs_name(bus_id: str) -> str:
    dom, bus, rest = bus_id.split(":")
    return f"{int(dom, 16):04x}:{bus.lower()}:{rest.lower()}"


# NVML_TOPOLOGY_* levels
INT, S, M, HB, SYS = 0, 10, 20, 30, 50


def test_nvlink_pairs(sim_factory) -> None:  # type: ignore[no-untyped-def]
    drv = sim_factory("h100pcie-x8-nvlink-pairs")
    out = _probe(drv)
    assert out["links"] == [[i ^ 1] * 3 for i in range(8)]
    assert out["types"] == [[0]] * 8  # NVML_NVLINK_DEVICE_TYPE_GPU
    assert out["ancestor"][0] == [INT, S, M, M, SYS, SYS, SYS, SYS]
    assert out["ancestor"][5] == [SYS, SYS, SYS, SYS, S, INT, M, M]
    assert out["numa"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert _numa_from_sysfs(drv) == out["numa"]


def test_nvswitch_all_to_all(sim_factory) -> None:  # type: ignore[no-untyped-def]
    drv = sim_factory("h100x8-nvswitch")
    out = _probe(drv)
    for links in out["links"]:
        assert isinstance(links, list) and len(links) == 18
        assert sorted(set(links)) == sorted(NVSWITCH_BUS_IDS)  # every GPU on every switch
    assert out["types"] == [[2]] * 8  # NVML_NVLINK_DEVICE_TYPE_SWITCH
    assert out["ancestor"][2] == [M, M, INT, S, SYS, SYS, SYS, SYS]


def test_pcie_two_switches(sim_factory) -> None:  # type: ignore[no-untyped-def]
    drv = sim_factory("l40sx8-pcie")
    out = _probe(drv)
    assert out["links"] == [[]] * 8
    assert out["ancestor"][0] == [INT, S, S, S, SYS, SYS, SYS, SYS]
    assert out["ancestor"][7] == [SYS, SYS, SYS, SYS, S, S, S, INT]
    assert _numa_from_sysfs(drv) == [0, 0, 0, 0, 1, 1, 1, 1] == out["numa"]


def test_existing_preset_has_no_nvlink_and_no_numa(h100x4) -> None:  # type: ignore[no-untyped-def]
    out = _probe(h100x4)
    assert out["links"] == [[]] * 4
    assert out["numa"] == [None] * 4
    assert out["ancestor"][0] == [INT, HB, HB, HB]
    assert _numa_from_sysfs(h100x4) == [-1] * 4


_MIG_PROBE = r"""
import json, pynvml as n
n.nvmlInit()
names = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    for j in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        except n.NVMLError_NotFound:
            continue
        a = n.nvmlDeviceGetAttributes_v2(m)
        # How NVIDIA's device plugin names a MIG resource.
        names.append(f"{a.gpuInstanceSliceCount}g.{(a.memorySizeMB + 1023) // 1024}gb")
print(json.dumps(names))
"""


def test_mig_attributes_name_the_profiles(a100mig) -> None:  # type: ignore[no-untyped-def]
    names = _probe(a100mig, _MIG_PROBE)
    want = [m.profile for g in sorted(a100mig.spec.gpus, key=lambda g: g.minor) for m in g.migs]
    assert names == want
    assert len(set(want)) > 1  # a mixed-profile preset


def test_a_bad_nvlink_bus_id_is_refused() -> None:
    spec = preset("h100pcie-x8-nvlink-pairs")
    bad = dataclasses.replace(spec.gpus[0], nvlinks=("not-a-bus-id",))
    with pytest.raises(ValueError):
        dataclasses.replace(spec, gpus=(bad, *spec.gpus[1:])).validate()
