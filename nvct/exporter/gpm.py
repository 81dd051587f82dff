"""GPU performance monitoring (NVML's ``nvmlGpm*``, Hopper and newer): the source of
dcgm-exporter's ``DCGM_FI_PROF_*`` fields. A metric is computed between two samples, so each
GPU (or GPU instance) keeps its previous sample and the first round yields nothing."""

from __future__ import annotations

import contextlib
from typing import Any

MIB = 1024 * 1024
# GPM metric -> (dcgm-exporter field, scale): percentages become ratios, MiB/s bytes/s
METRICS = {
    "NVML_GPM_METRIC_GRAPHICS_UTIL": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.01),
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.01),
    "NVML_GPM_METRIC_DRAM_BW_UTIL": ("DCGM_FI_PROF_DRAM_ACTIVE", 0.01),
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC": ("DCGM_FI_PROF_PCIE_TX_BYTES", MIB),
    "NVML_GPM_METRIC_PCIE_RX_PER_SEC": ("DCGM_FI_PROF_PCIE_RX_BYTES", MIB),
}
PCIE = ("DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES")


def supported(nvml: Any, handle: Any) -> bool:
    """Whether the GPU has GPM (False also where the library predates it)."""
    try:
        return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except (nvml.NVMLError, AttributeError):
        return False


class GpmStream:
    """Successive samples of one GPU (``gi`` None) or one of its GPU instances."""

    def __init__(self, nvml: Any, handle: Any, gi: int | None = None) -> None:
        self.nvml = nvml
        self.handle = handle
        self.gi = gi
        self._previous: Any = None

    def read(self) -> dict[str, float]:
        """The metrics since the previous call ({} on the first).

        Raises:
            NVMLError: a sample could not be taken.
        """
        nvml = self.nvml
        sample = nvml.nvmlGpmSampleAlloc()
        try:
            if self.gi is None:
                nvml.nvmlGpmSampleGet(self.handle, sample)
            else:
                nvml.nvmlGpmMigSampleGet(self.handle, self.gi, sample)
        except nvml.NVMLError:
            nvml.nvmlGpmSampleFree(sample)
            raise
        previous, self._previous = self._previous, sample
        if previous is None:
            return {}
        try:
            return self._between(previous, sample)
        finally:
            nvml.nvmlGpmSampleFree(previous)

    def _between(self, first: Any, second: Any) -> dict[str, float]:
        nvml = self.nvml
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version = nvml.NVML_GPM_METRICS_GET_VERSION
        get.sample1, get.sample2 = first, second
        wanted = [(getattr(nvml, m), field, scale) for m, (field, scale) in METRICS.items()]
        get.numMetrics = len(wanted)
        for i, (metric_id, _, _) in enumerate(wanted):
            get.metrics[i].metricId = metric_id
        nvml.nvmlGpmMetricsGet(get)
        out = {}
        for i, (_, field, scale) in enumerate(wanted):
            if get.metrics[i].nvmlReturn == nvml.NVML_SUCCESS:
                out[field] = float(get.metrics[i].value) * scale
        return out

    def close(self) -> None:
        """Free the kept sample."""
        if self._previous is not None:
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlGpmSampleFree(self._previous)
            self._previous = None
