"""GetPreferredAllocation's policy, as a table of cases over synthetic topologies."""

from __future__ import annotations

import random

import pytest

from nvct.deviceplugin.preferred import pcie_score, preferred
from nvct.node.devices import PluginDevice
from nvct.node.topology import Topology


def gpu(i: int, bus: int, numa: int | None) -> PluginDevice:
    return PluginDevice(f"GPU-{i}", f"GPU-{i}", str(i), i, f"00000000:{bus:02X}:00.0", numa, i)


# 8 GPUs: two PCIe switches (buses 0x1x and 0x2x on NUMA 0, 0x8x and 0x9x on NUMA 1)
PCIE = [gpu(i, bus, numa) for i, (bus, numa) in enumerate(
    [(0x18, 0), (0x19, 0), (0x2A, 0), (0x2B, 0), (0x8A, 1), (0x8B, 1), (0x9C, 1), (0x9D, 1)]
)]  # fmt: skip
PAIRS = {frozenset({0, 1}), frozenset({2, 3}), frozenset({4, 5}), frozenset({6, 7})}


def nvlink_pairs(a: PluginDevice, b: PluginDevice) -> int:
    return 4 if frozenset({a.gpu, b.gpu}) in PAIRS else 0


def ids(*n: int) -> list[str]:
    return [f"GPU-{i}" for i in n]


CASES = [
    # (name, available, must include, size, links, expected)
    ("one device: lowest index", ids(3, 1, 2), [], 1, None, ids(1)),
    ("a pair under one PCIe switch", ids(0, 2, 3, 4), [], 2, None, ids(2, 3)),
    ("a pair on one NUMA node before a cross-CPU one", ids(1, 2, 4), [], 2, None, ids(1, 2)),
    ("must include joins its neighbour", ids(0, 1, 4, 5), ids(5), 2, None, ids(4, 5)),
    ("NVLink pair wins over PCIe neighbours", ids(1, 2, 3, 4, 5), [], 2, nvlink_pairs, ids(2, 3)),
    ("4 GPUs: two whole NVLink pairs", ids(*range(8)), [], 4, nvlink_pairs, ids(0, 1, 2, 3)),
    ("odd request keeps other pairs whole", ids(0, 1, 2, 4, 5), [], 1, nvlink_pairs, ids(2)),
    ("3 of a broken pair and a pair", ids(1, 2, 3, 6, 7), [], 3, nvlink_pairs, ids(1, 2, 3)),
    ("must include already the full size", ids(0, 1, 2), ids(2, 0), 2, None, ids(0, 2)),
    ("fewer candidates than asked: all", ids(4, 6), [], 3, None, ids(4, 6)),
]


@pytest.mark.parametrize(("name", "available", "must", "size", "links", "expected"), CASES)
def test_policy(name, available, must, size, links, expected) -> None:
    candidates = [d for d in PCIE if d.id in available]
    answer = preferred(candidates, must, size, *([links] if links else []))
    assert answer == expected, name


def test_deterministic_whatever_the_order() -> None:
    answers = set()
    for seed in range(20):
        shuffled = PCIE[:]
        random.Random(seed).shuffle(shuffled)  # noqa: S311 - an order, not a secret
        answers.add(tuple(preferred(shuffled, [], 4, nvlink_pairs)))
    assert len(answers) == 1


def test_mig_devices_spread_over_gpus() -> None:
    migs = [
        PluginDevice(
            f"MIG-{g}{m}", f"MIG-{g}{m}", f"{g}:{m}", g, f"00000000:{0x18 + g:02X}:00.0", 0, g
        )
        for g in range(2)
        for m in range(3)
    ]
    assert preferred(migs, [], 2) == ["MIG-00", "MIG-10"]
    assert preferred(migs, ["MIG-01"], 3) == ["MIG-01", "MIG-10", "MIG-00"]


def test_nvmls_common_ancestor_decides_and_numa_overrides_it() -> None:
    """NVML's answer wins over the address guess; two NUMA nodes are across CPUs anyway."""
    # GPUs 1 and 2 look apart by their bus numbers, NVML puts them under one switch
    topology = Topology({}, {(1, 2): 50, (2, 3): 30, (1, 3): 30, (3, 4): 50})
    close = topology.pcie_closeness(pcie_score)
    by_index = {d.gpu: d for d in PCIE}
    assert pcie_score(by_index[1], by_index[2]) == 30
    assert preferred(PCIE[1:4], [], 2, pcie=close) == ids(1, 2)
    assert close(by_index[3], by_index[4]) == 10  # NUMA 0 and 1 (sysfs): across CPUs
    assert close(by_index[0], by_index[1]) == 50  # no NVML answer: the guess
