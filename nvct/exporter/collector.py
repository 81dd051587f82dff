"""The latest sample as Prometheus metric families: dcgm-exporter's names and labels, so its
dashboards work, plus nvct's own (replicas, health, the sample's age).

Rendering only: ``collect`` runs in the HTTP handler's thread and never touches NVML or the
kubelet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nvct.exporter.fields import COUNTERS, XID_WINDOW_S
from nvct.exporter.sample import GpuSample, Sample
from nvct.exporter.usage import Usage
from nvct.kubeapi.podresources.ids import Owner

# dcgm-exporter's released label set; GPU_I_* only on a MIG device's series.
GPU_LABELS = (
    "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION",
    "GPU_I_PROFILE", "GPU_I_ID",
)  # fmt: skip
MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")
POD_LABELS = ("container", "namespace", "pod")
NOBODY = Owner("", "", "")


def _add(family: Metric, labels: dict[str, str], value: float) -> None:
    family.add_sample(family.name, labels, value)


def _own(
    values: dict[str, float], usage: dict[Owner, Usage] | None, labels: dict[str, str]
) -> dict[str, float]:
    """A device's values; where its use per container was measured, the labels' container's
    own SM % and memory in place of the device's (a sum over pods adds up)."""
    if usage is None or not labels.get("pod"):
        return values
    own = usage.get(Owner(labels["pod"], labels["namespace"], labels["container"])) or Usage()
    values = dict(values)
    if "DCGM_FI_DEV_GPU_UTIL" in values:
        values["DCGM_FI_DEV_GPU_UTIL"] = own.sm_percent
    if "DCGM_FI_DEV_FB_USED" in values:
        values["DCGM_FI_DEV_FB_USED"] = own.memory_mib
    return values


class SampleCollector(Collector):
    """Renders ``latest()`` on every scrape."""

    def __init__(
        self,
        latest: Callable[[], Sample | None],
        hostname: str,
        *,
        kubernetes: bool,
        driver_version: str = "",
        xid_window_s: float = XID_WINDOW_S,
    ) -> None:
        self.latest = latest
        self.hostname = hostname
        self.driver_version = driver_version
        self.xid_window_s = xid_window_s
        self.labels = GPU_LABELS + (POD_LABELS if kubernetes else ())
        self.kubernetes = kubernetes

    def describe(self) -> list[Metric]:
        return []  # registering must not render (there may be no sample yet)

    def collect(self) -> Iterator[Metric]:
        sample = self.latest()
        yield from self._exporter(sample)
        if sample is None:
            return
        families = {c.name: Metric(c.name, c.help, c.kind) for c in COUNTERS}
        for gpu in sample.gpus:
            # one labels dict per label set, shared by its samples (the writer caches its text)
            for values in self._label_sets(gpu):
                labels = self._named(values)
                for name, value in self._values(gpu, labels).items():
                    _add(families[name], labels, value)
            for mig in gpu.reading.migs:
                measured = None if gpu.mig_usage is None else gpu.mig_usage.get(mig.mig.uuid)
                for values in self._label_sets(gpu, mig.mig.uuid, mig.mig.profile, mig.mig.gi):
                    labels = self._named(values)
                    for name, value in _own(mig.values, measured, labels).items():
                        _add(families[name], labels, value)
        yield from (f for f in families.values() if f.samples)
        yield from self._gpu_families(sample)

    def _gpu_families(self, sample: Sample) -> Iterator[Metric]:
        last_xid = Metric(
            "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "gauge"
        )
        window = str(round(self.xid_window_s * 1000))
        xid_count = Metric(
            "DCGM_EXP_XID_ERRORS_COUNT",
            "XID errors observed during the configured time window.",
            "gauge",
        )
        xid_total = Metric(
            "DCGM_EXP_XID_ERRORS_TOTAL",
            "Total XID errors observed since exporter start.",
            "counter",
        )
        healthy = Metric(
            "nvct_gpu_healthy",
            "1 when NVML answers, no XID outside the ignored list came within the quiet period "
            "and the device plugin does not mark the GPU unhealthy; else 0.",
            "gauge",
        )
        why = Metric(
            "nvct_gpu_unhealthy_reason",
            "1 for each GPU nvct_gpu_healthy marks 0, labelled with why (the device plugin's "
            "and the exporter's one health policy).",
            "gauge",
        )
        replicas = Metric(
            "nvct_gpu_replicas",
            "Devices the kubelet can allocate on this GPU (time-slicing or MPS replicas; 1 when "
            "whole).",
            "gauge",
        )
        now = time.monotonic()
        for gpu in sample.gpus:
            # dcgm-exporter: one 0 without an xid label when the window holds none
            in_window = [
                (str(code), n)
                for code, n in sorted(gpu.xids.in_window(now, self.xid_window_s).items())
            ] or [("", 0)]
            for values in self._label_sets(gpu):
                labels = self._named(values)
                _add(last_xid, labels, gpu.xids.last)
                for xid, count in in_window:
                    which = {"xid": xid} if xid else {}
                    _add(xid_count, labels | {"window_size_in_ms": window} | which, count)
                for code, count in sorted(gpu.xids.counts.items()):
                    _add(xid_total, labels | {"xid": str(code)}, count)
                _add(healthy, labels, 1 if gpu.healthy else 0)
                if not gpu.healthy:
                    _add(why, labels | {"reason": gpu.reason}, 1)
                _add(replicas, labels, gpu.replicas)
        yield from (last_xid, xid_count, xid_total, healthy, why, replicas)

    def _values(self, gpu: GpuSample, labels: dict[str, str]) -> dict[str, float]:
        """The GPU's values, with a measured container's own use (``_own``)."""
        return _own(gpu.reading.values, gpu.usage, labels)

    def _named(self, values: list[str]) -> dict[str, str]:
        """Labels by name; a whole GPU's series carries no MIG labels (dcgm-exporter's)."""
        named = dict(zip(self.labels, values, strict=True))
        return {k: v for k, v in named.items() if v or k not in MIG_LABELS}

    def _label_sets(
        self, gpu: GpuSample, mig: str = "", profile: str = "", gi: int | None = None
    ) -> list[list[str]]:
        """One label set per container holding the GPU, or the MIG device ``mig``
        (dcgm-exporter's way), or one with empty pod labels when none does."""
        g = gpu.gpu
        base = [str(g.index), g.uuid, g.pci_bus_id, g.device, g.model, self.hostname,
                self.driver_version, profile, "" if gi is None else str(gi)]  # fmt: skip
        if not self.kubernetes:
            return [base]
        owners = gpu.mig_owners.get(mig, ()) if mig else gpu.owners
        return [[*base, o.container, o.namespace, o.pod] for o in owners or (NOBODY,)]

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
