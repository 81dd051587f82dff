"""Device nodes for the features a request asks for by variable (``nvct.request.features``).

MIG management (``NVIDIA_MIG_CONFIG_DEVICES``): the ``config`` capability and every MIG
capability node of the GPUs named (``nvidia-smi mig`` creates and destroys instances there);
monitoring (``NVIDIA_MIG_MONITOR_DEVICES``): the ``monitor`` capability. IMEX channels:
``/dev/nvidia-caps-imex-channels/channel<N>`` with the driver's major (made in the container
whether or not the host has the node, as NVIDIA's toolkit makes it), ``all``: the channels the
host has. GDS, MOFED, NVSWITCH, GDRCOPY: their nodes that exist. A feature asked for that the
host cannot give is a note (``explain``, the log), not a silent no-op.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable

from nvct.base.errors import RequestError
from nvct.host.inventory import DeviceNode, Gpu, Inventory
from nvct.plan.model import PlannedDevice, Selected
from nvct.request.features import IMEX_CHANNELS, MIG_CONFIG, MIG_MONITOR, Features

IMEX_DIR = "/dev/nvidia-caps-imex-channels"
# Feature -> (variable, container paths its nodes match, what to load when there are none).
GATED_NODES = {
    "gds": ("NVIDIA_GDS", ("/dev/nvidia-fs*",), "the nvidia-fs module"),
    "mofed": (
        "NVIDIA_MOFED",
        ("/dev/infiniband/uverbs*", "/dev/infiniband/rdma_cm"),
        "the MOFED/rdma-core modules (ib_uverbs, rdma_ucm)",
    ),
    "nvswitch": (
        "NVIDIA_NVSWITCH",
        ("/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch*"),
        "an NVSwitch system's driver",
    ),
    "gdrcopy": ("NVIDIA_GDRCOPY", ("/dev/gdrdrv",), "the gdrdrv module"),
}


def _cap_node(inventory: Inventory, minor: int) -> DeviceNode | None:
    path = f"/dev/nvidia-caps/nvidia-cap{minor}"
    return next((n for n in inventory.feature_nodes if n.path == path), None)


def _mig_gpus(
    tokens: tuple[str, ...], inventory: Inventory, lookup: Callable[[str], Selected | None]
) -> list[Gpu]:
    if tokens == ("all",):
        return list(inventory.gpus)
    gpus: dict[str, Gpu] = {}
    for token in tokens:
        found = lookup(token)
        if found is None or found.mig is not None:
            raise RequestError(
                f"unknown GPU {token[:48]!r} in {MIG_CONFIG}",
                hint="name whole GPUs (index, GPU- UUID or PCI bus id), or 'all'",
            )
        gpus.setdefault(found.gpu.uuid, found.gpu)
    return list(gpus.values())


def feature_devices(
    features: Features, inventory: Inventory, lookup: Callable[[str], Selected | None]
) -> tuple[list[PlannedDevice], list[str], list[str]]:
    """The nodes the features bring, a note for each one asked for and not available, and the
    entries of /proc/driver/nvidia they need (relative to it)."""
    out: list[PlannedDevice] = []
    notes: list[str] = []
    proc: list[str] = []
    minors = dict(inventory.cap_minors)
    for variable, tokens, cap in (
        (MIG_CONFIG, features.mig_config, "config"),
        (MIG_MONITOR, features.mig_monitor, "monitor"),
    ):
        if not tokens:
            continue
        node = _cap_node(inventory, minors[cap]) if cap in minors else None
        if node is None:
            notes.append(f"{variable}: this host has no MIG {cap} capability node")
        else:
            out.append(PlannedDevice(node, f"MIG {cap} capability ({variable})"))
            proc.append(f"capabilities/mig/{cap}")
        if cap != "config":
            continue
        for gpu in _mig_gpus(tokens, inventory, lookup):
            prefix = f"gpu{gpu.minor}/"
            proc.append(f"capabilities/gpu{gpu.minor}")
            for name, minor in inventory.cap_minors:
                found = _cap_node(inventory, minor) if name.startswith(prefix) else None
                if found is not None:
                    out.append(PlannedDevice(found, f"GPU {gpu.index} MIG management ({name})"))
    out += _imex(features.imex_channels, inventory, notes)
    for feature in sorted(features.gated):
        variable, patterns, module = GATED_NODES[feature]
        nodes = [
            n for n in inventory.feature_nodes if any(fnmatch.fnmatch(n.path, p) for p in patterns)
        ]
        if not nodes:
            shown = ", ".join(patterns)
            notes.append(f"{variable}=enabled: no {shown} on this host (load {module})")
        out += [PlannedDevice(n, f"{feature} ({variable})") for n in nodes]
    return out, notes, proc


def _imex(channels: tuple[str, ...], inventory: Inventory, notes: list[str]) -> list[PlannedDevice]:
    if not channels:
        return []
    reason = f"IMEX channel ({IMEX_CHANNELS})"
    if channels == ("all",):
        nodes = [n for n in inventory.feature_nodes if posixpath.dirname(n.path) == IMEX_DIR]
        if not nodes:
            notes.append(f"{IMEX_CHANNELS}=all: this host has no IMEX channel nodes")
        return [PlannedDevice(n, reason) for n in nodes]
    if inventory.imex_major is None:
        notes.append(
            f"{IMEX_CHANNELS}={','.join(channels)}: the nvidia-caps-imex-channels driver is "
            "not loaded (not in /proc/devices)"
        )
        return []
    out = []
    for channel in channels:
        path = f"{IMEX_DIR}/channel{channel}"
        existing = next((n for n in inventory.feature_nodes if n.path == path), None)
        node = existing or DeviceNode(
            path=path,
            host_path=path,
            major=inventory.imex_major,
            minor=int(channel),
            mode=0o666,
        )
        out.append(PlannedDevice(node, reason))
    return out
