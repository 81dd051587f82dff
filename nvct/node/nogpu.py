"""A node without an NVIDIA GPU: the device plugin and mps-control wait for one, not fail.

Without node-feature-discovery nothing tells a GPU node from another, so nvct's DaemonSets run
on every node; a plugin that exited there (fail-on-init-error) would crash-loop on each of
them. While it waits the plugin writes a status file with no resources, so its probes
(nvct-cli device-plugin-status) pass and the pod is Ready with nothing to offer. A GPU is a
``/dev/nvidia<N>`` node under the dev root, the installer's test (deployments/node-install.sh):
a driver whose GPUs are not there yet (a driver container still loading) is waited for the
same way. A node with such a device node whose NVML fails is an init error, decided by
fail-on-init-error as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import structlog

log = structlog.get_logger("nvct")

POLL_S = 5.0


def gpu_device_nodes(dev_root: Path) -> list[Path]:
    """The node's ``dev/nvidia<N>`` device nodes under ``dev_root``."""
    return sorted(
        p for p in (dev_root / "dev").glob("nvidia[0-9]*") if p.name[len("nvidia") :].isdigit()
    )


def wait_for_a_gpu(
    dev_root: Path,
    stop: threading.Event,
    poll: float = POLL_S,
    waiting: Callable[[], None] | None = None,
) -> bool:
    """True once the node has a GPU (at once when it has); False when ``stop`` is set first.
    ``waiting`` runs once before a wait."""
    if gpu_device_nodes(dev_root):
        return True
    if waiting is not None:
        waiting()
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
