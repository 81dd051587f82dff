"""NVML events per GPU, as NVIDIA's plugin registers them: each physical GPU with the types it
supports (``wanted & nvmlDeviceGetSupportedEventTypes``), MIG devices through their parent GPU,
and each event routed back to the devices its GPU and GPU/compute-instance ids name.

A GPU that supports none of the wanted types, or refuses them, is left out of the set alone:
one NOT_SUPPORTED never turns events off for the other GPUs (a GeForce without ECC beside an
ECC GPU, a MIG node). The caller still asks every device whether it answers.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

NO_INSTANCE = 0xFFFFFFFF  # an event's gpuInstanceId/computeInstanceId: the whole GPU


@dataclass(frozen=True, slots=True)
class Route:
    """One watched device: its key (the caller's name for it), its GPU's handle address, and
    its GPU/compute instance ids (None: a whole GPU)."""

    key: str
    gpu: int
    gi: int | None = None
    ci: int | None = None


def address(handle: Any) -> int:
    """A handle's pointer value: events name their GPU by handle (a lost GPU cannot say its
    UUID)."""
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


def routes(nvml: Any, devices: Iterable[tuple[str, Any]]) -> tuple[list[Route], dict[int, Any]]:
    """(a route per (key, handle), the physical GPUs' handles by address). A MIG handle is
    routed through its parent GPU with its instance ids.

    Raises:
        NVMLError: a MIG device's parent or ids cannot be read.
    """
    found: list[Route] = []
    gpus: dict[int, Any] = {}
    for key, handle in devices:
        if _is_mig(nvml, handle):
            parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            gi = int(nvml.nvmlDeviceGetGpuInstanceId(handle))
            ci = int(nvml.nvmlDeviceGetComputeInstanceId(handle))
            gpus.setdefault(address(parent), parent)
            found.append(Route(key, address(parent), gi, ci))
        else:
            gpus.setdefault(address(handle), handle)
            found.append(Route(key, address(handle)))
    return found, gpus


def _is_mig(nvml: Any, handle: Any) -> bool:
    try:
        return bool(nvml.nvmlDeviceIsMigDeviceHandle(handle))
    except (nvml.NVMLError, AttributeError):
        return False


def register(nvml: Any, event_set: Any, gpus: Iterable[Any], wanted: int) -> dict[int, int]:
    """Register each GPU for ``wanted`` & what it supports; GPU address -> the mask registered
    (0: none, where it supports none or refuses)."""
    masks: dict[int, int] = {}
    for handle in gpus:
        try:
            mask = wanted & int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
            if mask:
                nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
        except nvml.NVMLError:
            mask = 0
        masks[address(handle)] = mask
    return masks


def matching(event: Any, watched: Iterable[Route]) -> list[str]:
    """The keys an event concerns: every device of its GPU for a GPU-wide event; for one that
    names an instance, that MIG device (and the GPU itself where it is watched whole)."""
    gpu = address(event.device)
    gi, ci = int(event.gpuInstanceId), int(event.computeInstanceId)
    out = []
    for r in watched:
        if r.gpu != gpu:
            continue
        whole = r.gi is None or gi == NO_INSTANCE
        if whole or (r.gi == gi and ci in (NO_INSTANCE, r.ci)):
            out.append(r.key)
    return out
