"""The devices' health from NVML, live: XID and double-bit ECC events, whether each GPU still
answers (a GPU that fell off the bus answers GPU_IS_LOST), and its memory health (recovery
action, row remapping, retired pages).

Events are registered per physical GPU with the types it supports, MIG devices through their
GPU, and routed back by GPU and instance ids (``nvct.node.health.nvml_events``): a GPU without
ECC or a MIG node keeps its XIDs. NVML is loaded by absolute path from the driver root, never
through the caller's LD_LIBRARY_PATH. Events are waited for in short slices, and each slice
also asks every device a cheap question, so a lost GPU is noticed within one slice even where
the driver delivers no event for it. A shared GPU is asked once, and its answer and events go
to every replica. After a GPU was lost, NVML is shut down and initialised again (every few
seconds while it stays lost, and once when it answers again): a reset or re-bound GPU's old
handle and event registration are not to be trusted.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from nvct.host.discover.nvml import open_nvml
from nvct.node.devices import PluginDevice
from nvct.node.health.nvml_condition import read_condition
from nvct.node.health.nvml_events import Route, address, matching, register, routes
from nvct.node.health.state import Health, Transition

SLICE_MS = 200
DRAIN = 16  # events taken at once after a wait returns one
CONDITION_S = 1.0  # how often each GPU's memory health is read
REINIT_S = 5.0  # while a GPU stays lost, NVML is initialised again this often

log = structlog.get_logger("nvct-device-plugin")


class NvmlWatch:
    """NVML opened for the plugin's lifetime."""

    def __init__(self, library: Path) -> None:
        self.library = library
        self.nvml: Any = open_nvml(library)
        self.events: Any = None
        self.handles: dict[str, Any] = {}  # by UUID
        self.ids: dict[str, list[str]] = {}  # UUID -> the advertised IDs (replicas)
        self.routes: list[Route] = []
        self.gpus: dict[int, Any] = {}  # physical GPUs' handles by address
        self.masks: dict[int, int] = {}  # GPU address -> the event types registered
        self._lost: set[str] = set()
        self._reinit_at = 0.0
        self._condition_at = 0.0

    def watch(self, devices: Sequence[PluginDevice]) -> None:
        """Register the devices' GPUs for XID and double-bit ECC events (what each supports)."""
        for device in devices:
            self.ids.setdefault(device.uuid, []).append(device.id)
        self._open()

    def _open(self) -> None:
        nvml = self.nvml
        for uuid in self.ids:
            try:
                self.handles[uuid] = nvml.nvmlDeviceGetHandleByUUID(uuid)
            except nvml.NVMLError:
                if uuid not in self.handles:
                    raise  # at start: the inventory's GPU is not there
        self.routes, self.gpus = routes(nvml, self.handles.items())
        wanted = nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
        try:
            self.events = nvml.nvmlEventSetCreate()
        except (nvml.NVMLError, AttributeError):
            self.events = None
        self.masks = register(nvml, self.events, self.gpus.values(), wanted) if self.events else {}
        if self.events is not None and not any(self.masks.values()):
            self._free_events()  # no GPU delivers events: answers only

    def step(self, health: Health, now: Callable[[], float] = time.monotonic) -> list[Transition]:
        """Wait one slice for events, then ask each device; the transitions that result."""
        nvml = self.nvml
        out: list[Transition] = []
        if self.events is not None:
            touched: set[int] = set()
            for _ in range(DRAIN):
                try:
                    event = nvml.nvmlEventSetWait_v2(self.events, 0 if touched else SLICE_MS)
                except nvml.NVMLError as err:  # timeout: nothing to report
                    if not touched and getattr(err, "value", None) != nvml.NVML_ERROR_TIMEOUT:
                        time.sleep(SLICE_MS / 1000)  # a wait that fails at once must not spin
                    break
                touched.add(address(event.device))
                out += self._event(health, event, now())
            out += self._conditions(health, now(), only=touched)
        else:
            time.sleep(SLICE_MS / 1000)
        answered_again = self._answers(health, now, out)
        at = now()
        if answered_again or (self._lost and at >= self._reinit_at):
            self._reinit(answered_again, at)
        if at >= self._condition_at:
            self._condition_at = at + CONDITION_S
            out += self._conditions(health, at)
        return out

    def first_look(
        self, health: Health, now: Callable[[], float] = time.monotonic
    ) -> list[Transition]:
        """Ask every device once, before anything is advertised: whether it answers, and its
        GPU's condition (a GPU whose recovery action asks for a reset is never advertised
        Healthy)."""
        out: list[Transition] = []
        self._answers(health, now, out)
        self._condition_at = now() + CONDITION_S
        return out + self._conditions(health, now())

    def _answers(self, health: Health, now: Callable[[], float], out: list[Transition]) -> bool:
        """Ask each device whether it answers (into ``out``); whether a lost one answers
        again."""
        nvml = self.nvml
        answered_again = False
        for uuid, handle in self.handles.items():
            try:
                nvml.nvmlDeviceGetMemoryInfo(handle)
                ok, detail = True, ""
                answered_again |= uuid in self._lost
            except nvml.NVMLError as err:
                ok, detail = False, str(err)
                if getattr(err, "value", None) == nvml.NVML_ERROR_GPU_IS_LOST:
                    self._lost.add(uuid)
            for device_id in self.ids[uuid]:
                if (t := health.answered(device_id, ok, detail, now())) is not None:
                    out.append(t)
        return answered_again

    def _event(self, health: Health, event: Any, at: float) -> list[Transition]:
        nvml = self.nvml
        found: list[Transition] = []
        for uuid in matching(event, self.routes):
            for device_id in self.ids[uuid]:
                if event.eventType & nvml.nvmlEventTypeXidCriticalError:
                    t = health.xid(device_id, int(event.eventData), at)
                else:
                    t = health.ecc(device_id, at)
                if t is not None:
                    found.append(t)
        return found

    def _conditions(
        self, health: Health, at: float, only: set[int] | None = None
    ) -> list[Transition]:
        """Each (or each ``only``) GPU's memory health, to every device on it."""
        found: list[Transition] = []
        for gpu, handle in self.gpus.items():
            if only is not None and gpu not in only:
                continue
            keys = [r.key for r in self.routes if r.gpu == gpu]
            if any(k in self._lost for k in keys):
                continue  # it answers nothing; the lost answer says why
            condition = read_condition(self.nvml, handle)
            for key in keys:
                for device_id in self.ids[key]:
                    if (t := health.condition(device_id, condition, at)) is not None:
                        found.append(t)
        return found

    def _reinit(self, answered_again: bool, at: float) -> None:
        """Shut NVML down and initialise it again: new handles and event registrations."""
        nvml = self.nvml
        self._reinit_at = at + REINIT_S
        self._free_events()
        try:
            nvml.nvmlShutdown()
            nvml.nvmlInit()
            self._open()
        except nvml.NVMLError as err:
            log.warning("nvml_reinit_failed", error=str(err), retry_in_s=REINIT_S)
            return
        if answered_again:
            self._lost.clear()
        log.info(
            "nvml_reinitialised",
            reason="a lost GPU answers again" if answered_again else "a GPU is lost",
            events=self.events is not None,
        )

    def _free_events(self) -> None:
        if self.events is not None:
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlEventSetFree(self.events)
            self.events = None

    def close(self) -> None:
        """Release NVML."""
        try:
            self._free_events()
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass
