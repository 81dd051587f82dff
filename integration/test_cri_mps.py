"""MPS that outlives the device plugin, proven through containerd's CRI: nvct-cli mps-control
and nvct-device-plugin each run in a container of their own pod (as their DaemonSets do), an
MPS client in a GPU pod keeps asking its GPU's daemon, and the plugin's container is stopped,
removed and created again — what the kubelet does when the plugin crashes, is upgraded or its
config changes. runc kills every process of a container it deletes, so a daemon that lived in
the plugin's container would die with it, and the client with it.

The nvct containers run this checkout's Python from the host (its /usr, the venv and the
checkout are mounted read-only at their own paths), on the simulated driver."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from integration.cri import runtime_v1_pb2 as cri
from integration.harness.crinode import IMAGE, Node
from integration.harness.deviceplugin import PluginProcess, uuids
from integration.harness.processes import until
from integration.kubelet.cri import Pod, container_config, read_cri_log

pytestmark = [pytest.mark.root, pytest.mark.runc]
GPU = "nvidia.com/gpu"
REPO = Path(__file__).resolve().parent.parent
ASKS = 40  # the client's questions, one every 0.2 s: about 8 s of a connected client
MPS_RULE = '[{devices = ["1"], strategy = "mps", replicas = 2}]'


@pytest.fixture(scope="module")
def node(cri_node: Node) -> Node:
    return cri_node


def host_python_mounts(*writable: Path) -> list[tuple[str, str, bool]]:
    """What a container needs to run this checkout's nvct with the host's Python: the host's
    /usr, the venv and the checkout read-only; ``writable`` read-write; each at its own path."""
    venv = Path(sys.prefix)
    paths = {"/usr": True, str(venv): True, str(REPO): True}
    paths |= {str(p): False for p in writable}
    return [(p, p, ro) for p, ro in paths.items()]


def nvct_container(
    pod: Pod, name: str, plugin: PluginProcess, argv: list[str], mounts: list[Any], attempt: int
) -> Any:
    """A privileged container running ``argv`` (nvct) with the plugin's simulated-driver
    controls, as nvct's DaemonSets run it."""
    env = {"NVCT_SIM_DEV_ROOT": str(plugin.dev_root), "NVCT_SIM_CONTROL_DIR": str(plugin.control)}
    config = container_config(pod, name, IMAGE, argv, env=env, mounts=mounts)
    config.metadata.attempt = attempt
    config.log_path = f"{name}/{attempt}.log"
    config.linux.security_context.privileged = True
    return config


def mps_setup(
    node: Node, sim: Any, work: Path, rule: str
) -> tuple[PluginProcess, list[str], list[tuple[str, str, bool]]]:
    """The device plugin (not started) with MPS sharing ``rule`` and its MPS root
    ``work/mps``; the argv of ``nvct-cli mps-control`` for the same config and roots, and the
    mounts a container running either needs."""
    mps_root = work / "mps"
    plugin = PluginProcess(
        work, sim, node.plugins.plugin_dir,
        "--device-list-strategy", "cdi-annotations", "--mps-root", str(mps_root),
        **{"device-plugin.sharing.gpus": rule},
    )  # fmt: skip
    plugin.control.mkdir(parents=True, exist_ok=True)
    mounts = host_python_mounts(work, node.plugins.plugin_dir, Path(sim.driver_root).parent)
    control_argv = [
        sys.executable, "-m", "nvct.cli.main", "--config", str(plugin.config), "--dev-root",
        str(plugin.dev_root), "mps-control", "--mps-root", str(mps_root),
    ]  # fmt: skip
    return plugin, control_argv, mounts


def start(node: Node, pod: Pod, config: Any) -> str:
    container = node.cri.create(pod, config)
    node.cri.runtime.StartContainer(cri.StartContainerRequest(container_id=container), timeout=60)
    return container


def remove(node: Node, container: str) -> None:
    """The kubelet restarting a container: stop it (SIGTERM, then the runtime kills what is
    left of it), then remove it."""
    node.cri.runtime.StopContainer(
        cri.StopContainerRequest(container_id=container, timeout=10), timeout=60
    )
    node.cri.runtime.RemoveContainer(cri.RemoveContainerRequest(container_id=container), timeout=60)


def test_a_plugin_container_restart_leaves_the_mps_daemon_and_its_client_alone(
    node: Node, sim_driver: Any
) -> None:
    uuid = uuids(sim_driver)[1]
    work = node.plugin_work(sim_driver)
    mps_root = work / "mps"
    plugin, control_argv, mounts = mps_setup(node, sim_driver, work, MPS_RULE)
    control_pod = node.cri.run_pod("nvct-mps-control", namespace="nvct-system", privileged=True)
    plugin_pod = node.cri.run_pod("nvct-device-plugin", namespace="nvct-system", privileged=True)
    client_pod = None
    try:
        control = start(
            node, control_pod, nvct_container(control_pod, "mps", plugin, control_argv, mounts, 0)
        )
        plugin_argv = list(plugin.argv)  # python -m nvct.deviceplugin, as PluginProcess runs it
        first = start(
            node, plugin_pod, nvct_container(plugin_pod, "plugin", plugin, plugin_argv, mounts, 0)
        )
        healthy = {f"{uuid}::0": "Healthy", f"{uuid}::1": "Healthy"}
        ok = node.plugins.wait(lambda: healthy.items() <= node.plugins.devices(GPU).items(), 30)
        logs = plugin_pod.log_directory / "plugin/0.log"
        assert ok, read_cri_log(logs) if logs.exists() else "no plugin log"
        pid_file = mps_root / uuid / "pipe" / "nvidia-cuda-mps-control.pid"
        daemon_pid = pid_file.read_text()

        # An MPS client pod: the replica's Allocate answer, one client process asking its
        # GPU's daemon every 0.2 s (it exits at the first question nobody answers).
        answer = node.plugins.allocate(GPU, [f"{uuid}::0"])
        client_pod = node.cri.run_pod("mps-client", handler="nvidia")
        asks = f"i=0; while [ $i -lt {ASKS} ]; do echo get_default_active_thread_percentage; sleep 0.2; i=$((i+1)); done"  # noqa: E501
        script = (
            f"echo pipe=$CUDA_MPS_PIPE_DIRECTORY; ({asks}) | nvidia-cuda-mps-control; echo rc=$?"
        )
        client = start(
            node,
            client_pod,
            container_config(client_pod, "client", IMAGE, ["/bin/sh", "-c", script], [answer]),
        )
        client_log = client_pod.log_directory / "client/0.log"
        assert until(lambda: client_log.exists() and "50.0" in read_cri_log(client_log), 10), (
            read_cri_log(client_log) if client_log.exists() else "no client log"
        )

        before = node.plugins.plugins[GPU].at
        remove(node, first)  # the plugin's container, and every process in it, gone
        assert until(lambda: not node.cri.containers(plugin_pod), 10)
        second = start(
            node, plugin_pod, nvct_container(plugin_pod, "plugin", plugin, plugin_argv, mounts, 1)
        )
        assert node.plugins.wait(lambda: node.plugins.plugins[GPU].at != before, 30)
        registered = node.plugins.plugins[GPU].at
        assert node.plugins.wait(lambda: healthy.items() <= node.plugins.devices(GPU).items(), 5)
        assert time.monotonic() - registered < 1.0
        assert pid_file.read_text() == daemon_pid  # the same daemon, never restarted

        exited = node.cri.wait_exited(client_pod, client, timeout=60)
        output = exited.output
        assert exited.exit_code == 0 and "rc=0" in output, output
        assert output.count("50.0") == ASKS, output  # every question answered
        assert f"pipe=/mps/{uuid}/pipe" in output
        remove(node, second)
        remove(node, control)  # the kubelet's SIGTERM first: mps-control quits its daemon
        assert not pid_file.exists()
    finally:
        for pod in (client_pod, plugin_pod, control_pod):
            if pod is not None:
                node.cri.delete_pod(pod)
