"""Device-cgroup grants for the ``docker --gpus`` path (no shim editing the spec).

With the shim, device access is in ``linux.resources.devices`` and runc/systemd own it. A
hook alone must grant it itself: cgroup v1 ``devices.allow``. On cgroup v2 access is a BPF
program attached by runc; nvct does not patch that program behind runc's back (it would be
revoked on the next update) and fails with advice to use the nvidia runtime instead.
"""

from __future__ import annotations

import os

from nvct.base.errors import ApplyError

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvct.plan.workorder import DeviceRow


def devices_cgroup_dir(pid: int, proc_root: str = "/proc") -> str | None:
    """The cgroup v1 devices directory of ``pid``, or None when it is on cgroup v2 only."""
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as err:
        raise ApplyError(f"cannot read /proc/{pid}/cgroup: {err.strerror}") from err
    rel = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "devices" in controllers.split(","):
            rel = path
            break
    if rel is None:
        return None
    mount = _v1_mountpoint(pid, proc_root)
    if mount is None:
        raise ApplyError("the devices cgroup controller is not mounted on the host")
    return os.path.join(mount, rel.lstrip("/"))


def _v1_mountpoint(pid: int, proc_root: str) -> str | None:
    with open(os.path.join(proc_root, "self", "mountinfo"), encoding="utf-8") as f:
        text = f.read()
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if extra and extra[0] == "cgroup" and "devices" in extra[-1].split(","):
            return fields[4]
    return None


def grant_devices(pid: int, nodes: Sequence[DeviceRow], proc_root: str = "/proc") -> None:
    """Allow read/write/mknod of ``[path, major, minor, mode]`` nodes in the cgroup of ``pid``.

    Raises:
        ApplyError: cgroup v2 only (no devices controller), or the write fails.
    """
    if not nodes:
        return
    directory = devices_cgroup_dir(pid, proc_root)
    if directory is None:
        raise ApplyError(
            "this host uses cgroup v2, where the hook alone cannot grant GPU device access",
            hint="run the container with --runtime=nvidia (nvct-runtime) instead of --gpus "
            "on plain runc; `nvct-cli configure --runtime docker` registers it",
        )
    allow = os.path.join(directory, "devices.allow")
    for _, major, minor, _ in nodes:
        try:
            with open(allow, "w", encoding="ascii") as f:
                f.write(f"c {major}:{minor} rwm\n")
        except OSError as err:
            raise ApplyError(f"cannot write {allow}: {err.strerror}") from err
