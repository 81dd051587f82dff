"""A counter the GPU does not support is dropped for good, with one log line, and never costs
the scrape; an error of one round leaves its fields out of that round only."""

from __future__ import annotations

import types
from typing import Any

import pytest
import structlog.testing

from nvct.exporter.probes import DeviceReader
from nvct.exporter.sample import GpuIdentity

GPU = GpuIdentity(0, "GPU-a", "00000000:18:00.0", "nvidia0", "NVIDIA L40S")


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_nvml(temperature_error: list[int]) -> tuple[Any, dict[str, int]]:
    """A GPU answering everything but power (NOT_SUPPORTED) and GPM (none); its temperature
    query fails with each code in ``temperature_error`` in turn, then answers."""
    calls: dict[str, int] = {}

    def counted(name: str, result: Any) -> Any:
        def call(*_args: Any, **_kw: Any) -> Any:
            calls[name] = calls.get(name, 0) + 1
            if isinstance(result, int) and result < 0:
                raise NVMLError(-result)
            return result() if callable(result) else result

        return call

    def temperature() -> int:
        if temperature_error:
            raise NVMLError(temperature_error.pop(0))
        return 44

    memory = types.SimpleNamespace(free=3 << 20, used=1 << 20, reserved=0)
    nvml = types.SimpleNamespace(
        NVMLError=NVMLError, NVML_SUCCESS=0, NVML_ERROR_NOT_SUPPORTED=3, NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0, nvmlMemory_v2=0x02000028,
        NVML_FI_DEV_MEMORY_TEMP=82, NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX=140,
        NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX=141, NVML_PCIE_UTIL_TX_BYTES=0,
        NVML_PCIE_UTIL_RX_BYTES=1, NVML_NVLINK_MAX_LINKS=18, NVML_FEATURE_ENABLED=1,
        nvmlDeviceGetNvLinkState=counted("nvlink", -3),
        nvmlGpmQueryDeviceSupport=counted("gpm", types.SimpleNamespace(isSupportedDevice=0)),
        nvmlDeviceGetMemoryInfo=counted("memory", memory),
        nvmlDeviceGetUtilizationRates=counted("util", types.SimpleNamespace(gpu=5, memory=6)),
        nvmlDeviceGetClockInfo=counted("clock", 1000),
        nvmlDeviceGetTemperature=counted("temp", temperature),
        nvmlDeviceGetFieldValues=counted("fields", -3),
        nvmlDeviceGetPowerUsage=counted("power", -3),
        nvmlDeviceGetTotalEnergyConsumption=counted("energy", 7),
        nvmlDeviceGetPcieReplayCounter=counted("replay", 0),
        nvmlDeviceGetEncoderUtilization=counted("enc", [1, 167000]),
        nvmlDeviceGetDecoderUtilization=counted("dec", [2, 167000]),
        nvmlDeviceGetRemappedRows=counted("rows", -3),
        nvmlDeviceGetGridLicensableFeatures_v4=counted("vgpu", -13),  # an older driver
        nvmlDeviceGetPcieThroughput=counted("pcie", 10),
    )  # fmt: skip
    return nvml, calls


def test_unsupported_is_dropped_once_and_a_failing_round_only_misses_that_round() -> None:
    nvml, calls = fake_nvml(temperature_error=[999])  # one UNKNOWN, then it answers
    with structlog.testing.capture_logs() as logs:
        reader = DeviceReader(nvml, object(), GPU)
        rounds = [reader.read() for _ in range(3)]
    assert all(not r.error for r in rounds)
    assert "DCGM_FI_DEV_GPU_TEMP" not in rounds[0].values  # the round that failed
    assert rounds[1].values["DCGM_FI_DEV_GPU_TEMP"] == 44  # asked again, not dropped
    served = set(rounds[2].values)
    assert "DCGM_FI_DEV_POWER_USAGE" not in served and "DCGM_FI_DEV_MEMORY_TEMP" not in served
    assert served >= {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_PROF_PCIE_TX_BYTES"}
    assert rounds[2].values["DCGM_FI_PROF_PCIE_TX_BYTES"] == 10 * 1024  # KB/s without GPM
    assert calls["power"] == 1 and calls["rows"] == 1 and calls["vgpu"] == 1  # never again
    assert calls["nvlink"] == 1  # no NVLink: asked once
    dropped = [f for e in logs if e["event"] == "series_dropped" for f in e["fields"]]
    assert len(dropped) == len(set(dropped))  # one line each, not one per round
    assert set(dropped) == {
        "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    }  # fmt: skip


@pytest.mark.parametrize("code", [15, 999])
def test_a_gpu_whose_memory_query_fails_answers_nothing(code: int) -> None:
    nvml, _ = fake_nvml([])
    nvml.nvmlDeviceGetMemoryInfo = lambda *_a, **_k: (_ for _ in ()).throw(NVMLError(code))
    reading = DeviceReader(nvml, object(), GPU).read()
    assert reading.error and not reading.values
