"""Per-pod usage of a shared GPU (dcgm-exporter's ``--kubernetes-virtual-gpus``): NVML's
running compute processes (memory) and process utilization samples (SM %), each process mapped
through its cgroup to its container ID, and through the runtime's CRI to its pod and container.

Under MPS each client is its own process to NVML (Volta or newer: listed by the compute call
and by the MPS compute call, nvidia-smi's "M+C"), so its memory and SM % go to its own
container; the MPS server's own context (nvidia-smi's "C" row) belongs to the MPS daemon's
container, which holds no GPU, and so to no pod. On a GPU in MIG mode each process names its
GPU instance, so a pod's use is known per MIG device.

NVML lists only the processes of the caller's PID namespace, and ``/proc/<pid>/cgroup`` must be
the host's: the exporter needs the host PID namespace for this (README, Metrics).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvct.exporter.unsupported import never
from nvct.kubeapi.podresources.ids import Owner

MIB = 1024 * 1024
NO_INSTANCE = 0xFFFFFFFF  # a process's GPU instance ID outside MIG
# containerd (cgroupfs: .../pod<uid>/<id>; systemd: cri-containerd-<id>.scope), CRI-O
# (crio-<id>.scope), docker (docker-<id>.scope, /docker/<id>): the last 64-hex name
CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True, slots=True)
class Usage:
    """What one container's processes use of one GPU."""

    sm_percent: float = 0.0
    memory_mib: float = 0.0


@dataclass(frozen=True, slots=True)
class Running:
    """One process on a GPU: its use, and the GPU instance it runs in (None outside MIG)."""

    usage: Usage
    gi: int | None = None


def container_of(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The container ID in the process's cgroup path; None: not in a container, or gone."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        path = line.split(":", 2)[-1].rstrip("/")
        found = CONTAINER_ID.search(path)
        if found:
            return found.group(1)
    return None


class ProcessReader:
    """One GPU's processes, round after round; utilization samples since the previous round."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml = nvml
        self.handle = handle
        self._last_seen = 0  # NVML's sample timestamp (µs) of the previous round
        self._mps = True  # MPS clients asked for until the driver says it never answers
        self._utilization = True  # likewise, utilization samples

    def read(self) -> dict[int, Running]:
        """pid (in this PID namespace) → its SM % (mean of the new samples), memory and GPU
        instance: the compute processes and the MPS clients, each pid once.

        Raises:
            NVMLError: NVML cannot list the processes.
        """
        nvml = self.nvml
        listed = list(nvml.nvmlDeviceGetComputeRunningProcesses(self.handle))
        listed += self._mps_clients()
        memory: dict[int, float] = {}
        gi: dict[int, int | None] = {}
        for p in listed:
            # a client listed twice ("M+C") is one process: the same memory in both answers
            memory[p.pid] = max(memory.get(p.pid, 0.0), (p.usedGpuMemory or 0) / MIB)
            instance = getattr(p, "gpuInstanceId", NO_INSTANCE)
            gi[p.pid] = None if instance == NO_INSTANCE else int(instance)
        sm: dict[int, list[float]] = {}
        for s in self._samples():
            sm.setdefault(s.pid, []).append(float(s.smUtil))
            self._last_seen = max(self._last_seen, int(s.timeStamp))
        return {
            pid: Running(
                Usage(sum(sm.get(pid, [0.0])) / len(sm.get(pid, [0.0])), memory.get(pid, 0.0)),
                gi.get(pid),
            )
            for pid in memory.keys() | sm.keys()
        }

    def _samples(self) -> list[Any]:
        """Utilization samples since the last round; none where the driver answers none
        (NOT_SUPPORTED, asked no more), and the processes' memory is attributed all the same."""
        if not self._utilization:
            return []
        nvml = self.nvml
        try:
            return list(nvml.nvmlDeviceGetProcessUtilization(self.handle, self._last_seen))
        except nvml.NVMLError_NotFound:
            return []  # no sample since the last round
        except nvml.NVMLError as err:
            if never(err):
                self._utilization = False
            return []

    def _mps_clients(self) -> list[Any]:
        """MPS clients (empty where the driver has no such call, e.g. before Volta)."""
        if not self._mps:
            return []
        nvml = self.nvml
        try:
            return list(nvml.nvmlDeviceGetMPSComputeRunningProcesses(self.handle))
        except AttributeError:
            self._mps = False  # a pynvml without the call
        except nvml.NVMLError as err:
            if never(err):
                self._mps = False
        return []


def per_owner(
    processes: Mapping[int, Running],
    containers: Mapping[str, Owner],
    proc: Path = Path("/proc"),
    gi: int | None = None,
) -> dict[Owner, Usage]:
    """Each container's processes summed (``gi``: those in that GPU instance only); processes
    outside any listed container are left out."""
    out: dict[Owner, Usage] = {}
    for pid, running in processes.items():
        if gi is not None and running.gi != gi:
            continue
        usage = running.usage
        container = container_of(pid, proc)
        owner = containers.get(container) if container else None
        if owner is None:
            continue
        old = out.get(owner, Usage())
        out[owner] = Usage(old.sm_percent + usage.sm_percent, old.memory_mib + usage.memory_mib)
    return out
