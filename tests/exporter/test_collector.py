"""A sample rendered as a scrape returns it: dcgm-exporter's names and labels, one series per
container holding a GPU, empty pod labels for a free one, nothing for what NVML did not say."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nvct.exporter.collector import SampleCollector
from nvct.exporter.sample import GpuIdentity, GpuSample, Reading, Sample, XidSeen
from nvct.kubeapi.podresources.ids import Owner

A = GpuIdentity(0, "GPU-a", "00000000:18:00.0", "nvidia0", "NVIDIA H100 80GB HBM3")
B = GpuIdentity(1, "GPU-b", "00000000:3B:00.0", "nvidia1", "NVIDIA H100 80GB HBM3")
FULL = Reading(util=87, mem_copy_util=41, fb_used_mib=10, fb_free_mib=20, temp_c=71,
               power_w=312.5, sm_clock_mhz=1755)  # fmt: skip


def scrape(sample: Sample | None, *, kubernetes: bool = True) -> list[tuple[str, dict, float]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SampleCollector(lambda: sample, "node-a", kubernetes=kubernetes))
    text = generate_latest(registry).decode()
    return [
        (s.name, dict(s.labels), s.value)
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
        "namespace": "b", "pod": "serve",
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
    assert set(util) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
    assert not [n for n, _, _ in found if n == "nvct_exporter_pod_resources_up"]


def test_what_nvml_did_not_answer_is_left_out_and_xids_are_per_code() -> None:
    lost = GpuSample(A, Reading(error="GPU is lost"), XidSeen(79, {79: 1, 48: 2}, {}), False,
                     "NVML: GPU is lost", 1, ())  # fmt: skip
    found = scrape(sample(lost))
    names = {n for n, _, _ in found}
    assert "DCGM_FI_DEV_GPU_UTIL" not in names and "DCGM_FI_DEV_FB_USED" not in names
    assert [v for n, _, v in found if n == "DCGM_FI_DEV_XID_ERRORS"] == [79]
    counts = {lb["xid"]: v for n, lb, v in found if n == "DCGM_EXP_XID_ERRORS_COUNT"}
    assert counts == {"48": 2, "79": 1}
    assert [v for n, _, v in found if n == "nvct_gpu_healthy"] == [0]


def test_before_the_first_sample_only_its_age_nan() -> None:
    found = scrape(None)
    assert [n for n, _, _ in found] == ["nvct_exporter_sample_age_seconds"]
    assert math.isnan(found[0][2])
