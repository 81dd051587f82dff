"""One GPU's dcgm-exporter counters from NVML, each NVML call a *probe* that yields one or
more fields. A probe the GPU does not support (NOT_SUPPORTED, a function the driver lacks)
is dropped for good with one log line naming its fields, so an unsupported counter costs
neither a scrape nor a log line per round; any other error leaves its fields out of this
round only. A GPU whose memory query fails answers nothing (``Reading.error``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog

from nvct.exporter.fields import BY_NAME
from nvct.exporter.gpm import PCIE, GpmStream, supported
from nvct.exporter.sample import GpuIdentity, MigReading, Reading
from nvct.exporter.unsupported import never

log = structlog.get_logger("nvct-exporter")
MIB = 1024 * 1024
KIB = 1024

Probe = Callable[[Any, Any], dict[str, float]]


def _utilization(nvml: Any, h: Any) -> dict[str, float]:
    u = nvml.nvmlDeviceGetUtilizationRates(h)
    return {"DCGM_FI_DEV_GPU_UTIL": float(u.gpu), "DCGM_FI_DEV_MEM_COPY_UTIL": float(u.memory)}


def _clock(kind: str, field: str) -> Probe:
    return lambda nvml, h: {field: float(nvml.nvmlDeviceGetClockInfo(h, getattr(nvml, kind)))}


def _gpu_temp(nvml: Any, h: Any) -> dict[str, float]:
    temp = nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)
    return {"DCGM_FI_DEV_GPU_TEMP": float(temp)}


def _field(nvml: Any, h: Any, field_id: int) -> float:
    (value,) = nvml.nvmlDeviceGetFieldValues(h, [field_id])
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        raise nvml.NVMLError(value.nvmlReturn)
    if value.valueType == nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return float(value.value.ullVal)
    return float(value.value.uiVal)


def _memory_temp(nvml: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_MEMORY_TEMP": _field(nvml, h, nvml.NVML_FI_DEV_MEMORY_TEMP)}


def _power(nvml: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_POWER_USAGE": nvml.nvmlDeviceGetPowerUsage(h) / 1000}


def _energy(nvml: Any, h: Any) -> dict[str, float]:
    mj = nvml.nvmlDeviceGetTotalEnergyConsumption(h)
    return {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": float(mj)}


def _replays(nvml: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER": float(nvml.nvmlDeviceGetPcieReplayCounter(h))}


def _encoder(nvml: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_ENC_UTIL": float(nvml.nvmlDeviceGetEncoderUtilization(h)[0])}


def _decoder(nvml: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_DEC_UTIL": float(nvml.nvmlDeviceGetDecoderUtilization(h)[0])}


def _remapped_rows(nvml: Any, h: Any) -> dict[str, float]:
    corr, unc, _pending, failed = nvml.nvmlDeviceGetRemappedRows(h)
    return {
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": float(unc),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": float(corr),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1.0 if failed else 0.0,
    }


def _vgpu_license(nvml: Any, h: Any) -> dict[str, float]:
    """DCGM's 1 licensed, 0 not: an enabled feature's featureState is non-zero while licensed
    (nvidia-smi's "Licensed"/"Unlicensed" reads the same field)."""
    features = nvml.nvmlDeviceGetGridLicensableFeatures_v4(h)
    if not features.isGridLicenseSupported:
        raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
    listed = [features.gridLicensableFeatures[i] for i in range(features.licensableFeaturesCount)]
    enabled = [f for f in listed if f.featureEnabled] or listed
    return {"DCGM_FI_DEV_VGPU_LICENSE_STATUS": 1.0 if any(f.featureState for f in enabled) else 0.0}


def _pcie_throughput(nvml: Any, h: Any) -> dict[str, float]:
    tx = nvml.nvmlDeviceGetPcieThroughput(h, nvml.NVML_PCIE_UTIL_TX_BYTES)
    rx = nvml.nvmlDeviceGetPcieThroughput(h, nvml.NVML_PCIE_UTIL_RX_BYTES)
    return {PCIE[0]: tx * KIB, PCIE[1]: rx * KIB}  # KB/s over the driver's 20 ms window


def memory(nvml: Any, h: Any, *, v2: bool) -> dict[str, float]:
    """FB free/used (and reserved with ``v2``) in MiB."""
    if not v2:
        m = nvml.nvmlDeviceGetMemoryInfo(h)
        return {"DCGM_FI_DEV_FB_FREE": m.free / MIB, "DCGM_FI_DEV_FB_USED": m.used / MIB}
    m = nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2)
    return {
        "DCGM_FI_DEV_FB_FREE": m.free / MIB,
        "DCGM_FI_DEV_FB_USED": m.used / MIB,
        "DCGM_FI_DEV_FB_RESERVED": m.reserved / MIB,
    }


PROBES: dict[str, tuple[Probe, tuple[str, ...]]] = {
    "utilization": (_utilization, ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL")),
    "sm_clock": (_clock("NVML_CLOCK_SM", "DCGM_FI_DEV_SM_CLOCK"), ("DCGM_FI_DEV_SM_CLOCK",)),
    "mem_clock": (_clock("NVML_CLOCK_MEM", "DCGM_FI_DEV_MEM_CLOCK"), ("DCGM_FI_DEV_MEM_CLOCK",)),
    "gpu_temp": (_gpu_temp, ("DCGM_FI_DEV_GPU_TEMP",)),
    "memory_temp": (_memory_temp, ("DCGM_FI_DEV_MEMORY_TEMP",)),
    "power": (_power, ("DCGM_FI_DEV_POWER_USAGE",)),
    "energy": (_energy, ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",)),
    "pcie_replay": (_replays, ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",)),
    "encoder": (_encoder, ("DCGM_FI_DEV_ENC_UTIL",)),
    "decoder": (_decoder, ("DCGM_FI_DEV_DEC_UTIL",)),
    "remapped_rows": (_remapped_rows, ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                                       "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
                                       "DCGM_FI_DEV_ROW_REMAP_FAILURE")),
    "vgpu_license": (_vgpu_license, ("DCGM_FI_DEV_VGPU_LICENSE_STATUS",)),
}  # fmt: skip
GPM_FIELDS = (
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
)
NVLINK = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"


class DeviceReader:
    """Reads one GPU and its MIG devices every round; remembers what it dropped."""

    def __init__(self, nvml: Any, handle: Any, gpu: GpuIdentity) -> None:
        self.nvml = nvml
        self.handle = handle
        self.gpu = gpu
        self.dropped: dict[str, str] = {}  # field -> why (NVML's answer)
        self._memory_v2 = True
        self._nvlink_last: tuple[float, float] | None = None  # (monotonic s, KiB)
        self._nvlinks: list[int] | None = None
        self.gpm: GpmStream | None = None
        self.mig_gpm: dict[int, GpmStream] = {}
        self.mig_handles: dict[int, Any] = {}
        if supported(nvml, handle):
            self.gpm = GpmStream(nvml, handle)
            self.mig_gpm = {m.gi: GpmStream(nvml, handle, m.gi) for m in gpu.migs}
        else:
            self._drop((*GPM_FIELDS,), "GPM not supported (DCGM_FI_PROF_* needs Hopper or newer)")
        for mig in gpu.migs:
            try:
                self.mig_handles[mig.gi] = nvml.nvmlDeviceGetHandleByUUID(mig.uuid)
            except nvml.NVMLError as err:
                log.warning("mig_device_unreadable", gpu=gpu.uuid, mig=mig.uuid, error=str(err))

    def read(self) -> Reading:
        """Every supported field now; ``error`` when the GPU answers nothing."""
        nvml = self.nvml
        try:
            values = self._memory(self.handle)
        except nvml.NVMLError as err:
            return Reading(error=str(err))
        for name, (probe, fields) in PROBES.items():
            if fields[0] not in self.dropped:
                values.update(self._ask(name, fields, partial(probe, nvml, self.handle)))
        values.update(self._nvlink())
        if self.gpm is not None:
            values.update(self._ask("gpm", GPM_FIELDS + PCIE, self.gpm.read))
        elif PCIE[0] not in self.dropped:
            values.update(
                self._ask("pcie_throughput", PCIE, lambda: _pcie_throughput(nvml, self.handle))
            )
        return Reading(values=values, migs=tuple(self._migs()))

    def _migs(self) -> list[MigReading]:
        out = []
        for mig in self.gpu.migs:
            handle = self.mig_handles.get(mig.gi)
            if handle is None:
                continue
            try:
                values = self._memory(handle)
            except self.nvml.NVMLError:
                continue
            stream = self.mig_gpm.get(mig.gi)
            try:
                read = stream.read() if stream is not None else {}
                values.update({k: v for k, v in read.items() if BY_NAME[k].per_mig})
            except self.nvml.NVMLError as err:
                if never(err):
                    del self.mig_gpm[mig.gi]
                    log.info("series_dropped", gpu=self.gpu.uuid, mig=mig.uuid,
                             fields=list(GPM_FIELDS), reason=f"gpm: {err}")  # fmt: skip
            out.append(MigReading(mig, values))
        return out

    def _memory(self, handle: Any) -> dict[str, float]:
        nvml = self.nvml
        if self._memory_v2:
            try:
                return memory(nvml, handle, v2=True)
            except nvml.NVMLError as err:
                if not never(err):
                    raise
                self._memory_v2 = False
                self._drop(("DCGM_FI_DEV_FB_RESERVED",), str(err))
        return memory(nvml, handle, v2=False)

    def _nvlink(self) -> dict[str, float]:
        if NVLINK in self.dropped:
            return {}
        nvml = self.nvml

        def total() -> dict[str, float]:
            # the counters are per link (scopeId): every active link's TX and RX in one call
            fields = [
                (f, link)
                for link in self._links()
                for f in (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX,
                          nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX)
            ]  # fmt: skip
            if not fields:
                raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
            values = nvml.nvmlDeviceGetFieldValues(self.handle, fields)
            if any(v.nvmlReturn != nvml.NVML_SUCCESS for v in values):
                raise nvml.NVMLError(next(v.nvmlReturn for v in values if v.nvmlReturn))
            return {NVLINK: float(sum(v.value.ullVal for v in values))}

        got = self._ask("nvlink", (NVLINK,), total)
        if not got:
            return {}
        now, kib = time.monotonic(), got[NVLINK]
        last, self._nvlink_last = self._nvlink_last, (now, kib)
        if last is None or kib < last[1] or now <= last[0]:
            return {}  # the first round, or the counter was reset
        return {NVLINK: (kib - last[1]) / KIB / (now - last[0])}

    def _links(self) -> list[int]:
        """The GPU's active NVLinks (asked once): state answers until the first error."""
        if self._nvlinks is None:
            nvml, self._nvlinks = self.nvml, []
            for link in range(nvml.NVML_NVLINK_MAX_LINKS):
                try:
                    if (
                        nvml.nvmlDeviceGetNvLinkState(self.handle, link)
                        == nvml.NVML_FEATURE_ENABLED
                    ):
                        self._nvlinks.append(link)
                except nvml.NVMLError:
                    break
        return self._nvlinks

    def _ask(
        self, name: str, fields: tuple[str, ...], read: Callable[[], dict[str, float]]
    ) -> dict[str, float]:
        nvml = self.nvml
        try:
            return read()
        except nvml.NVMLError as err:
            if never(err):
                self._drop(fields, f"{name}: {err}")
            return {}

    def _drop(self, fields: tuple[str, ...], why: str) -> None:
        if not fields:
            return
        for f in fields:
            self.dropped[f] = why
        log.info("series_dropped", gpu=self.gpu.uuid, fields=list(fields), reason=why)

    def close(self) -> None:
        """Free GPM samples."""
        for stream in (self.gpm, *self.mig_gpm.values()):
            if stream is not None:
                stream.close()
