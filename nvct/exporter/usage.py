"""Per-pod usage of a shared GPU (dcgm-exporter's ``--kubernetes-virtual-gpus``): NVML's
running compute processes (memory) and process utilization samples (SM %), each process mapped
through its cgroup to its container ID, and through the runtime's CRI to its pod and container.

NVML lists only the processes of the caller's PID namespace, and ``/proc/<pid>/cgroup`` must be
the host's: the exporter needs the host PID namespace for this (README, Metrics).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvct.kubeapi.podresources.ids import Owner

MIB = 1024 * 1024
# containerd (cgroupfs: .../pod<uid>/<id>; systemd: cri-containerd-<id>.scope), CRI-O
# (crio-<id>.scope), docker (docker-<id>.scope, /docker/<id>): the last 64-hex name
CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True, slots=True)
class Usage:
    """What one container's processes use of one GPU."""

    sm_percent: float = 0.0
    memory_mib: float = 0.0


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

    def read(self) -> dict[int, Usage]:
        """pid (in this PID namespace) → its SM % (mean of the new samples) and memory.

        Raises:
            NVMLError: NVML cannot list the processes.
        """
        nvml = self.nvml
        memory = {
            p.pid: (p.usedGpuMemory or 0) / MIB
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        }
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(self.handle, self._last_seen)
        except nvml.NVMLError_NotFound:
            samples = []  # no sample since the last round
        sm: dict[int, list[float]] = {}
        for s in samples:
            sm.setdefault(s.pid, []).append(float(s.smUtil))
            self._last_seen = max(self._last_seen, int(s.timeStamp))
        return {
            pid: Usage(sum(sm.get(pid, [0.0])) / len(sm.get(pid, [0.0])), memory.get(pid, 0.0))
            for pid in memory.keys() | sm.keys()
        }


def per_owner(
    processes: Mapping[int, Usage], containers: Mapping[str, Owner], proc: Path = Path("/proc")
) -> dict[Owner, Usage]:
    """Each container's processes summed; processes outside any listed container are left out."""
    out: dict[Owner, Usage] = {}
    for pid, usage in processes.items():
        container = container_of(pid, proc)
        owner = containers.get(container) if container else None
        if owner is None:
            continue
        old = out.get(owner, Usage())
        out[owner] = Usage(old.sm_percent + usage.sm_percent, old.memory_mib + usage.memory_mib)
    return out
