"""dcgm-exporter's default counters from the real ``nvct-cli exporter`` on simulated drivers:
every one NVML gives on an HGX H100 node, their per-MIG series on an A100 MIG node, and on a
node whose GPUs lack a function, that series dropped with one log line while the rest serve."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness.skips import need_binary, need_root, require
from integration.simdriver import inject
from integration.test_exporter import Exporter, Series, wait_for
from nvct.exporter.fields import COUNTERS

pytestmark = [pytest.mark.root]
ALL = {c.name for c in COUNTERS}
GPM = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
}
VGPU = "DCGM_FI_DEV_VGPU_LICENSE_STATUS"  # bare metal: no licence to report


def _driver(name: str) -> Any:
    require(need_root(), need_binary("gcc"), need_binary("ldconfig"))
    from integration.simdriver import cached_driver, preset

    return cached_driver(preset(name), Path("/tmp/nvct-test-simdrivers"))


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    started: list[Exporter] = []

    def make(preset: str) -> Exporter:
        sim = _driver(preset)
        exporter = Exporter(tmp_path / preset, sim, tmp_path / "no-kubelet.sock", 0.3)
        exporter.argv.append("--no-kubernetes")
        started.append(exporter)
        return exporter

    yield make
    for exporter in started:
        if exporter.proc is not None:
            exporter.stop()


def names(found: list[Series], uuid: str) -> set[str]:
    return {s.name for s in found if s.labels.get("UUID") == uuid and "GPU_I_ID" not in s.labels}


def value(found: list[Series], name: str, uuid: str) -> float:
    (s,) = [s for s in found if s.name == name and s.labels["UUID"] == uuid
            and "GPU_I_ID" not in s.labels]  # fmt: skip
    return s.value


def test_every_default_counter_nvml_gives_on_an_hgx_h100(start) -> None:
    exporter = start("h100x8-nvswitch")
    inject.set_metrics(
        exporter.control, 0, mem_clock_mhz=2619, memory_temp=52, energy_mj=123456789,
        pcie_replay=7, util_encoder=11, util_decoder=22, memory_reserved_mib=512,
        memory_used_mib=1000, gpm_graphics=80, gpm_tensor=40, gpm_dram=30,
        gpm_pcie_tx_mibs=3, gpm_pcie_rx_mibs=5,
    )  # fmt: skip
    inject.set_condition(exporter.control, 0, remapped_correctable=2, remapped_uncorrectable=1)
    inject.set_metrics(exporter.control, 0, nvlink_kibps=512 * 1024)  # each way: 1 GiB/s
    exporter.start()
    sim = _driver("h100x8-nvswitch")
    uuid = sim.spec.gpus[0].uuid

    def nvlink_moving() -> bool:  # the gauge is the counters' rate between two rounds
        return "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" in names(exporter.scrape(), uuid) and (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in names(exporter.scrape(), uuid)
        )

    wait_for(nvlink_moving, 20)
    found = exporter.scrape()
    assert names(found, uuid) >= ALL - {VGPU}
    assert VGPU not in names(found, uuid)
    expected = {
        "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_MEMORY_TEMP": 52,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 7,
        "DCGM_FI_DEV_ENC_UTIL": 11,
        "DCGM_FI_DEV_DEC_UTIL": 22,
        "DCGM_FI_DEV_FB_RESERVED": 512,
        "DCGM_FI_DEV_FB_USED": 1000,
        "DCGM_FI_DEV_FB_FREE": 81559 - 1000 - 512,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 2,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.8,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.4,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.3,
        "DCGM_FI_PROF_PCIE_TX_BYTES": 3 * 1024 * 1024,
        "DCGM_FI_PROF_PCIE_RX_BYTES": 5 * 1024 * 1024,
    }
    assert {n: value(found, n, uuid) for n in expected} == pytest.approx(expected)
    assert value(found, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", uuid) == pytest.approx(1024, rel=0.01)
    labels = next(s.labels for s in found if s.name == "DCGM_FI_DEV_GPU_TEMP")
    assert labels["DCGM_FI_DRIVER_VERSION"] == "550.54.15" and "GPU_I_ID" not in labels
    # vGPU licence: one log line, however many rounds passed
    drops = [e for e in exporter.events() if e["event"] == "series_dropped"]
    assert [(e["gpu"], e["fields"]) for e in drops if e["gpu"] == uuid] == [(uuid, [VGPU])]
    assert exporter.stop() == 0


def test_a_gddr_node_drops_what_its_gpus_lack_once_and_serves_the_rest(start) -> None:
    exporter = start("mixed-ecc-x3").start()
    sim = _driver("mixed-ecc-x3")
    wait_for(lambda: len(exporter.events()) > 0 and len(exporter.scrape()) > 0, 10)
    time.sleep(1.5)  # several rounds
    found = exporter.scrape()
    for gpu in sim.spec.gpus:
        served = names(found, gpu.uuid)
        # L40S / RTX 4090: GDDR (no memory temperature, no row remapping), Ada (no GPM), no NVLink
        gone = {"DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", VGPU, *GPM,
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
                "DCGM_FI_DEV_ROW_REMAP_FAILURE"}  # fmt: skip
        assert served == (ALL - gone) | {"DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT",
                                         "nvct_gpu_healthy", "nvct_gpu_replicas"}  # fmt: skip
        dropped = [f for e in exporter.events() if e["event"] == "series_dropped"
                   and e["gpu"] == gpu.uuid for f in e["fields"]]  # fmt: skip
        assert sorted(dropped) == sorted(gone)  # each once, not once per round
    # PCIe rates come from nvmlDeviceGetPcieThroughput where there is no GPM
    assert value(found, "DCGM_FI_PROF_PCIE_TX_BYTES", sim.spec.gpus[0].uuid) == 0
    assert exporter.stop() == 0


def test_a_mig_device_has_its_own_memory_series(start) -> None:
    exporter = start("a100x8-570-mig")
    sim = _driver("a100x8-570-mig")
    gpu = sim.spec.gpus[0]
    mig = gpu.migs[0]
    inject.set_mig_metrics(exporter.control, gpu.minor, mig.gi, memory_used_mib=300)
    exporter.start()

    def mig_series() -> list[Series]:
        found = exporter.scrape()
        used = [
            s for s in found if s.name == "DCGM_FI_DEV_FB_USED" and s.labels["UUID"] == gpu.uuid
        ]
        return [s for s in used if s.labels.get("GPU_I_ID") == str(mig.gi)]

    wait_for(lambda: bool(mig_series()), 10)
    (used,) = mig_series()
    assert used.value == 300
    assert used.labels["UUID"] == gpu.uuid and used.labels["GPU_I_PROFILE"] == mig.profile
    per_mig = {s.labels["GPU_I_ID"] for s in exporter.scrape()
               if s.name == "DCGM_FI_DEV_FB_FREE" and s.labels["UUID"] == gpu.uuid
               and "GPU_I_ID" in s.labels}  # fmt: skip
    assert per_mig == {str(m.gi) for m in gpu.migs}
    # A100 has no GPM: no DCGM_FI_PROF_* activity ratios at all
    assert not [s for s in exporter.scrape() if s.name in GPM]
    assert exporter.stop() == 0


def test_gpm_per_mig_device_on_an_h100_in_mig_mode(start) -> None:
    """Hopper's GPM per GPU instance (nvmlGpmMigSampleGet): the DCGM_FI_PROF_* ratios on each
    MIG device's series, with its GPU_I_PROFILE and GPU_I_ID (an A100 has none: above)."""
    exporter = start("h100x2-550-mig")
    sim = _driver("h100x2-550-mig")
    gpu = sim.spec.gpus[0]
    for n, mig in enumerate(gpu.migs):
        inject.set_mig_metrics(exporter.control, gpu.minor, mig.gi, gpm_graphics=10 * (n + 1),
                               gpm_tensor=5 * (n + 1), gpm_dram=n + 1)  # fmt: skip
    exporter.start()

    def per_mig() -> dict[tuple[str, str, str], float]:
        return {
            (s.name, s.labels["GPU_I_ID"], s.labels["GPU_I_PROFILE"]): s.value
            for s in exporter.scrape()
            if s.name in GPM and s.labels["UUID"] == gpu.uuid and "GPU_I_ID" in s.labels
        }

    wait_for(lambda: len(per_mig()) == 3 * len(gpu.migs), 20)  # GPM needs two samples
    expected = {}
    for n, mig in enumerate(gpu.migs):
        at = (str(mig.gi), mig.profile)
        expected[("DCGM_FI_PROF_GR_ENGINE_ACTIVE", *at)] = 0.1 * (n + 1)
        expected[("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", *at)] = 0.05 * (n + 1)
        expected[("DCGM_FI_PROF_DRAM_ACTIVE", *at)] = 0.01 * (n + 1)
    assert per_mig() == pytest.approx(expected)
    # the whole GPU's ratios stay on its own series; GPU 1 (whole) has no MIG series
    assert {s.name for s in exporter.scrape() if s.labels.get("UUID") == gpu.uuid
            and "GPU_I_ID" not in s.labels} >= GPM  # fmt: skip
    whole = sim.spec.gpus[1].uuid
    assert not [s for s in exporter.scrape() if s.labels.get("UUID") == whole
                and "GPU_I_ID" in s.labels]  # fmt: skip
    assert not [e for e in exporter.events() if e["event"] == "series_dropped" and "mig" in e]
    assert exporter.stop() == 0


def test_a_vgpu_guests_licence_status(start) -> None:
    """A vGPU guest's licence (nvmlDeviceGetGridLicensableFeatures_v4, the enabled feature's
    state): 1 while licensed, 0 once it expired or was never granted (dcgm's 0/1)."""
    exporter = start("l40s-vgpu-guest").start()
    uuid = _driver("l40s-vgpu-guest").spec.gpus[0].uuid
    wait_for(lambda: VGPU in names(exporter.scrape(), uuid), 10)
    assert value(exporter.scrape(), VGPU, uuid) == 1
    inject.set_metrics(exporter.control, 0, vgpu_licensed=0)  # the licence expired
    wait_for(lambda: value(exporter.scrape(), VGPU, uuid) == 0, 10)
    inject.set_metrics(exporter.control, 0, vgpu_licensed=1)  # renewed
    wait_for(lambda: value(exporter.scrape(), VGPU, uuid) == 1, 10)
    assert not [e for e in exporter.events()
                if e["event"] == "series_dropped" and VGPU in e["fields"]]  # fmt: skip
    assert exporter.stop() == 0
