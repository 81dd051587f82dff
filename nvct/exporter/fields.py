"""dcgm-exporter's default counters as nvct serves them: name, Prometheus type, help (theirs),
unit, the NVML call behind each, and whether a MIG device has its own series.

The README's metric table is this table; ``tests/exporter/test_fields.py`` keeps them equal.
"""

from __future__ import annotations

from dataclasses import dataclass

GAUGE, COUNTER = "gauge", "counter"
XID_WINDOW_S = 300.0  # dcgm-exporter's --xid-count-window-size default (5 min)


@dataclass(frozen=True, slots=True)
class Counter:
    """One default counter of dcgm-exporter's ``default-counters.csv``."""

    name: str
    kind: str  # GAUGE or COUNTER, as dcgm-exporter types it
    help: str
    unit: str
    source: str  # the NVML call
    per_mig: bool = False  # NVML answers it for a MIG device too


COUNTERS = (
    Counter("DCGM_FI_DEV_SM_CLOCK", GAUGE, "SM clock frequency (in MHz).", "MHz",
            "nvmlDeviceGetClockInfo(SM)"),
    Counter("DCGM_FI_DEV_MEM_CLOCK", GAUGE, "Memory clock frequency (in MHz).", "MHz",
            "nvmlDeviceGetClockInfo(MEM)"),
    Counter("DCGM_FI_DEV_MEMORY_TEMP", GAUGE, "Memory temperature (in C).", "°C",
            "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)"),
    Counter("DCGM_FI_DEV_GPU_TEMP", GAUGE, "GPU temperature (in C).", "°C",
            "nvmlDeviceGetTemperature(GPU)"),
    Counter("DCGM_FI_DEV_POWER_USAGE", GAUGE, "Power draw (in W).", "W",
            "nvmlDeviceGetPowerUsage"),
    Counter("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", COUNTER,
            "Total energy consumption since boot (in mJ).", "mJ",
            "nvmlDeviceGetTotalEnergyConsumption"),
    Counter("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", COUNTER, "Total number of PCIe retries.", "1",
            "nvmlDeviceGetPcieReplayCounter"),
    Counter("DCGM_FI_DEV_GPU_UTIL", GAUGE, "GPU utilization (in %).", "%",
            "nvmlDeviceGetUtilizationRates"),
    Counter("DCGM_FI_DEV_MEM_COPY_UTIL", GAUGE, "Memory utilization (in %).", "%",
            "nvmlDeviceGetUtilizationRates"),
    Counter("DCGM_FI_DEV_ENC_UTIL", GAUGE, "Encoder utilization (in %).", "%",
            "nvmlDeviceGetEncoderUtilization"),
    Counter("DCGM_FI_DEV_DEC_UTIL", GAUGE, "Decoder utilization (in %).", "%",
            "nvmlDeviceGetDecoderUtilization"),
    Counter("DCGM_FI_DEV_FB_FREE", GAUGE, "Framebuffer memory free (in MiB).", "MiB",
            "nvmlDeviceGetMemoryInfo_v2", per_mig=True),
    Counter("DCGM_FI_DEV_FB_USED", GAUGE, "Framebuffer memory used (in MiB).", "MiB",
            "nvmlDeviceGetMemoryInfo_v2", per_mig=True),
    Counter("DCGM_FI_DEV_FB_RESERVED", GAUGE, "Framebuffer memory reserved (in MiB).", "MiB",
            "nvmlDeviceGetMemoryInfo_v2", per_mig=True),
    Counter("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", GAUGE,
            "Total number of NVLink bandwidth counters for all lanes.", "MiB/s",
            "nvmlDeviceGetFieldValues(NVLINK_THROUGHPUT_RAW_TX/RX per link), rate between samples"),
    Counter("DCGM_FI_DEV_VGPU_LICENSE_STATUS", GAUGE, "vGPU License status", "1 licensed",
            "nvmlDeviceGetGridLicensableFeatures_v4"),
    Counter("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", COUNTER,
            "Number of remapped rows for uncorrectable errors", "rows",
            "nvmlDeviceGetRemappedRows"),
    Counter("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", COUNTER,
            "Number of remapped rows for correctable errors", "rows",
            "nvmlDeviceGetRemappedRows"),
    Counter("DCGM_FI_DEV_ROW_REMAP_FAILURE", GAUGE, "Whether remapping of rows has failed",
            "0/1", "nvmlDeviceGetRemappedRows"),
    Counter("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GAUGE,
            "Ratio of time the graphics engine is active.", "ratio",
            "GPM GRAPHICS_UTIL / 100", per_mig=True),
    Counter("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GAUGE,
            "Ratio of cycles the tensor (HMMA) pipe is active.", "ratio",
            "GPM ANY_TENSOR_UTIL / 100", per_mig=True),
    Counter("DCGM_FI_PROF_DRAM_ACTIVE", GAUGE,
            "Ratio of cycles the device memory interface is active sending or receiving data.",
            "ratio", "GPM DRAM_BW_UTIL / 100", per_mig=True),
    Counter("DCGM_FI_PROF_PCIE_TX_BYTES", GAUGE,
            "The rate of data transmitted over the PCIe bus - including both protocol headers "
            "and data payloads - in bytes per second.", "B/s",
            "GPM PCIE_TX_PER_SEC; without GPM nvmlDeviceGetPcieThroughput(TX)"),
    Counter("DCGM_FI_PROF_PCIE_RX_BYTES", GAUGE,
            "The rate of data received over the PCIe bus - including both protocol headers "
            "and data payloads - in bytes per second.", "B/s",
            "GPM PCIE_RX_PER_SEC; without GPM nvmlDeviceGetPcieThroughput(RX)"),
)  # fmt: skip
BY_NAME = {c.name: c for c in COUNTERS}
