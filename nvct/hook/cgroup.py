"""Device-cgroup grants for the ``docker --gpus`` path (no shim editing the spec).

With the shim, device access is in ``linux.resources.devices`` and runc/systemd own it. A
hook alone must grant it itself: cgroup v1 ``devices.allow``. On cgroup v2 access is a BPF
program attached by runc; nvct does not patch that program behind runc's back (it would be
revoked on the next update) and fails with advice to use the nvidia runtime instead.
"""

from __future__ import annotations

from pathlib import Path

from nvct.errors import ApplyError
from nvct.inventory import DeviceNode


def devices_cgroup_dir(pid: int, proc_root: Path = Path("/proc")) -> Path | None:
    """The cgroup v1 devices directory of ``pid``, or None when it is on cgroup v2 only."""
    try:
        lines = (proc_root / str(pid) / "cgroup").read_text().splitlines()
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
    return mount / rel.lstrip("/")


def _v1_mountpoint(pid: int, proc_root: Path) -> Path | None:
    for line in (proc_root / "self" / "mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if extra and extra[0] == "cgroup" and "devices" in extra[-1].split(","):
            return Path(fields[4])
    return None


def grant_devices(pid: int, nodes: list[DeviceNode]) -> None:
    """Allow read/write/mknod of ``nodes`` in the cgroup of ``pid``.

    Raises:
        ApplyError: cgroup v2 only (no devices controller), or the write fails.
    """
    if not nodes:
        return
    directory = devices_cgroup_dir(pid)
    if directory is None:
        raise ApplyError(
            "this host uses cgroup v2, where the hook alone cannot grant GPU device access",
            hint="run the container with --runtime=nvidia (nvct-runtime) instead of --gpus "
            "on plain runc; `nvct-cli configure --runtime docker` registers it",
        )
    allow = directory / "devices.allow"
    for node in nodes:
        try:
            allow.write_text(f"c {node.major}:{node.minor} rwm\n")
        except OSError as err:
            raise ApplyError(f"cannot write {allow}: {err.strerror}") from err
