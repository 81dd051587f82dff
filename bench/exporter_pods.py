"""The pods of ``bench.exporter``: who holds which replica of the 8 simulated GPUs, each pod's
container a real process in a cgroup named as containerd's systemd driver names it, the
simulated NVML told each process's memory and SM %, the kubelet's pod-resources answer and the
runtime's CRI listing (the stand-in of integration/kubelet/crilisting: a real containerd with 17
containers is too heavy for a bench on this machine; the exporter reads it over the same CRI
calls).

GPUs 0-6 are time-sliced into 4 replicas, two held by one pod each; GPU 7 is shared through MPS
(2 replicas, both held): its two pods' processes are MPS clients, and the MPS server's context
(28 MiB) runs in the MPS daemon's container, which holds no GPU. Every GPU has 40000 MiB in
use, which its holders' processes account for.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from integration.kubelet.crilisting import CriListing, Listed
from integration.kubelet.podresources import Container, PodResources
from integration.simdriver import inject

SHARED = "nvidia.com/gpu.shared"
TIME_SLICED = 4  # replicas of each of GPUs 0-6
MPS_REPLICAS = 2  # of the last GPU
GPU_USED_MIB = 40000
SERVER_MIB = 28  # the MPS server's own context
NAMESPACE = "bench"


@dataclass(frozen=True)
class Holder:
    """One pod holding one replica: its process's use of the GPU."""

    pod: str
    gpu: int
    replica: int
    used_mib: int
    sm_percent: int
    mps_client: bool = False


def holders(gpus: int) -> list[Holder]:
    """Two pods per GPU: 15000 + 25000 MiB (30 + 40 % SM); on the MPS GPU the second pod's
    share is less the server's context."""
    mps = gpus - 1
    out = []
    for gpu in range(gpus):
        second = GPU_USED_MIB - 15000 - (SERVER_MIB if gpu == mps else 0)
        for replica, (mib, sm) in enumerate(((15000, 30), (second, 40))):
            out.append(Holder(f"pod-{gpu}-{replica}", gpu, replica, mib, sm, gpu == mps))
    return out


def container_id(pod: str, name: str) -> str:
    """64 hex characters, as containerd makes a container ID."""
    return hashlib.sha256(f"{NAMESPACE}/{pod}/{name}".encode()).hexdigest()


def cgroup_root() -> Path:
    """A hierarchy this process may make cgroups in: cgroup v2's, or v1's pids controller."""
    v2 = Path("/sys/fs/cgroup")
    return v2 if (v2 / "cgroup.controllers").exists() else v2 / "pids"


@dataclass
class Pods:
    """The running containers' processes (pid → container ID) and the stand-ins serving them."""

    pod_resources: PodResources
    cri: CriListing
    processes: dict[int, str]
    holders: list[Holder]


@contextlib.contextmanager
def running_pods(work: Path, control: Path, uuids: list[str]) -> Iterator[Pods]:
    """Start every pod's process in its container's cgroup, tell the simulated NVML what each
    uses, serve pod-resources and the CRI listing; stop and remove all of it at the end."""
    group = cgroup_root() / f"nvct-bench-exporter-{os.getpid()}"
    group.mkdir()
    procs: list[subprocess.Popen[bytes]] = []
    kubelet = PodResources(work / "pod-resources" / "kubelet.sock")
    cri = CriListing(work / "containerd" / "containerd.sock")
    try:
        held = holders(len(uuids))
        listed = [Listed(container_id(h.pod, "main"), h.pod, NAMESPACE, "main") for h in held]
        server = Listed(container_id("nvct-mps-control", "mps"), "nvct-mps-control",
                        "nvct-system", "mps")  # fmt: skip
        pids: dict[int, str] = {}
        for entry in (*listed, server):
            proc = subprocess.Popen(["sleep", "3600"])
            procs.append(proc)
            cgroup = group / f"cri-containerd-{entry.id}.scope"
            cgroup.mkdir()
            (cgroup / "cgroup.procs").write_text(str(proc.pid))
            pids[proc.pid] = entry.id
        by_id = {cid: pid for pid, cid in pids.items()}
        for h, entry in zip(held, listed, strict=True):
            inject.gpu_process(control, h.gpu, by_id[entry.id], used_mib=h.used_mib,
                               sm_util=h.sm_percent, mps_client=h.mps_client)  # fmt: skip
        inject.gpu_process(control, len(uuids) - 1, by_id[server.id], used_mib=SERVER_MIB)
        kubelet.start()
        kubelet.set_containers(
            [Container(h.pod, NAMESPACE, "main", {SHARED: [f"{uuids[h.gpu]}::{h.replica}"]})
             for h in held]
        )  # fmt: skip
        last = len(uuids) - 1
        kubelet.set_allocatable({SHARED: [
            f"{u}::{n}" for i, u in enumerate(uuids)
            for n in range(MPS_REPLICAS if i == last else TIME_SLICED)
        ]})  # fmt: skip
        cri.start()
        cri.set_containers([*listed, server])
        yield Pods(kubelet, cri, pids, held)
    finally:
        cri.stop()
        kubelet.stop()
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        for cgroup in group.iterdir() if group.exists() else ():
            if cgroup.is_dir():
                cgroup.rmdir()
        with contextlib.suppress(FileNotFoundError):
            group.rmdir()
