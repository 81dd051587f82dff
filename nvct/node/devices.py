"""What the plugin advertises: one resource per kind of device, each device with its IDs.

From nvct's inventory (the same discovery the runtime uses): full GPUs as ``nvidia.com/gpu``;
MIG devices by strategy (``none``: MIG devices are not advertised; ``single``: each MIG device
as ``nvidia.com/gpu``, when every GPU is in MIG mode with one profile; ``mixed``: one resource
``nvidia.com/mig-<profile>`` per profile, the other GPUs staying ``nvidia.com/gpu``). A
device's ID, what the kubelet sees and checkpoints, is always its UUID: indices shift when a GPU
falls off the bus, and the kubelet would then map running pods onto other GPUs.
``device-id-strategy = "index"`` changes only what a container is told (``allocate``), as
NVIDIA's plugin does. Its NUMA node is the GPU's sysfs ``numa_node``.

Shared GPUs (``nvct.node.sharing``) are advertised as replicas ``<uuid>::<n>``, NVIDIA's IDs, so
tools that strip ``::n`` keep working; renamed ones as ``<resource>.shared`` or the resource
their rule names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from nvct.base.errors import NvctError
from nvct.config.kubernetes import MIG_STRATEGIES
from nvct.host.inventory import Inventory
from nvct.node.files import socket_name
from nvct.node.sharing import SharingPlan, base_resource, shareable, single_fits

VENDOR = "nvidia.com"


class DeviceConfigError(NvctError):
    """The GPUs cannot be advertised as configured."""


@dataclass(frozen=True, slots=True)
class PluginDevice:
    """One advertised device."""

    id: str  # what kubelet sees: the UUID (<uuid>::<n> for a replica)
    uuid: str  # GPU- or MIG- UUID
    index: str  # nvidia-smi index, gpu:mig for MIG devices
    gpu: int  # the physical GPU's index
    bus_id: str
    numa_node: int | None
    minor: int
    replica: int = -1  # n of <uuid>::<n>; -1: not shared
    sharing: str = "none"  # time-slicing | mps


@dataclass(frozen=True, slots=True)
class Resource:
    """An extended resource and its devices."""

    name: str  # nvidia.com/gpu, nvidia.com/mig-1g.10gb
    devices: tuple[PluginDevice, ...]

    @property
    def socket_name(self) -> str:
        """The plugin's socket file in the device-plugins directory (NVIDIA's names)."""
        return socket_name(self.name)


def pci_file(sysfs_root: Path, bus_id: str, name: str) -> Path:
    """A PCI device's sysfs file (NVML's ``00000000:3B:00.0`` form: 16-bit domain there)."""
    domain, _, rest = bus_id.lower().partition(":")
    return sysfs_root / "bus/pci/devices" / f"{domain[-4:]}:{rest}" / name


def numa_node(sysfs_root: Path, bus_id: str) -> int | None:
    """A PCI device's NUMA node from sysfs, or None."""
    try:
        node = int(pci_file(sysfs_root, bus_id, "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def pci_class(sysfs_root: Path, bus_id: str) -> str:
    """A PCI device's class from sysfs (``0x030200``), or "" when unreadable."""
    try:
        return pci_file(sysfs_root, bus_id, "class").read_text().strip().lower()
    except OSError:
        return ""


def replica_id(uuid: str, n: int) -> str:
    """NVIDIA's ID of a GPU's ``n``-th replica."""
    return f"{uuid}::{n}"


def resources(
    inventory: Inventory,
    *,
    mig_strategy: str,
    sysfs_root: Path,
    plan: SharingPlan | None = None,
) -> tuple[Resource, ...]:
    """The resources to serve, each with at least one device; the devices ``plan`` shares as
    their replicas.

    Raises:
        DeviceConfigError: ``single`` on GPUs that are not all in MIG mode with one profile.
    """
    if mig_strategy not in MIG_STRATEGIES:
        raise DeviceConfigError(
            f"MIG strategy {mig_strategy!r}", hint=f"use one of {', '.join(MIG_STRATEGIES)}"
        )
    by_name: dict[str, list[PluginDevice]] = {}
    migs = [(g, m) for g in inventory.gpus if g.mig_enabled for m in g.migs]
    if mig_strategy == "single" and migs and not single_fits(inventory):
        profiles = {m.profile for _, m in migs}
        raise DeviceConfigError(
            "MIG strategy single needs every GPU in MIG mode with one profile "
            f"(found {', '.join(sorted(profiles))})",
            hint="use mig-strategy mixed, or repartition the GPUs alike",
        )
    gpus = {g.index: g for g in inventory.gpus}
    numa = {index: numa_node(sysfs_root, g.pci_bus_id) for index, g in gpus.items()}
    # Which devices a MIG strategy advertises is the sharing plan's rule too: one statement.
    for found in shareable(inventory, mig_strategy):
        gpu = gpus[found.gpu]
        name = base_resource(found, mig_strategy)
        device = PluginDevice(
            found.uuid,
            found.uuid,
            found.index,
            gpu.index,
            gpu.pci_bus_id,
            numa[gpu.index],
            gpu.minor,
        )
        by_name.setdefault(f"{VENDOR}/{name}", []).append(device)
    if plan is not None and plan.shares:
        by_name = _shared(by_name, plan)
    return tuple(Resource(name, tuple(devices)) for name, devices in sorted(by_name.items()))


def _shared(
    by_name: dict[str, list[PluginDevice]], plan: SharingPlan
) -> dict[str, list[PluginDevice]]:
    out: dict[str, list[PluginDevice]] = {}
    for name, devices in by_name.items():
        for device in devices:
            share = plan.shares.get(device.uuid)
            if share is None:
                out.setdefault(name, []).append(device)
                continue
            target = out.setdefault(f"{VENDOR}/{share.resource}", [])
            target.extend(
                replace(device, id=replica_id(device.uuid, n), replica=n, sharing=share.strategy)
                for n in range(share.replicas)
            )
    return out
