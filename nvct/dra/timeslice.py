"""A claim's compute time-slice interval, set on its GPUs at prepare and restored at unprepare.

NVIDIA's DRA driver sets ``timeSlicingConfig.interval`` with the host driver's
``nvidia-smi compute-policy -i <uuid> --set-timeslice <n>`` (Default 0, Short 1, Medium 2,
Long 3), per GPU, and sets Default again when the claim is unprepared; nvct does the same with
the driver's own nvidia-smi (``nvct.dra.smi``). The setting is the GPU's (the driver keeps it
until changed or rebooted), so a claim at ``Default`` runs nothing: a GPU is only touched for
a claim that asked for another interval, and given back at Default.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import structlog

from nvct.dra.config import INTERVALS  # in the driver's order: Default 0 ... Long 3
from nvct.dra.smi import run_smi

log = structlog.get_logger("nvct-dra-plugin")


class TimeSlices:
    """Sets GPUs' compute time-slices with the host driver's nvidia-smi."""

    def __init__(self, program: tuple[Path, str] | str) -> None:
        """``program``: nvidia-smi and the LD_LIBRARY_PATH it needs, or the one line saying
        why there is none (then a claim asking for an interval is refused with it)."""
        self.program = program

    def set(self, uuids: Iterable[str], interval: str) -> None:
        """Give each GPU of ``uuids`` the time-slice ``interval`` (one of ``INTERVALS``).

        Raises:
            SmiError: no nvidia-smi, or it refused or failed for a GPU.
        """
        value = str(INTERVALS.index(interval))
        for uuid in uuids:
            run_smi(
                self.program, ["compute-policy", "-i", uuid, "--set-timeslice", value],
                what=f"time-slice interval {interval}",
                instead="use interval: Default",
            )  # fmt: skip
            log.info("timeslice_set", gpu=uuid, interval=interval)
