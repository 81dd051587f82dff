"""A sample rendered as a scrape returns it: dcgm-exporter's names and labels, one series per
container holding a GPU, empty pod labels for a free one, nothing for what NVML did not say."""

from __future__ import annotations

import math
import time

from prometheus_client.parser import text_string_to_metric_families

from nvct.exporter.collector import SampleCollector
from nvct.exporter.exposition import render
from nvct.exporter.sample import (
    GpuIdentity,
    GpuSample,
    MigIdentity,
    MigReading,
    Reading,
    Sample,
    XidSeen,
)
from nvct.kubeapi.podresources.ids import Owner

A = GpuIdentity(0, "GPU-a", "00000000:18:00.0", "nvidia0", "NVIDIA H100 80GB HBM3")
B = GpuIdentity(1, "GPU-b", "00000000:3B:00.0", "nvidia1", "NVIDIA H100 80GB HBM3")
FULL = Reading({"DCGM_FI_DEV_GPU_UTIL": 87, "DCGM_FI_DEV_MEM_COPY_UTIL": 41,
                "DCGM_FI_DEV_FB_USED": 10, "DCGM_FI_DEV_FB_FREE": 20, "DCGM_FI_DEV_GPU_TEMP": 71,
                "DCGM_FI_DEV_POWER_USAGE": 312.5, "DCGM_FI_DEV_SM_CLOCK": 1755})  # fmt: skip


def scrape(
    sample: Sample | None, *, kubernetes: bool = True, window_s: float = 300
) -> list[tuple[str, dict, float]]:
    collector = SampleCollector(
        lambda: sample, "node-a", kubernetes=kubernetes, driver_version="550.54.15",
        xid_window_s=window_s,
    )  # fmt: skip
    text = render(collector.collect()).decode()
    return [
        # the client's parser appends _total to a counter's samples; the text has none
        (family.name if family.type == "counter" else s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def sample(*gpus: GpuSample, up: bool | None = True) -> Sample:
    return Sample(gpus, finished_at=0.0, duration_s=0.25, pod_resources_up=up)


def test_one_series_per_container_and_empty_pod_labels_for_a_free_gpu() -> None:
    shared = GpuSample(A, FULL, XidSeen(), True, "", 4,
                       (Owner("serve", "b", "infer"), Owner("serve", "b", "side")))  # fmt: skip
    free = GpuSample(B, FULL, XidSeen(), True, "", 1, ())
    found = scrape(sample(shared, free))
    temps = [(labels, v) for name, labels, v in found if name == "DCGM_FI_DEV_GPU_TEMP"]
    assert [(lb["UUID"], lb["pod"], lb["namespace"], lb["container"]) for lb, _ in temps] == [
        ("GPU-a", "serve", "b", "infer"),
        ("GPU-a", "serve", "b", "side"),
        ("GPU-b", "", "", ""),
    ]
    labels = temps[0][0]
    assert labels == {
        "gpu": "0", "UUID": "GPU-a", "pci_bus_id": "00000000:18:00.0", "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-a", "container": "infer",
        "namespace": "b", "pod": "serve", "DCGM_FI_DRIVER_VERSION": "550.54.15",
    }  # fmt: skip
    assert {v for _, v in temps} == {71}
    replicas = {lb["UUID"]: v for n, lb, v in found if n == "nvct_gpu_replicas"}
    assert replicas == {"GPU-a": 4, "GPU-b": 1}
    assert ("nvct_exporter_pod_resources_up", {}, 1) in found
    assert ("nvct_exporter_sample_duration_seconds", {}, 0.25) in found


def test_without_kubernetes_there_are_no_pod_labels() -> None:
    found = scrape(
        sample(GpuSample(A, FULL, XidSeen(), True, "", 1, ()), up=None), kubernetes=False
    )
    (util,) = [lb for n, lb, _ in found if n == "DCGM_FI_DEV_GPU_UTIL"]
    assert set(util) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                         "DCGM_FI_DRIVER_VERSION"}  # fmt: skip
    assert not [n for n, _, _ in found if n == "nvct_exporter_pod_resources_up"]


def test_what_nvml_did_not_answer_is_left_out_and_xids_count_within_their_window() -> None:
    now = time.monotonic()
    # XID 48 twice long ago and once just now, 79 just now
    recent = ((now - 1000, 48), (now - 999, 48), (now - 1, 48), (now - 1, 79))
    lost = GpuSample(A, Reading(error="GPU is lost"), XidSeen(79, {79: 1, 48: 3}, {}, recent),
                     False, "NVML: GPU is lost", 1, ())  # fmt: skip
    found = scrape(sample(lost), window_s=60)
    names = {n for n, _, _ in found}
    assert "DCGM_FI_DEV_GPU_UTIL" not in names and "DCGM_FI_DEV_FB_USED" not in names
    assert [v for n, _, v in found if n == "DCGM_FI_DEV_XID_ERRORS"] == [79]
    window = {(lb["xid"], lb["window_size_in_ms"]): v
              for n, lb, v in found if n == "DCGM_EXP_XID_ERRORS_COUNT"}  # fmt: skip
    assert window == {("48", "60000"): 1, ("79", "60000"): 1}
    total = {lb["xid"]: v for n, lb, v in found if n == "DCGM_EXP_XID_ERRORS_TOTAL"}
    assert total == {"48": 3, "79": 1}  # since the exporter started: a counter
    assert [v for n, _, v in found if n == "nvct_gpu_healthy"] == [0]
    # once the window has passed: one 0 without an xid label, as dcgm-exporter's
    quiet = scrape(sample(lost), window_s=0.5)
    assert [(lb.get("xid", ""), v) for n, lb, v in quiet if n == "DCGM_EXP_XID_ERRORS_COUNT"] == [
        ("", 0)
    ]


def test_counters_keep_their_names_and_types_and_a_mig_device_has_its_own_series() -> None:
    mig = MigIdentity("MIG-a1", 2, "3g.40gb")
    reading = Reading(
        {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 5e6, "DCGM_FI_DEV_FB_USED": 100},
        (MigReading(mig, {"DCGM_FI_DEV_FB_USED": 30, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.5}),),
    )
    gpu = GpuSample(A, reading, XidSeen(), True, "", 1, (Owner("p", "ns", "whole"),),
                    {"MIG-a1": (Owner("m", "ns", "slice"),)})  # fmt: skip
    text = render(
        SampleCollector(lambda: sample(gpu), "node-a", kubernetes=True).collect()
    ).decode()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text  # no _total suffix added
    found = scrape(sample(gpu))
    used = {(lb.get("GPU_I_ID", ""), lb.get("GPU_I_PROFILE", ""), lb["container"]): v
            for n, lb, v in found if n == "DCGM_FI_DEV_FB_USED"}  # fmt: skip
    assert used == {("", "", "whole"): 100, ("2", "3g.40gb", "slice"): 30}
    (active,) = [(lb["GPU_I_ID"], v) for n, lb, v in found if n == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert active == ("2", 0.5)


def test_before_the_first_sample_only_its_age_nan() -> None:
    found = scrape(None)
    assert [n for n, _, _ in found] == ["nvct_exporter_sample_age_seconds"]
    assert math.isnan(found[0][2])
