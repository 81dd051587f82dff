"""The devices' health from NVML, live: XID and double-bit ECC events, and whether each GPU
still answers (a GPU that fell off the bus answers GPU_IS_LOST).

NVML is loaded by absolute path from the driver root (as discovery does), never through the
caller's LD_LIBRARY_PATH. Events are waited for in short slices, and each slice also asks every
device a cheap question, so a lost GPU is noticed within one slice even where the driver (or
the simulated one) delivers no event for it. A shared GPU is asked once, and its answer and
events go to every replica.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nvct.deviceplugin.devices import PluginDevice
from nvct.deviceplugin.health import Health, Transition
from nvct.host.discover.nvml import open_nvml

SLICE_MS = 200


class NvmlWatch:
    """NVML opened for the plugin's lifetime."""

    def __init__(self, library: Path) -> None:
        self.nvml: Any = open_nvml(library)
        self.events: Any = None
        self.handles: dict[str, Any] = {}  # by UUID
        self.ids: dict[str, list[str]] = {}  # UUID -> the advertised IDs (replicas)

    def watch(self, devices: Sequence[PluginDevice]) -> None:
        """Register the devices for XID and double-bit ECC events (where supported)."""
        nvml = self.nvml
        for device in devices:
            if device.uuid not in self.handles:
                self.handles[device.uuid] = nvml.nvmlDeviceGetHandleByUUID(device.uuid)
            self.ids.setdefault(device.uuid, []).append(device.id)
        try:
            self.events = nvml.nvmlEventSetCreate()
            mask = nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
            for handle in self.handles.values():
                nvml.nvmlDeviceRegisterEvents(handle, mask, self.events)
        except (nvml.NVMLError, AttributeError):
            self.events = None  # older GPUs and the simulated driver: answers only

    def step(self, health: Health, now: Callable[[], float] = time.monotonic) -> list[Transition]:
        """Wait one slice for an event, then ask each device; the transitions that result."""
        nvml = self.nvml
        out: list[Transition] = []
        if self.events is not None:
            try:
                event = nvml.nvmlEventSetWait_v2(self.events, SLICE_MS)
            except nvml.NVMLError:
                event = None  # timeout, or nothing to report
            if event is not None:
                out += self._event(health, event, now())
        else:
            time.sleep(SLICE_MS / 1000)
        for uuid, handle in self.handles.items():
            try:
                nvml.nvmlDeviceGetMemoryInfo(handle)
                ok, detail = True, ""
            except nvml.NVMLError as err:
                ok, detail = False, str(err)
            for device_id in self.ids[uuid]:
                if (t := health.answered(device_id, ok, detail, now())) is not None:
                    out.append(t)
        return out

    def _event(self, health: Health, event: Any, at: float) -> list[Transition]:
        nvml = self.nvml
        matching = [
            i for u, h in self.handles.items() if _same(h, event.device) for i in self.ids[u]
        ]
        found: list[Transition] = []
        for device_id in matching:
            if event.eventType & nvml.nvmlEventTypeXidCriticalError:
                t = health.xid(device_id, int(event.eventData), at)
            else:
                t = health.ecc(device_id, at)
            if t is not None:
                found.append(t)
        return found

    def close(self) -> None:
        """Release NVML."""
        try:
            if self.events is not None:
                self.nvml.nvmlEventSetFree(self.events)
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def _same(a: Any, b: Any) -> bool:
    return bool(ctypes.cast(a, ctypes.c_void_p).value == ctypes.cast(b, ctypes.c_void_p).value)
