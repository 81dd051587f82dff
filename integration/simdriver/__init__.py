"""A simulated NVIDIA driver installation for tests on machines without a GPU.

`build_driver(preset("h100x4-550"), root)` writes a Debian-layout driver root: gcc-built ELF
libraries with NVIDIA's names and SONAMEs (a fake NVML and libcuda among them), nvidia-smi and
friends, firmware, ICD files, a real ld.so.cache, IPC sockets, /dev/nvidia* character devices
and the /proc/driver/nvidia files. See build.py for the layout and csrc/simcommon.h for the
device-visibility rule (env NVCT_SIM_DEV_ROOT).
"""

from __future__ import annotations

from . import inject
from .build import (
    ENV_DEV_ROOT,
    LIB32,
    LIB64,
    SimDriver,
    SimDriverError,
    build_driver,
    cached_driver,
    gcc_m32_works,
    make_dev_nodes,
)
from .libraries import DRIVER_BINS, DRIVER_LIBS, DriverBin, DriverLib, libs_for
from .spec import (
    PRESETS,
    SimDriverSpec,
    SimGpu,
    SimMig,
    ci_cap_minor,
    deterministic_uuid,
    gi_cap_minor,
    mig_device,
    preset,
)

__all__ = [
    "DRIVER_BINS",
    "DRIVER_LIBS",
    "ENV_DEV_ROOT",
    "LIB32",
    "LIB64",
    "PRESETS",
    "DriverBin",
    "DriverLib",
    "SimDriver",
    "SimDriverError",
    "SimDriverSpec",
    "SimGpu",
    "SimMig",
    "build_driver",
    "cached_driver",
    "ci_cap_minor",
    "deterministic_uuid",
    "gcc_m32_works",
    "gi_cap_minor",
    "inject",
    "libs_for",
    "make_dev_nodes",
    "mig_device",
    "preset",
]
