"""A GPU's memory health as NVML reports it: the recovery-action field, remapped rows, retired
pages pending. Each answer NOT_SUPPORTED (or any other NVML error) is left None; the policy
treats an unknown as "cannot say"."""

from __future__ import annotations

import contextlib
from typing import Any

from nvct.node.health.policy import GpuCondition

RECOVERY_ACTION_FIELD = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
_SUCCESS = 0


def read_condition(nvml: Any, gpu: Any) -> GpuCondition:
    """``gpu``'s condition (a physical GPU's handle: MIG devices share their GPU's)."""
    action: int | None = None
    try:
        (value,) = nvml.nvmlDeviceGetFieldValues(gpu, [RECOVERY_ACTION_FIELD])
        if value.nvmlReturn == _SUCCESS:
            action = int(value.value.uiVal)
    except (nvml.NVMLError, AttributeError, ValueError):
        pass
    pending = failure = None
    try:
        _, _, is_pending, failed = nvml.nvmlDeviceGetRemappedRows(gpu)
        pending, failure = bool(is_pending), bool(failed)
    except (nvml.NVMLError, AttributeError):
        pass
    retired: bool | None = None
    with contextlib.suppress(nvml.NVMLError, AttributeError):
        retired = bool(nvml.nvmlDeviceGetRetiredPagesPendingStatus(gpu))
    return GpuCondition(action, pending, failure, retired)
