"""The node's one health policy (nvct.node.health): NVIDIA's XID catalogue as data, how long
each event holds a GPU, "was reset", and how events are routed to MIG devices."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

from nvct.node.health.nvml_events import NO_INSTANCE, Route, matching
from nvct.node.health.policy import (
    RESET,
    SERVICE,
    TRANSIENT,
    GpuCondition,
    holds,
    remap_failure,
    xid_effect,
)
from nvct.node.health.xids import CATALOG, SOURCE


def test_the_catalogue_is_nvidias_table() -> None:
    assert SOURCE.startswith("https://docs.nvidia.com/deploy/xid-errors/")
    assert sorted(CATALOG) == list(range(1, 163))  # every XID up to 162, none invented
    assert CATALOG[79] == ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM")
    assert CATALOG[109][1] == "RESET_GPU"  # though NVIDIA's plugin ignores it by default
    assert CATALOG[13][1] == "RESTART_APP" and CATALOG[63][1] == "IGNORE"


def test_how_long_each_xid_holds() -> None:
    ignored = (13, 109)
    held = {code: xid_effect(code, ignored).hold for code in (13, 31, 43, 48, 63, 64, 74, 79)}
    assert held == {
        13: TRANSIENT,  # restart the application
        31: TRANSIENT,
        43: TRANSIENT,  # catalogue: IGNORE; counted for the quiet period (not in ignored)
        48: RESET,  # double-bit ECC: reset to remap the row
        63: TRANSIENT,  # a row marked for remapping: the condition's pending flag gates
        64: RESET,
        74: RESET,  # NVLink: reset the GPU and its links
        79: RESET,  # reboot the node
    }
    assert not xid_effect(13, ignored).counts and xid_effect(31, ignored).counts
    unknown = xid_effect(999, ignored)
    assert (unknown.hold, unknown.reason) == (TRANSIENT, "XID 999: not in NVIDIA's catalogue")


def test_was_reset_needs_nvmls_word() -> None:
    assert not GpuCondition().was_reset  # the driver does not report the recovery action
    assert GpuCondition(recovery_action=0).was_reset  # GPUs that neither remap nor retire
    assert not GpuCondition(recovery_action=0, remap_pending=True).was_reset
    assert not GpuCondition(recovery_action=0, retired_pending=True).was_reset
    assert not GpuCondition(recovery_action=1).was_reset
    assert GpuCondition(recovery_action=4).asks() == "NVML recovery action: drain and reset"
    done = GpuCondition(recovery_action=0, remap_pending=False)
    assert holds(RESET, 0, 10, quiet=30, condition=done)  # the quiet period first
    assert not holds(RESET, 0, 30, quiet=30, condition=done)
    assert holds(RESET, 0, 10_000, quiet=30, condition=GpuCondition())
    assert holds(remap_failure().hold, 0, 10_000, quiet=30, condition=done)
    assert remap_failure().hold == SERVICE
    assert not holds(TRANSIENT, 0, 30, quiet=30, condition=GpuCondition())


def _event(gpu: int, gi: int = NO_INSTANCE, ci: int = NO_INSTANCE) -> SimpleNamespace:
    return SimpleNamespace(device=ctypes.c_void_p(gpu), gpuInstanceId=gi, computeInstanceId=ci)


def test_events_reach_exactly_the_devices_they_name() -> None:
    watched = [
        Route("GPU-0", 0x10),  # a whole GPU
        Route("MIG-0-1", 0x20, 1, 0),  # MIG devices of the GPU at 0x20
        Route("MIG-0-5", 0x20, 5, 0),
        Route("MIG-0-5b", 0x20, 5, 1),
    ]
    assert matching(_event(0x20, 5, 0), watched) == ["MIG-0-5"]
    assert matching(_event(0x20, 5), watched) == ["MIG-0-5", "MIG-0-5b"]  # the GPU instance
    assert matching(_event(0x20), watched) == ["MIG-0-1", "MIG-0-5", "MIG-0-5b"]  # GPU-wide
    assert matching(_event(0x10, 3, 0), watched) == ["GPU-0"]  # watched whole: the GPU
    assert matching(_event(0x30), watched) == []
