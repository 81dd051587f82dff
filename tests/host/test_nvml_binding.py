"""pynvml bound to one simulated driver's NVML, then to another's, in one process: the second
answers for its own GPUs (pynvml's process-wide function-pointer cache must not keep calling
into the first library)."""

from __future__ import annotations

import os

import pytest

from integration.simdriver import cached_driver, preset
from nvct.host.arch import host_arch
from nvct.host.discover.libraries import driver_nvml_library
from nvct.host.discover.nvml import open_nvml
from tests.conftest import SIM_CACHE


def test_a_second_driver_library_answers_for_its_own_gpus() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the simulated driver creates device nodes with mknod")
    counts = []
    for name in ("h100x4-550", "t4x1-535"):
        sim = cached_driver(preset(name), SIM_CACHE)
        nvml = open_nvml(driver_nvml_library(sim.driver_root, host_arch()))
        try:
            counts.append(nvml.nvmlDeviceGetCount())
        finally:
            nvml.nvmlShutdown()
    assert counts == [4, 1]
