"""The simulated driver's /dev/nvidia* character devices (mknod: needs root)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from .common import require_root
from .spec import MIG_CONFIG_MINOR, MIG_MONITOR_MINOR, SimDriverSpec

NVIDIA_MAJOR = 195

NVIDIACTL_MINOR = 255

MODESET_MINOR = 254

UVM_MAJOR = 511

CAPS_MAJOR = 508


def _mknod(path: Path, major: int, minor: int, mode: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    os.chmod(path, mode)  # mknod's mode is filtered by the umask


def make_dev_nodes(
    spec: SimDriverSpec,
    dev_root: Path,
    *,
    minors: Iterable[int] | None = None,
    mig_caps: bool = True,
    control: bool = True,
) -> Path:
    """Create `<dev_root>/dev/nvidia*` character devices for `spec`; returns the dev dir.

    `minors` restricts the per-GPU nodes (and their MIG caps) to those GPU minors, e.g. to
    build a second dev root in which the simulated NVML sees fewer GPUs.
    `control=False` leaves out nvidiactl, so NVML reports the driver as not loaded.
    """
    require_root()
    dev = dev_root / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    keep = None if minors is None else set(minors)
    if control:
        _mknod(dev / "nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR, 0o666)
    _mknod(dev / "nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR, 0o666)
    _mknod(dev / "nvidia-uvm", UVM_MAJOR, 0, 0o666)
    _mknod(dev / "nvidia-uvm-tools", UVM_MAJOR, 1, 0o666)
    gpus = [g for g in spec.gpus if keep is None or g.minor in keep]
    for g in gpus:
        _mknod(dev / f"nvidia{g.minor}", NVIDIA_MAJOR, g.minor, 0o666)
    if mig_caps and any(g.migs for g in spec.gpus):
        caps = dev / "nvidia-caps"
        caps.mkdir(exist_ok=True)
        os.chmod(caps, 0o755)  # noqa: S103 - as nvidia-modprobe makes it
        cap_minors = {MIG_CONFIG_MINOR, MIG_MONITOR_MINOR}
        for g in gpus:
            for m in g.migs:
                cap_minors |= {m.gi_cap_minor, m.ci_cap_minor}
        for n in sorted(cap_minors):
            _mknod(caps / f"nvidia-cap{n}", CAPS_MAJOR, n, 0o444)
    return dev
