"""A claim's compute time-slice interval, set on its GPUs at prepare and restored at unprepare.

NVIDIA's DRA driver sets ``timeSlicingConfig.interval`` with the host driver's
``nvidia-smi compute-policy -i <uuid> --set-timeslice <n>`` (Default 0, Short 1, Medium 2,
Long 3), per GPU, and sets Default again when the claim is unprepared; nvct does the same with
the driver's own nvidia-smi (under the driver root, with its libraries). The setting is the
GPU's (the driver keeps it until changed or rebooted), so a claim at ``Default`` runs nothing:
a GPU is only touched for a claim that asked for another interval, and given back at Default.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

import structlog

from nvct.base.errors import NvctError
from nvct.dra.config import INTERVALS  # in the driver's order: Default 0 ... Long 3

TIMEOUT_S = 30.0  # nvidia-smi initialises NVML: seconds on a large node without persistence

log = structlog.get_logger("nvct-dra-plugin")


class TimeSliceError(NvctError):
    """nvidia-smi did not set a GPU's time-slice."""


class TimeSlices:
    """Sets GPUs' compute time-slices with the host driver's nvidia-smi."""

    def __init__(self, program: tuple[Path, str] | str) -> None:
        """``program``: nvidia-smi and the LD_LIBRARY_PATH it needs, or the one line saying
        why there is none (then a claim asking for an interval is refused with it)."""
        self.program = program

    def set(self, uuids: Iterable[str], interval: str) -> None:
        """Give each GPU of ``uuids`` the time-slice ``interval`` (one of ``INTERVALS``).

        Raises:
            TimeSliceError: no nvidia-smi, or it refused or failed for a GPU.
        """
        if isinstance(self.program, str):
            raise TimeSliceError(
                f"time-slice interval {interval}: {self.program}",
                hint="install the driver's nvidia-smi on the node, or use interval: Default",
            )
        binary, library_path = self.program
        env = dict(os.environ)
        if library_path:
            env["LD_LIBRARY_PATH"] = ":".join(
                filter(None, (library_path, env.get("LD_LIBRARY_PATH")))
            )
        value = str(INTERVALS.index(interval))
        for uuid in uuids:
            argv = [str(binary), "compute-policy", "-i", uuid, "--set-timeslice", value]
            try:
                done = subprocess.run(
                    argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as err:
                raise TimeSliceError(f"{' '.join(argv)}: {err}") from err
            if done.returncode != 0:
                said = " ".join((done.stderr or done.stdout).split()) or f"exit {done.returncode}"
                raise TimeSliceError(
                    f"{' '.join(argv)} failed: {said}",
                    hint="give nvct-dra-plugin CAP_SYS_ADMIN (the chart's dra.sharing=true): the "
                    "driver sets a compute policy for its administrator only; or use interval: "
                    "Default",
                )
            log.info("timeslice_set", gpu=uuid, interval=interval)
