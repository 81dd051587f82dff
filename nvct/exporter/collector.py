"""The latest sample as Prometheus metric families: dcgm-exporter's names and labels, so its
dashboards work, plus nvct's own (replicas, health, the sample's age).

Rendering only: ``collect`` runs in the HTTP handler's thread and never touches NVML or the
kubelet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nvct.exporter.sample import GpuSample, Reading, Sample
from nvct.kubeapi.podresources.ids import Owner

GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
POD_LABELS = ("container", "namespace", "pod")
NOBODY = Owner("", "", "")


@dataclass(frozen=True, slots=True)
class Field:
    """One per-GPU metric read from a ``Reading``."""

    name: str
    help: str
    value: Callable[[Reading], float | None]


READINGS = (
    Field("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda r: r.util),
    Field("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda r: r.mem_copy_util),
    Field("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda r: r.fb_used_mib),
    Field("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", lambda r: r.fb_free_mib),
    Field("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda r: r.temp_c),
    Field("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda r: r.power_w),
    Field("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda r: r.sm_clock_mhz),
)


class SampleCollector(Collector):
    """Renders ``latest()`` on every scrape."""

    def __init__(
        self, latest: Callable[[], Sample | None], hostname: str, *, kubernetes: bool
    ) -> None:
        self.latest = latest
        self.hostname = hostname
        self.labels = GPU_LABELS + (POD_LABELS if kubernetes else ())
        self.kubernetes = kubernetes

    def describe(self) -> list[Metric]:
        return []  # registering must not render (there may be no sample yet)

    def collect(self) -> Iterator[Metric]:
        sample = self.latest()
        yield from self._exporter(sample)
        if sample is None:
            return
        families = {f.name: GaugeMetricFamily(f.name, f.help, labels=self.labels) for f in READINGS}
        last_xid = GaugeMetricFamily(
            "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error seen.", labels=self.labels
        )
        xid_count = GaugeMetricFamily(
            "DCGM_EXP_XID_ERRORS_COUNT",
            "XID errors seen since the exporter started, per XID.",
            labels=(*self.labels, "xid"),
        )
        healthy = GaugeMetricFamily(
            "nvct_gpu_healthy",
            "1 when NVML answers, no XID outside the ignored list came within the quiet period "
            "and the device plugin does not mark the GPU unhealthy; else 0.",
            labels=self.labels,
        )
        why = GaugeMetricFamily(
            "nvct_gpu_unhealthy_reason",
            "1 for each GPU nvct_gpu_healthy marks 0, labelled with why (the device plugin's "
            "and the exporter's one health policy).",
            labels=(*self.labels, "reason"),
        )
        replicas = GaugeMetricFamily(
            "nvct_gpu_replicas",
            "Devices the kubelet can allocate on this GPU (time-slicing or MPS replicas; 1 when "
            "whole).",
            labels=self.labels,
        )
        for gpu in sample.gpus:
            for values in self._label_sets(gpu):
                for f in READINGS:
                    value = f.value(gpu.reading)
                    if value is not None:
                        families[f.name].add_metric(values, value)
                last_xid.add_metric(values, gpu.xids.last)
                for code, count in sorted(gpu.xids.counts.items()):
                    xid_count.add_metric([*values, str(code)], count)
                healthy.add_metric(values, 1 if gpu.healthy else 0)
                if not gpu.healthy:
                    why.add_metric([*values, gpu.reason], 1)
                replicas.add_metric(values, gpu.replicas)
        yield from families.values()
        yield from (last_xid, xid_count, healthy, why, replicas)

    def _label_sets(self, gpu: GpuSample) -> list[list[str]]:
        """One label set per container holding the GPU (dcgm-exporter's way), or one with
        empty pod labels when none does."""
        g = gpu.gpu
        base = [str(g.index), g.uuid, g.pci_bus_id, g.device, g.model, self.hostname]
        if not self.kubernetes:
            return [base]
        return [[*base, o.container, o.namespace, o.pod] for o in gpu.owners or (NOBODY,)]

    def _exporter(self, sample: Sample | None) -> Iterator[Metric]:
        age = GaugeMetricFamily(
            "nvct_exporter_sample_age_seconds",
            "Seconds since the latest NVML sample finished (NaN before the first).",
        )
        since = float("nan") if sample is None else time.monotonic() - sample.finished_at
        age.add_metric([], since)
        yield age
        if sample is None:
            return
        took = GaugeMetricFamily(
            "nvct_exporter_sample_duration_seconds", "Seconds the latest sample took."
        )
        took.add_metric([], sample.duration_s)
        yield took
        if sample.pod_resources_up is not None:
            up = GaugeMetricFamily(
                "nvct_exporter_pod_resources_up",
                "1 when the kubelet's pod-resources API answered the latest sample.",
            )
            up.add_metric([], 1 if sample.pod_resources_up else 0)
            yield up
