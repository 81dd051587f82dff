"""A node without an NVIDIA GPU: the plugin waits for a /dev/nvidia<N> instead of failing."""

from __future__ import annotations

import threading
from pathlib import Path

from nvct.node.nogpu import gpu_device_nodes, wait_for_a_gpu


def dev(tmp_path: Path, *names: str) -> Path:
    (tmp_path / "dev").mkdir(parents=True, exist_ok=True)
    for name in names:
        (tmp_path / "dev" / name).touch()
    return tmp_path


def test_only_numbered_nvidia_nodes_are_gpus(tmp_path: Path) -> None:
    root = dev(tmp_path, "nvidiactl", "nvidia-uvm", "nvidia-modeset", "nvidia10", "nvidia2x")
    assert [p.name for p in gpu_device_nodes(root)] == ["nvidia10"]
    assert gpu_device_nodes(dev(tmp_path / "none", "nvidiactl")) == []
    assert gpu_device_nodes(tmp_path / "nodev") == []


def test_a_gpu_node_does_not_wait(tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()  # would end any wait at once: the answer comes from the device node
    assert wait_for_a_gpu(dev(tmp_path, "nvidia0"), stop) is True


def test_without_a_gpu_it_waits_until_stopped_or_one_appears(tmp_path: Path) -> None:
    root = dev(tmp_path, "nvidiactl")
    stop, waited = threading.Event(), []
    timer = threading.Timer(0.2, stop.set)
    timer.start()
    assert wait_for_a_gpu(root, stop, poll=0.05, waiting=lambda: waited.append(1)) is False
    timer.join()
    assert waited == [1]  # once, before the wait

    stop = threading.Event()
    appear = threading.Timer(0.2, (root / "dev" / "nvidia0").touch)
    appear.start()
    assert wait_for_a_gpu(root, stop, poll=0.05) is True
    appear.join()


def test_mps_control_idles_on_a_node_without_a_gpu(tmp_path: Path) -> None:
    """Its DaemonSet runs on every node without NFD, privileged on the node's own runtime: it
    must not exit 1 (a crash loop) where there is no driver and no GPU."""
    from nvct.config import parse_config
    from nvct.deviceplugin.mps_control import run

    root = dev(tmp_path, "nvidiactl")
    config = parse_config(
        f'driver-root = "{root}"\ndev-root = "{root}"\ncache-dir = ""\n'.encode(), source="test"
    )
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    assert run(config, stop) == 0
    timer.join()
