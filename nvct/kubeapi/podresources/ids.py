"""Device IDs as the kubelet reports them, mapped back to the GPUs they name.

The kubelet hands out exactly the IDs a device plugin advertised: a GPU's UUID or index
(``GPU-…``, ``0``), a MIG device's UUID or ``<gpu>:<mig>`` index, and for shared GPUs a replica
``<id>::<n>`` (NVIDIA's and nvct's time-slicing and MPS naming; GKE writes ``<id>/vgpu<n>``).
Pure values and functions: no gRPC, no NVML.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
MIG_PREFIX = "nvidia.com/mig-"
_GKE_VGPU = re.compile(r"/vgpu\d+$")


@dataclass(frozen=True, slots=True)
class Owner:
    """The container a device is allocated to."""

    pod: str
    namespace: str
    container: str


@dataclass(frozen=True, slots=True)
class Held:
    """One device ID one container holds, as pod-resources ``List`` reports it."""

    owner: Owner
    resource: str
    device_id: str


@dataclass(frozen=True, slots=True)
class GpuIds:
    """What names one physical GPU: its UUID and index, and its MIG devices' UUIDs and
    ``<gpu>:<mig>`` indexes."""

    uuid: str
    index: int
    migs: tuple[tuple[str, int], ...] = ()  # (MIG UUID, MIG index)


def is_gpu_resource(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether a kubelet resource name is one of NVIDIA's GPU resources (or a configured one)."""
    return name in GPU_RESOURCES or name.startswith(MIG_PREFIX) or name in set(extra)


def base_id(device_id: str) -> str:
    """The device a replica ID shares: ``GPU-a::3`` → ``GPU-a``, ``GPU-a/vgpu2`` → ``GPU-a``."""
    head, _, _ = device_id.partition("::")
    return _GKE_VGPU.sub("", head)


class DeviceMap:
    """Device ID (any of the forms above) → the UUID of the physical GPU it lives on."""

    def __init__(self, gpus: Iterable[GpuIds]) -> None:
        self._gpu: dict[str, str] = {}
        self._mig: dict[str, str] = {}  # MIG device ID (either form) -> its UUID
        for gpu in gpus:
            self._gpu[gpu.uuid] = self._gpu[str(gpu.index)] = gpu.uuid
            for mig_uuid, mig_index in gpu.migs:
                for name in (mig_uuid, f"{gpu.index}:{mig_index}"):
                    self._gpu[name] = gpu.uuid
                    self._mig[name] = mig_uuid

    def gpu_of(self, device_id: str) -> str | None:
        """The parent GPU's UUID; None for an ID naming no GPU of this node."""
        return self._gpu.get(base_id(device_id))

    def is_mig(self, device_id: str) -> bool:
        """Whether the ID names a MIG device (rather than a whole GPU or its replica)."""
        return base_id(device_id) in self._mig

    def mig_of(self, device_id: str) -> str | None:
        """The MIG device's UUID; None for a whole GPU, its replica or an unknown ID."""
        return self._mig.get(base_id(device_id))


def owners_by_gpu(held: Iterable[Held], devices: DeviceMap) -> dict[str, list[Owner]]:
    """Each GPU's containers, each once, in the order the kubelet listed them; IDs of other
    nodes' or unknown devices are left out."""
    out: dict[str, list[Owner]] = {}
    for item in held:
        gpu = devices.gpu_of(item.device_id)
        if gpu is not None and item.owner not in out.setdefault(gpu, []):
            out[gpu].append(item.owner)
    return out


def owners_by_mig(held: Iterable[Held], devices: DeviceMap) -> dict[str, tuple[Owner, ...]]:
    """Each MIG device's containers (its own series' pod labels), each once."""
    out: dict[str, list[Owner]] = {}
    for item in held:
        mig = devices.mig_of(item.device_id)
        if mig is not None and item.owner not in out.setdefault(mig, []):
            out[mig].append(item.owner)
    return {mig: tuple(owners) for mig, owners in out.items()}


def replicas_by_gpu(allocatable: Iterable[str], devices: DeviceMap) -> dict[str, int]:
    """How many whole-GPU IDs (the GPU itself or its replicas) the kubelet can allocate for
    each GPU; MIG devices are not replicas. A GPU the kubelet does not list is absent."""
    seen: dict[str, set[str]] = {}
    for device_id in allocatable:
        gpu = devices.gpu_of(device_id)
        if gpu is not None and not devices.is_mig(device_id):
            seen.setdefault(gpu, set()).add(device_id)
    return {gpu: len(ids) for gpu, ids in seen.items()}


def replicas_by_mig(allocatable: Iterable[str], devices: DeviceMap) -> dict[str, int]:
    """How many IDs (the MIG device itself or its time-slicing replicas) the kubelet can
    allocate for each MIG device, by its UUID; a MIG device the kubelet does not list is absent."""
    seen: dict[str, set[str]] = {}
    for device_id in allocatable:
        mig = devices.mig_of(device_id)
        if mig is not None:
            seen.setdefault(mig, set()).add(device_id)
    return {mig: len(ids) for mig, ids in seen.items()}
