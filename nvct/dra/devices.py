"""What nvct-dra-plugin offers: one DRA device per whole GPU and per (static) MIG device.

From the same inventory the device plugin and the runtime read. A GPU in MIG mode is offered
as its MIG devices only: the scheduler knows nothing of what a MIG device takes from its GPU
(no shared counters here), and would otherwise give the GPU and one of its slices to two pods.

A device's name is a DNS label (the ResourceSlice rule: lower-case alphanumerics and ``-``,
at most 63 characters), stable while the GPUs are neither moved nor repartitioned:

- a GPU: ``gpu-<index>`` (``gpu-0``);
- a MIG device: ``gpu-<gpu index>-mig-<profile>-<gpu instance>-<compute instance>``, the
  profile's other characters as ``-`` (``1g.10gb`` on GI 9, CI 0 of GPU 0:
  ``gpu-0-mig-1g-10gb-9-0``).

The scheduler matches claims by the attributes (names in the driver's domain unless
qualified) and capacities, typed as the API writes them (``{"string": ...}``, ``{"int": ...}``,
``{"bool": ...}``, ``{"version": ...}`` with semantic versions, capacities as quantities).
Attributes NVIDIA's DRA driver has keep its names (``type``, ``uuid``, ``productName``,
``brand``, ``architecture``, ``cudaComputeCapability``, ``driverVersion``,
``cudaDriverVersion``, ``pciBusID``, ``resource.kubernetes.io/pcieRoot``, ``index``,
``minor``; MIG: ``profile``, ``parentUUID``, ``parentIndex``); nvct adds ``numaNode`` and
``nvlinkDomain``: GPUs joined by NVLink, directly, through others or through the NVSwitches
of an HGX board, share a domain (the fabric's clique ID where the GPU is on a completed NVLink
fabric), so a claim's
``matchAttribute`` on it gets GPUs that talk over NVLink. A GPU with no NVLink has no such
attribute, and the scheduler then never pairs it under that constraint.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvct.host.inventory import DeviceNode, Gpu, Inventory, MigDevice
from nvct.node.devices import numa_node, pci_file

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
MAX_NAME = 63  # a DNS label
_NOT_LABEL = re.compile(r"[^a-z0-9]+")

Pair = tuple[int, int]  # two GPU indices (nvct.node.topology's NVLink pairs)


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One device of this node's ResourceSlice and what a container that gets it needs."""

    name: str  # gpu-0, gpu-0-mig-1g-10gb-9-0
    uuid: str  # GPU- or MIG- UUID
    gpu: int  # the physical GPU's index
    kind: str  # gpu | mig
    nodes: tuple[DeviceNode, ...]  # the device's own nodes (control nodes are common edits)
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, str]]

    @property
    def memory_mib(self) -> int:
        """The device's memory (its ``memory`` capacity, written in Mi)."""
        return int(self.capacity["memory"]["value"].removesuffix("Mi"))

    def slice_entry(self) -> dict[str, Any]:
        """The device as a ResourceSlice's ``spec.devices[]`` item (``resource.k8s.io/v1``)."""
        return {
            "name": self.name,
            "attributes": {k: dict(v) for k, v in self.attributes.items()},
            "capacity": {k: dict(v) for k, v in self.capacity.items()},
        }


def device_name(gpu: Gpu, mig: MigDevice | None = None) -> str:
    """The device's DNS-label name (the module's rule)."""
    if mig is None:
        return f"gpu-{gpu.index}"
    profile = _NOT_LABEL.sub("-", mig.profile.lower()).strip("-")
    name = f"gpu-{gpu.index}-mig-{profile}-{mig.gpu_instance}-{mig.compute_instance}"
    return name[:MAX_NAME].rstrip("-")


def semver(version: str) -> str:
    """A driver's or CUDA's dotted version as the semantic version the API types
    (``550.54.15`` stays, ``12.4`` -> ``12.4.0``, ``9.0`` -> ``9.0.0``); leading zeros dropped."""
    parts = [str(int(p)) for p in re.findall(r"\d+", version)[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def pcie_root(sysfs_root: Path, bus_id: str) -> str | None:
    """The PCIe root complex above a device (``pci0000:00``), from where its
    ``bus/pci/devices`` entry links into ``devices/``; None where sysfs does not say."""
    entry = pci_file(sysfs_root, bus_id, "")
    try:
        real = Path(os.path.realpath(entry))
        parts = real.relative_to(os.path.realpath(sysfs_root / "devices")).parts
    except (OSError, ValueError):
        return None
    return parts[0] if parts and parts[0].startswith("pci") else None


def nvlink_domains(
    inventory: Inventory,
    nvlinks: Mapping[Pair, int],
    switches: Mapping[int, frozenset[str]] | None = None,
) -> dict[int, str]:
    """Each GPU index on an NVLink domain -> the domain's name: the fabric clique where the
    GPU has one, else the UUID of the lowest-indexed GPU of its linked group. GPUs are linked
    directly (``nvlinks``: links per pair) or through an NVSwitch both reach (``switches``:
    each GPU's switches by bus ID, HGX boards)."""
    parent = {g.index: g.index for g in inventory.gpus}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    linked: set[int] = set()
    joined = [(a, b) for (a, b), count in nvlinks.items() if count > 0]
    first_on: dict[str, int] = {}  # each switch -> the first GPU seen on it
    for gpu, reached in sorted((switches or {}).items()):
        for switch in sorted(reached):
            joined.append((first_on.setdefault(switch, gpu), gpu))
    for a, b in joined:
        if a in parent and b in parent and a != b:
            linked.update((a, b))
            ra, rb = root(a), root(b)
            parent[max(ra, rb)] = min(ra, rb)
    uuids = {g.index: g.uuid for g in inventory.gpus}
    out = {i: uuids[root(i)] for i in linked}
    out.update({g.index: g.fabric_clique for g in inventory.gpus if g.fabric_clique})
    return out


def dra_devices(
    inventory: Inventory,
    *,
    sysfs_root: Path,
    nvlinks: Mapping[Pair, int] | None = None,
    switches: Mapping[int, frozenset[str]] | None = None,
) -> list[DraDevice]:
    """The node's DRA devices, by GPU index then MIG device; ``nvlinks`` (links per pair of
    GPU indices) and ``switches`` (each GPU's NVSwitches), as the device plugin's topology
    reads them from NVML, give the domains."""
    domains = nvlink_domains(inventory, nvlinks or {}, switches)
    out: list[DraDevice] = []
    for gpu in inventory.gpus:
        common = _gpu_attributes(inventory, gpu, sysfs_root, domains.get(gpu.index))
        own = (gpu.node,) if gpu.node is not None else ()
        if not gpu.mig_enabled:
            attributes = {"type": _str("gpu"), "uuid": _str(gpu.uuid), **common}
            capacity = {"memory": _mib(gpu.memory_mib)}
            out.append(DraDevice(device_name(gpu), gpu.uuid, gpu.index, "gpu", own, attributes,
                                 capacity))  # fmt: skip
            continue
        for mig in gpu.migs:
            attributes = {
                "type": _str("mig"),
                "uuid": _str(mig.uuid),
                "profile": _str(mig.profile),
                "parentUUID": _str(gpu.uuid),
                "parentIndex": {"int": gpu.index},
                **common,
            }
            attributes.pop("index")
            out.append(
                DraDevice(
                    device_name(gpu, mig),
                    mig.uuid,
                    gpu.index,
                    "mig",
                    own + tuple(mig.caps),
                    attributes,
                    _mig_capacity(mig),
                )
            )
    return out


def _gpu_attributes(
    inventory: Inventory, gpu: Gpu, sysfs_root: Path, domain: str | None
) -> dict[str, Mapping[str, Any]]:
    attributes: dict[str, Mapping[str, Any]] = {
        "index": {"int": gpu.index},
        "minor": {"int": gpu.minor},
        "productName": _str(gpu.name),
        "brand": _str(gpu.brand),
        "architecture": _str(gpu.architecture),
        "cudaComputeCapability": {"version": semver(gpu.compute_capability)},
        "driverVersion": {"version": semver(inventory.driver_version)},
        "cudaDriverVersion": {"version": semver(inventory.cuda_version)},
        "pciBusID": _str(_short_bus_id(gpu.pci_bus_id)),
    }
    root = pcie_root(sysfs_root, gpu.pci_bus_id)
    if root is not None:
        attributes[PCIE_ROOT] = _str(root)
    numa = numa_node(sysfs_root, gpu.pci_bus_id)
    if numa is not None:
        attributes["numaNode"] = {"int": numa}
    if domain:
        attributes["nvlinkDomain"] = _str(domain)
    return attributes


def _mig_capacity(mig: MigDevice) -> dict[str, Mapping[str, str]]:
    capacity: dict[str, Mapping[str, str]] = {"memory": _mib(mig.memory_mib)}
    counts: Sequence[tuple[str, int]] = (
        ("memorySlices", mig.slices_gi),
        ("multiprocessors", mig.multiprocessors),
        ("copyEngines", mig.engines_copy),
        ("decoders", mig.engines_decoder),
        ("encoders", mig.engines_encoder),
        ("jpegEngines", mig.engines_jpeg),
        ("ofaEngines", mig.engines_ofa),
    )
    # A MIG device NVML gave no attributes for has 0 slices: say nothing rather than 0.
    capacity.update({k: {"value": str(v)} for k, v in counts if mig.slices_gi})
    return capacity


def _short_bus_id(bus_id: str) -> str:
    """``0000:3b:00.0``: the 16-bit domain form sysfs and NVIDIA's driver publish."""
    domain, _, rest = bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def _str(value: str) -> dict[str, str]:
    return {"string": value}


def _mib(mib: int) -> dict[str, str]:
    return {"value": f"{mib}Mi"}
