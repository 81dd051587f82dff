"""How the GPUs are joined, read from NVML once at start: NVLink links between two GPUs, the
NVSwitches each GPU's links reach (HGX boards: every link goes to a switch, none to a GPU, and
GPUs on the same switches are all-to-all connected through them), and their PCIe closeness by
NVML's common ancestor (the same switch, several switches, one host bridge, one NUMA node, or
across CPUs). GetPreferredAllocation scores sets from these tables without asking NVML again
(NVIDIA's plugin queries links per request: seconds on 8 GPUs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from nvct.node.devices import PluginDevice

MAX_LINKS = 18
NVLINK_SWITCH = 2  # nvmlIntNvLinkDeviceType_t: NVML_NVLINK_DEVICE_TYPE_SWITCH
# NVML's nvmlGpuTopologyLevel_t -> closeness; INTERNAL (0) is one GPU with itself.
_ANCESTOR_SCORES = {10: 50, 20: 40, 30: 30, 40: 20, 50: 10}
ACROSS_CPUS = 10

Pair = tuple[int, int]
Closeness = Callable[[PluginDevice, PluginDevice], int]


def _pair(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)


@dataclass(frozen=True, slots=True)
class Topology:
    """NVLink counts and PCIe closeness per pair of physical GPUs (by index), and the NVSwitches
    (their PCI bus IDs, lower case) each GPU's links reach."""

    nvlinks: Mapping[Pair, int]
    pcie: Mapping[Pair, int]
    switches: Mapping[int, frozenset[str]] = field(default_factory=dict)

    def links(self, a: PluginDevice, b: PluginDevice) -> int:
        """NVLink links between the GPUs of ``a`` and ``b``."""
        return self.nvlinks.get(_pair(a.gpu, b.gpu), 0)

    def pcie_closeness(self, fallback: Closeness) -> Closeness:
        """NVML's PCIe closeness of two GPUs, ``fallback`` where NVML did not answer; GPUs
        on two NUMA nodes (sysfs) are across CPUs whatever NVML says."""

        def closeness(a: PluginDevice, b: PluginDevice) -> int:
            if None not in (a.numa_node, b.numa_node) and a.numa_node != b.numa_node:
                return ACROSS_CPUS
            known = self.pcie.get(_pair(a.gpu, b.gpu))
            return fallback(a, b) if known is None else known

        return closeness


def read_topology(nvml: Any, devices: Iterable[PluginDevice]) -> Topology:
    """The links and common ancestors of ``devices``' GPUs, asked once through pynvml."""
    gpus = {d.gpu: d for d in devices}
    handles: dict[int, Any] = {}
    for index, device in gpus.items():
        try:
            handles[index] = nvml.nvmlDeviceGetHandleByUUID(device.uuid)
        except nvml.NVMLError:
            continue
    by_bus = {d.bus_id.lower(): index for index, d in gpus.items()}
    seen: dict[Pair, int] = {}
    switches: dict[int, set[str]] = {}
    for index, handle in handles.items():
        for link in range(MAX_LINKS):
            try:
                if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                    continue
                remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)  # the _v2 call
            except (nvml.NVMLError, AttributeError):
                break
            bus = remote.busId.decode() if isinstance(remote.busId, bytes) else remote.busId
            other = by_bus.get(bus.lower())
            if other is not None and other != index:
                key = _pair(index, other)
                seen[key] = seen.get(key, 0) + 1
            elif other is None and _to_switch(nvml, handle, link):
                switches.setdefault(index, set()).add(bus.lower())
    # Each link is seen from both of its GPUs.
    nvlinks = {pair: (count + 1) // 2 for pair, count in seen.items()}
    pcie: dict[Pair, int] = {}
    for a, b in combinations(sorted(handles), 2):
        try:
            level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b]))
        except (nvml.NVMLError, AttributeError):
            continue
        if level in _ANCESTOR_SCORES:
            pcie[(a, b)] = _ANCESTOR_SCORES[level]
    return Topology(nvlinks, pcie, {i: frozenset(s) for i, s in switches.items()})


def _to_switch(nvml: Any, handle: Any, link: int) -> bool:
    """Whether NVML says ``link`` ends at an NVSwitch (a far end that is no GPU of ours may
    also be another node's GPU or a GPU NVML does not show: only a switch joins GPUs)."""
    try:
        return int(nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)) == NVLINK_SWITCH
    except (nvml.NVMLError, AttributeError):
        return False
