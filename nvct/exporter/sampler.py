"""The sampling loop: every interval, NVML's answers for each GPU, the XIDs seen, who holds
each GPU (kubelet pod-resources) and the device plugin's verdict, published as one ``Sample``.

Readers take ``latest()`` (a reference swap under a lock): a round that is slow, or stuck in
the driver, leaves the previous sample in place, and its age shows that.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from nvct.exporter.fields import XID_WINDOW_S
from nvct.exporter.health import plugin_view, verdict
from nvct.exporter.nvml_reader import XidWatch
from nvct.exporter.probes import DeviceReader
from nvct.exporter.sample import GpuIdentity, GpuSample, Reading, Sample, XidSeen
from nvct.exporter.usage import ProcessReader, Usage, per_owner
from nvct.kubeapi.cri.client import CriClient, CriError
from nvct.kubeapi.podresources.client import PodResourcesClient, PodResourcesError
from nvct.kubeapi.podresources.ids import (
    DeviceMap,
    Owner,
    owners_by_gpu,
    owners_by_mig,
    replicas_by_gpu,
    replicas_by_mig,
)
from nvct.node.health.nvml_condition import read_condition
from nvct.node.health.policy import GpuCondition
from nvct.node.status import advertised

log = structlog.get_logger("nvct-exporter")


@dataclass(frozen=True, slots=True)
class Policy:
    """What the health verdict and pod attribution need besides NVML."""

    plugin_dir: Path
    quiet_s: float
    ignored_xids: tuple[int, ...]
    extra_resources: tuple[str, ...] = ()
    xid_window_s: float = XID_WINDOW_S


class Sampler:
    """One NVML session, one optional kubelet client, one daemon thread."""

    def __init__(
        self,
        nvml: Any,
        gpus: list[GpuIdentity],
        devices: DeviceMap,
        pod_resources: PodResourcesClient | None,
        policy: Policy,
        cri: CriClient | None = None,
    ) -> None:
        self.nvml = nvml
        self.gpus = gpus
        self.devices = devices
        self.pod_resources = pod_resources
        self.policy = policy
        self.handles = {g.uuid: nvml.nvmlDeviceGetHandleByUUID(g.uuid) for g in gpus}
        self.readers = {g.uuid: DeviceReader(nvml, self.handles[g.uuid], g) for g in gpus}
        self.cri = cri
        self.processes = {g.uuid: ProcessReader(nvml, self.handles[g.uuid]) for g in gpus}
        self._cri_problem: str | None = None
        self._invisible: set[str] = set()  # GPUs whose processes NVML did not show (logged)
        self.xids = XidWatch(nvml, self.handles, policy.xid_window_s)
        self._latest: Sample | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._kubelet_problem: str | None = None  # logged once per outage, not every round

    def latest(self) -> Sample | None:
        """The last finished round, or None before the first one."""
        with self._lock:
            return self._latest

    def start(self, interval: float) -> threading.Thread:
        """Watch XIDs and sample every ``interval`` seconds in daemon threads."""
        self.xids.start()
        thread = threading.Thread(target=self._loop, args=(interval,), name="sampler", daemon=True)
        thread.start()
        self._thread = thread
        return thread

    def stop(self) -> None:
        """Stop after the current round; stop waiting for XIDs."""
        self._stop.set()
        self.xids.stop()

    def close(self) -> None:
        """Free what NVML handed out, once the last round ended (after ``stop``)."""
        if self._thread is not None:
            self._thread.join(timeout=10)
            if self._thread.is_alive():
                return  # stuck in the driver: the process exits without freeing
        for reader in self.readers.values():
            reader.close()

    def _loop(self, interval: float) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                sample = self.sample_once()
            except Exception as err:  # a bug in one round must not end sampling for good
                log.error("sample_failed", error=repr(err))
                print(f"nvct-cli exporter: error: sample failed: {err!r}", file=sys.stderr)
            else:
                with self._lock:
                    self._latest = sample
            self._stop.wait(max(0.0, interval - (time.monotonic() - started)))

    def sample_once(self) -> Sample:
        """One round, synchronously."""
        started = time.monotonic()
        readings = {g.uuid: self.readers[g.uuid].read() for g in self.gpus}
        conditions = {
            uuid: read_condition(self.nvml, self.handles[uuid])
            for uuid, reading in readings.items()
            if not reading.error  # a lost GPU answers nothing
        }
        owners, mig_owners, replicas, up = self._kubelet()
        # per-pod use where one series can carry several pods: a GPU's replicas, the parent of
        # held MIG devices, a MIG device's replicas
        shared = [
            g
            for g in self.gpus
            if owners.get(g.uuid)
            and (replicas.get(g.uuid, 1) > 1 or any(m.uuid in mig_owners for m in g.migs))
        ]
        usage, mig_usage = self._usage(shared, readings, replicas) if shared else ({}, {})
        plugin = plugin_view(self.policy.plugin_dir, self.devices)
        quiet_s = self.policy.quiet_s if plugin.quiet_s is None else plugin.quiet_s
        ignored = self.policy.ignored_xids if plugin.ignored_xids is None else plugin.ignored_xids
        xids = self.xids.seen()
        now = time.monotonic()
        out = []
        for gpu in self.gpus:
            seen = xids.get(gpu.uuid, XidSeen())
            healthy, reason = verdict(
                readings[gpu.uuid],
                seen,
                plugin.verdicts.get(gpu.uuid, ""),
                now=now,
                quiet_s=quiet_s,
                ignored_xids=ignored,
                condition=conditions.get(gpu.uuid, GpuCondition()),
                plugin_holds=plugin.present,
                accepted=gpu.uuid in plugin.accepted,
            )
            out.append(
                GpuSample(
                    gpu,
                    readings[gpu.uuid],
                    seen,
                    healthy,
                    reason,
                    replicas.get(gpu.uuid, 1),
                    tuple(owners.get(gpu.uuid, ())),
                    {m.uuid: mig_owners[m.uuid] for m in gpu.migs if m.uuid in mig_owners},
                    usage.get(gpu.uuid),
                    mig_usage.get(gpu.uuid),
                )
            )
        return Sample(tuple(out), now, now - started, up)

    def _usage(
        self, shared: list[GpuIdentity], readings: dict[str, Reading], replicas: dict[str, int]
    ) -> tuple[dict[str, dict[Owner, Usage]], dict[str, dict[str, dict[Owner, Usage]]]]:
        """Each shared GPU's use per container, and on a GPU in MIG mode that of each MIG
        device with replicas (MIG UUID → container → use; one held whole keeps its own
        values, which are its holder's); {} where the runtime cannot be asked."""
        if self.cri is None:
            return {}, {}
        try:
            containers = self.cri.owners()
        except CriError as err:
            if self._cri_problem is None:
                detail = "shared GPUs show the GPU's values on every pod"
                log.warning("cri_unavailable", error=err.one_line(), detail=detail)
            self._cri_problem = err.one_line()
            return {}, {}
        if self._cri_problem is not None:
            log.info("cri_available", socket=self.cri.socket)
            self._cri_problem = None
        out, migs = {}, {}
        for gpu in shared:
            try:
                processes = self.processes[gpu.uuid].read()
            except self.nvml.NVMLError:
                continue
            used = readings[gpu.uuid].values.get("DCGM_FI_DEV_FB_USED", 0)
            if not processes and used > 0 and gpu.uuid not in self._invisible:
                # memory in use but no process: they live in another PID namespace
                self._invisible.add(gpu.uuid)
                fix = "run the exporter in the host PID namespace (hostPID: true)"
                log.warning("gpu_processes_invisible", gpu=gpu.uuid, fb_used_mib=used, fix=fix)
            out[gpu.uuid] = per_owner(processes, containers)
            migs[gpu.uuid] = {
                m.uuid: per_owner(processes, containers, gi=m.gi)
                for m in gpu.migs
                if replicas.get(m.uuid, 1) > 1
            }
        return out, migs

    def _kubelet(
        self,
    ) -> tuple[dict[str, list[Owner]], dict[str, tuple[Owner, ...]], dict[str, int], bool | None]:
        if self.pod_resources is None:
            return {}, {}, {}, None
        # what the plugin advertises is a GPU resource whatever a sharing rule named it
        extra = (*self.policy.extra_resources, *advertised(self.policy.plugin_dir))
        try:
            held = self.pod_resources.gpus_held(extra)
            allocatable = self.pod_resources.gpus_allocatable(extra)
        except PodResourcesError as err:
            if self._kubelet_problem is None:
                log.warning("pod_resources_unavailable", error=err.one_line())
            self._kubelet_problem = err.one_line()
            return {}, {}, {}, False
        if self._kubelet_problem is not None:
            log.info("pod_resources_available", socket=self.pod_resources.socket)
            self._kubelet_problem = None
        return (
            owners_by_gpu(held, self.devices),
            owners_by_mig(held, self.devices),
            replicas_by_gpu(allocatable, self.devices) | replicas_by_mig(allocatable, self.devices),
            True,
        )
