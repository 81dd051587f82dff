"""Per-pod usage of a shared GPU from the real ``nvct-cli exporter``: two pods each hold a
replica of one GPU (time-sliced, or MPS with the MPS daemon in a pod of its own), their
containers really created by containerd's CRI (the CRI node of integration/harness/crinode)
from the device plugin's Allocate answers; the simulated NVML says each container's process
uses the GPU, and the exporter maps each process through its cgroup and the CRI to its pod, so
each pod's series carry its own SM % and memory and a sum over pods is the GPU's, not twice it.
Asked from another PID namespace (no hostPID), NVML shows no process, and the exporter says
so. On a GPU in MIG mode, the same per MIG device (test_exporter_pods_mig.py)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.cri import runtime_v1_pb2 as cri
from integration.harness.crinode import IMAGE, Node
from integration.kubelet.cri import container_config
from integration.kubelet.podresources import Container, PodResources
from integration.simdriver import inject
from integration.test_cri_mps import mps_setup, nvct_container, start
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


def host_pid(container_id: str, comm: str = "", *, leader: bool = False) -> int:
    """The pid (ours) of the container's process (named ``comm``, when given), found by its
    cgroup as the exporter does. ``leader``: only a session leader, the daemon that ``-d``
    forked and ``setsid``'d, not the parent it leaves or a probe's client of the same name."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    if (
                        container_id in (proc / "cgroup").read_text()
                        and (not comm or (proc / "comm").read_text().strip() == comm)
                        and (not leader or _session(proc) == int(proc.name))
                    ):
                        return int(proc.name)
                except OSError:
                    continue
        time.sleep(0.1)
    raise AssertionError(f"no process {comm} of container {container_id}")


def _session(proc: Path) -> int:
    # /proc/<pid>/stat: "pid (comm) state ppid pgrp session ..."; comm may hold spaces
    return int((proc / "stat").read_text().rpartition(")")[2].split()[3])


@contextlib.contextmanager
def pods_and_kubelet(node: Node, tmp_path: Path) -> Iterator[tuple[PodResources, list[Any]]]:
    """The kubelet's pod-resources stand-in and a list for the pods a test starts: every pod
    deleted and the stand-in stopped at the end."""
    kubelet = PodResources(tmp_path / "pod-resources" / "kubelet.sock").start()
    pods: list[Any] = []
    try:
        yield kubelet, pods
    finally:
        for pod in pods:
            node.cri.delete_pod(pod)
        kubelet.stop()


@contextlib.contextmanager
def usage_exporter(node: Node, sim: Any, kubelet: PodResources, work: Path) -> Iterator[Exporter]:
    """``nvct-cli exporter --per-pod-usage`` asking ``kubelet`` and the node's containerd (not
    started yet: inject its NVML state first); stopped at the end, cleanly after a pass."""
    exporter = Exporter(work, sim, kubelet.socket, 0.3)
    exporter.argv += ["--per-pod-usage", "--cri-socket", str(node.containerd.socket)]
    try:
        yield exporter
    except BaseException:
        if exporter.proc is not None:
            exporter.stop()
        raise
    assert exporter.proc is None or exporter.stop() == 0


def holder(node: Node, name: str, namespace: str, resource: str, device: str) -> tuple[Any, int]:
    """A pod whose container (sleeping) the CRI created from the plugin's Allocate answer for
    ``device``: the pod, and its process's pid (ours)."""
    answer = node.plugins.allocate(resource, [device])
    pod = node.cri.run_pod(name, handler="nvidia", namespace=namespace)
    config = container_config(pod, "main", IMAGE, ["sleep", "300"], [answer])
    cid = node.cri.create(pod, config)
    node.cri.runtime.StartContainer(cri.StartContainerRequest(container_id=cid))
    return pod, host_pid(cid)


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
                pod, held[name] = holder(node, name, f"team-{name[-1]}", GPU, f"{uuid}::{replica}")
                pods.append(pod)
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


MPS_RULE = '[{devices = ["1"], strategy = "mps", replicas = 2}]'


def test_each_pod_on_mps_replicas_gets_its_own_usage_not_the_mps_servers(
    node: Node, sim_driver: Any, tmp_path: Path
) -> None:
    """Two pods on MPS replicas of GPU 1: NVML lists each client (the MPS and the compute
    call, as a Volta-or-newer driver does) and the MPS server with its own context; each pod
    gets its client's memory and SM %, and the server's memory, in the MPS daemon's pod that
    holds no GPU, goes to no pod."""
    uuid = sim_driver.spec.gpus[1].uuid
    work = node.plugin_work(sim_driver)  # its cdi/ is the one the runtime handler reads
    plugin, control_argv, mounts = mps_setup(node, sim_driver, work, MPS_RULE)
    with pods_and_kubelet(node, tmp_path) as (kubelet, pods):
        control_pod = node.cri.run_pod("nvct-mps-control", namespace="nvct-system",
                                       privileged=True)  # fmt: skip
        pods.append(control_pod)
        daemon = start(node, control_pod, nvct_container(control_pod, "mps", plugin,
                                                         control_argv, mounts, 0))  # fmt: skip
        # the MPS server runs beside the control daemon, in its container (the daemon's
        # process stands for it: the simulated daemon starts no server)
        server = host_pid(daemon, comm="nvidia-cuda-mps", leader=True)
        plugin.start()
        try:
            healthy = {f"{uuid}::0": "Healthy", f"{uuid}::1": "Healthy"}
            ready = node.plugins.wait(
                lambda: healthy.items() <= node.plugins.devices(GPU).items(), 30
            )
            assert ready, plugin.output()
            held = {}
            for name, replica in (("infer-a", 0), ("infer-b", 1)):
                pod, held[name] = holder(node, name, "serving", GPU, f"{uuid}::{replica}")
                pods.append(pod)
        finally:
            plugin.stop()
        kubelet.set_containers(
            [Container(n, "serving", "main", {GPU: [f"{uuid}::{r}"]})
             for n, r in (("infer-a", 0), ("infer-b", 1))]
        )  # fmt: skip
        kubelet.set_allocatable({GPU: [f"{uuid}::0", f"{uuid}::1"]})
        with usage_exporter(node, sim_driver, kubelet, tmp_path / "exporter") as exporter:
            control = exporter.control
            inject.set_metrics(control, 1, util=60, memory_used_mib=3000 + 5000 + 28)
            inject.gpu_process(control, 1, server, used_mib=28)  # the server's own context
            for name, mib, sm in (("infer-a", 3000, 20), ("infer-b", 5000, 40)):
                inject.gpu_process(control, 1, held[name], used_mib=mib, sm_util=sm,
                                   mps_client=True)  # fmt: skip
            exporter.start()
            want = {"infer-a": 3000, "infer-b": 5000}
            wait_for(lambda: per_pod(exporter.scrape(), "DCGM_FI_DEV_FB_USED", uuid) == want, 20)
            found = exporter.scrape()
            assert per_pod(found, "DCGM_FI_DEV_GPU_UTIL", uuid) == {"infer-a": 20, "infer-b": 40}
            # the GPU's own values stay on every pod (free memory: the GPU's 8028 MiB used);
            # the pods' sum is the GPU's used memory less the MPS server's context, no pod's
            free = 81559 - 8028
            assert per_pod(found, "DCGM_FI_DEV_FB_FREE", uuid) == {"infer-a": free, "infer-b": free}
            assert sum(per_pod(found, "DCGM_FI_DEV_FB_USED", uuid).values()) == 8028 - 28
            assert not [s for s in found if s.labels.get("pod") == "nvct-mps-control"]
