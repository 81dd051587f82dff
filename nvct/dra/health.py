"""The DRA devices' health, from the node's one health watch and policy (``nvct.node.health``:
the device plugin's NVML watch and state machine), into the ResourceSlices: each transition
becomes ``Publisher.health`` (a device taint, or the device left out where the API server drops
taints).

``HealthFeed(publisher, devices, config).run(stop)`` on its own thread, beside
``Publisher.run``: NVML is opened from the configured driver root, every device is asked once
before anything else (a GPU that does not answer, or whose recovery action asks for a reset, is
tainted from the first slice on), then events are waited for in short slices, and quiet periods
end on time. A step that raises is logged and retried after a pause: its devices must not be
left looking healthy by a dead loop, so they are marked Unhealthy until a step succeeds again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from nvct.config import Config
from nvct.dra.devices import DraDevice
from nvct.dra.publish import Publisher
from nvct.node.devices import PluginDevice
from nvct.node.health.latches import LatchFile
from nvct.node.health.state import HEALTHY, Health, Transition

if TYPE_CHECKING:
    from nvct.node.health.nvml_watch import NvmlWatch

RETRY_S = 1.0

log = structlog.get_logger("nvct-dra-plugin")


def watched(devices: Sequence[DraDevice]) -> list[PluginDevice]:
    """The DRA devices as the NVML watch knows devices: by UUID, named by the DRA name."""
    return [PluginDevice(d.name, d.uuid, str(d.gpu), d.gpu, "", None, -1) for d in devices]


class HealthFeed:
    def __init__(
        self,
        publisher: Publisher,
        devices: Sequence[DraDevice],
        config: Config,
        *,
        library: Path | None = None,
        latches: LatchFile | None = None,
    ) -> None:
        self.publisher = publisher
        self.devices = list(devices)
        self.config = config
        self.library = library
        self.health = Health(
            [d.name for d in devices],
            quiet=config.device_plugin.quiet_period,
            ignored_xids=config.device_plugin.ignored_xids,
            uuids={d.name: d.uuid for d in devices},
            latches=latches,
        )

    def _open(self) -> NvmlWatch:
        from nvct.host.arch import host_arch
        from nvct.host.discover.libraries import driver_nvml_library
        from nvct.node.health.nvml_watch import NvmlWatch

        library = self.library or driver_nvml_library(Path(self.config.driver_root), host_arch())
        watch = NvmlWatch(library)
        watch.watch(watched(self.devices))
        return watch

    def _tell(self, transitions: Sequence[Transition]) -> None:
        for t in transitions:
            log.info("health", device=t.device, health=t.health, reason=t.reason)
            self.publisher.health(t.device, t.health == HEALTHY, t.reason)

    def run(self, stop: threading.Event) -> None:
        """Until ``stop``; NvctError when NVML cannot be opened at the start."""
        watch = self._open()
        try:
            self._tell(self.health.restore(time.monotonic()))
            self._tell(watch.first_look(self.health))
            while not stop.is_set():
                try:
                    self._tell(watch.step(self.health) + self.health.tick(time.monotonic()))
                except Exception as err:  # a driver surprise must not end the watch silently
                    log.exception("health_step_failed", error=str(err))
                    for device in self.devices:
                        self.publisher.health(device.name, False, f"health watch failed: {err}")
                    if stop.wait(RETRY_S):
                        break
                    self._tell([Transition(d.name, self.health.state[d.name],
                                           self.health.reason.get(d.name, ""))
                                for d in self.devices])  # fmt: skip
        finally:
            watch.close()
