"""A node without an NVIDIA GPU: the plugin waits for one instead of failing.

Without node-feature-discovery nothing tells a GPU node from another, so nvct's DaemonSets run
on every node; a plugin that exited there (fail-on-init-error) would crash-loop on each of
them. A GPU is a ``/dev/nvidia<N>`` node under the dev root, as the installer's
(deployments/node-install.sh) test: a driver whose GPUs are not there yet (a driver container
still loading) is waited for the same way. A node with such a device node whose NVML fails is
an init error, decided by fail-on-init-error as before.
"""

from __future__ import annotations

import threading
from pathlib import Path

import structlog

log = structlog.get_logger("nvct-device-plugin")

POLL_S = 5.0


def gpu_device_nodes(dev_root: Path) -> list[Path]:
    """The node's ``dev/nvidia<N>`` device nodes under ``dev_root``."""
    return sorted(
        p for p in (dev_root / "dev").glob("nvidia[0-9]*") if p.name[len("nvidia") :].isdigit()
    )


def wait_for_a_gpu(dev_root: Path, stop: threading.Event, poll: float = POLL_S) -> bool:
    """True once the node has a GPU (at once when it has); False when ``stop`` is set first."""
    if gpu_device_nodes(dev_root):
        return True
    log.info(
        "no_gpu",
        note="no NVIDIA GPU on this node: advertising nothing until one appears",
        looked_for=str(dev_root / "dev" / "nvidia<N>"),
    )
    while not stop.wait(poll):
        if gpu_device_nodes(dev_root):
            log.info("gpu_appeared", dev_root=str(dev_root))
            return True
    return False
