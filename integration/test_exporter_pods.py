"""Per-pod usage of a time-sliced GPU from the real ``nvct-cli exporter``: two pods each hold a
replica of one GPU, their containers really created by containerd's CRI (the CRI node of
integration/harness/crinode) from the device plugin's Allocate answers; the simulated NVML says
each container's process uses the GPU, and the exporter maps each process through its cgroup
and the CRI to its pod, so each pod's series carry its own SM % and memory and a sum over pods
is the GPU's, not twice it. Asked from another PID namespace (no hostPID), NVML shows no
process, and the exporter says so."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from integration.cri import runtime_v1_pb2 as cri
from integration.harness.crinode import IMAGE, Node
from integration.kubelet.cri import container_config
from integration.kubelet.podresources import Container, PodResources
from integration.simdriver import inject
from integration.test_exporter import Exporter, Series, wait_for

pytestmark = [pytest.mark.root, pytest.mark.runc]
GPU = "nvidia.com/gpu"
SHARING = {
    "device-plugin.sharing.rename-by-default": "false",
    "device-plugin.sharing.gpus": '[{devices = ["0"], replicas = 4}]',
}


@pytest.fixture(scope="module")
def node(cri_node: Node) -> Node:
    return cri_node


def host_pid(container_id: str) -> int:
    """The pid (ours) of the container's process, found by its cgroup as the exporter does."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    if container_id in (proc / "cgroup").read_text():
                        return int(proc.name)
                except OSError:
                    continue
        time.sleep(0.1)
    raise AssertionError(f"no process of container {container_id}")


def per_pod(found: list[Series], name: str, uuid: str) -> dict[str, float]:
    return {s.labels["pod"]: s.value for s in found if s.name == name and s.labels["UUID"] == uuid}


def test_each_pod_on_a_time_sliced_gpu_gets_its_own_usage(
    node: Node, sim_driver: Any, tmp_path: Path
) -> None:
    uuid = sim_driver.spec.gpus[0].uuid
    kubelet = PodResources(tmp_path / "pod-resources" / "kubelet.sock").start()
    pods = []
    try:
        with node.plugin("--device-list-strategy", "cdi-annotations", **SHARING):
            held = {}
            for name, replica in (("train-a", 0), ("train-b", 1)):
                answer = node.plugins.allocate(GPU, [f"{uuid}::{replica}"])
                pod = node.cri.run_pod(name, handler="nvidia", namespace=f"team-{name[-1]}")
                pods.append(pod)
                config = container_config(pod, "main", IMAGE, ["sleep", "300"], [answer])
                cid = node.cri.create(pod, config)
                node.cri.runtime.StartContainer(cri.StartContainerRequest(container_id=cid))
                held[name] = host_pid(cid)
        kubelet.set_containers(
            [Container(n, f"team-{n[-1]}", "main", {GPU: [f"{uuid}::{r}"]})
             for n, r in (("train-a", 0), ("train-b", 1))]
        )  # fmt: skip
        kubelet.set_allocatable({GPU: [f"{uuid}::{n}" for n in range(4)]})

        def start(work: Path, prefix: list[str]) -> Exporter:
            exporter = Exporter(work, sim_driver, kubelet.socket, 0.3)
            exporter.argv[:0] = prefix
            exporter.argv += ["--per-pod-usage", "--cri-socket", str(node.containerd.socket)]
            inject.set_metrics(exporter.control, 0, util=75, memory_used_mib=8000)
            inject.gpu_process(exporter.control, 0, held["train-a"], used_mib=3000, sm_util=25)
            inject.gpu_process(exporter.control, 0, held["train-b"], used_mib=5000, sm_util=50)
            return exporter.start()

        # the host's PID namespace: each pod its own numbers, and they add up to the GPU's
        exporter = start(tmp_path / "host", [])
        try:
            want = {"train-a": 3000, "train-b": 5000}
            wait_for(lambda: per_pod(exporter.scrape(), "DCGM_FI_DEV_FB_USED", uuid) == want, 20)
            found = exporter.scrape()
            assert per_pod(found, "DCGM_FI_DEV_GPU_UTIL", uuid) == {"train-a": 25, "train-b": 50}
            assert sum(per_pod(found, "DCGM_FI_DEV_FB_USED", uuid).values()) == 8000
            # what is not per process stays the GPU's on every pod
            assert per_pod(found, "DCGM_FI_DEV_GPU_TEMP", uuid) == {"train-a": 30, "train-b": 30}
            # a GPU nobody shares keeps its own values
            assert per_pod(found, "DCGM_FI_DEV_FB_USED", sim_driver.spec.gpus[1].uuid) == {"": 0}
        finally:
            assert exporter.stop() == 0

        # a PID namespace of its own (a pod without hostPID): NVML lists none of them
        alone = start(tmp_path / "alone", ["unshare", "--pid", "--fork", "--kill-child", "--"])
        try:
            wait_for(
                lambda: any(e["event"] == "gpu_processes_invisible" for e in alone.events()), 20
            )
            zero = {"train-a": 0, "train-b": 0}
            assert per_pod(alone.scrape(), "DCGM_FI_DEV_FB_USED", uuid) == zero
        finally:
            alone.stop()
    finally:
        for pod in pods:
            node.cri.delete_pod(pod)
        kubelet.stop()
