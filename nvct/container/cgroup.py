"""Device-cgroup grants for the ``docker --gpus`` path (no shim editing the spec).

With the shim, device access is in ``linux.resources.devices`` and runc/systemd own it. A
hook alone must grant it itself: cgroup v1 ``devices.allow``, or on cgroup v2 a BPF device
program that allows the nodes and then runs the one runc attached (``cgroup_v2.py``), as
NVIDIA's hook does. Which one applies is decided as runc decides it: a unified host (cgroup2
at ``/sys/fs/cgroup``) is v2; a hybrid host keeps devices on the v1 controller.
"""

from __future__ import annotations

import os

from nvct.base.errors import ApplyError

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvct.base.order import DeviceRow


CGROUP_ROOT = "/sys/fs/cgroup"


def _cgroup_lines(pid: int, proc_root: str) -> list[str]:
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="utf-8") as f:
            return f.read().splitlines()
    except OSError as err:
        raise ApplyError(f"cannot read /proc/{pid}/cgroup: {err.strerror}") from err


# Only these lines of mountinfo can matter to a grant: a cgroup filesystem (" - " is the
# separator before the type; paths escape their spaces) or a mount on the cgroup root.
_CGROUP_TYPE = b" - cgroup"
_ON_CGROUP_ROOT = f" {CGROUP_ROOT} ".encode()


def _mounts(proc_root: str) -> list[tuple[str, str, str, str]]:
    """(mount point, root inside the filesystem, filesystem type, super options) of the
    cgroup mounts and of each mount on ``/sys/fs/cgroup``, in order.

    The other lines are passed over by a substring test, undecoded and unsplit: on a node
    running hundreds of containers mountinfo holds hundreds of KB of their overlay mounts,
    and parsing every line cost each ``--gpus`` start ~2.6 ms at 500 containers.
    """
    with open(os.path.join(proc_root, "self", "mountinfo"), "rb") as f:
        data = f.read()
    mounts = []
    for raw in data.splitlines():
        if _CGROUP_TYPE not in raw and _ON_CGROUP_ROOT not in raw:
            continue
        left, _, right = os.fsdecode(raw).partition(" - ")
        fields, extra = left.split(), right.split()
        if len(fields) >= 5 and extra:
            mounts.append((fields[4], fields[3], extra[0], extra[-1]))
    return mounts


def unified_cgroup_dir(
    pid: int,
    proc_root: str = "/proc",
    lines: list[str] | None = None,
    mounts: list[tuple[str, str, str, str]] | None = None,
) -> str | None:
    """The cgroup v2 directory of ``pid`` (whose ``/proc/PID/cgroup`` holds ``lines``, and
    this process's mountinfo ``mounts``, when given) when the host is unified (runc's test),
    else None."""
    if mounts is None:
        mounts = _mounts(proc_root)
    at_root = [m for m in mounts if m[0] == CGROUP_ROOT]
    if not at_root or at_root[-1][2] != "cgroup2":  # the last mount there is the visible one
        return None
    mount_root = at_root[-1][1]
    for line in _cgroup_lines(pid, proc_root) if lines is None else lines:
        if line.startswith("0::"):
            rel = line[3:]
            if mount_root != "/" and rel.startswith(mount_root):
                rel = rel[len(mount_root) :]
            return os.path.join(CGROUP_ROOT, rel.lstrip("/"))
    raise ApplyError(f"/proc/{pid}/cgroup has no cgroup v2 entry on a cgroup v2 host")


def devices_cgroup_dir(
    pid: int,
    proc_root: str = "/proc",
    lines: list[str] | None = None,
    mounts: list[tuple[str, str, str, str]] | None = None,
) -> str | None:
    """The cgroup v1 devices directory of ``pid``, or None when it is on cgroup v2 only."""
    if lines is None:
        lines = _cgroup_lines(pid, proc_root)
    rel = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "devices" in controllers.split(","):
            rel = path
            break
    if rel is None:
        return None
    if mounts is None:
        mounts = _mounts(proc_root)
    mount = next(
        (
            point
            for point, _, fstype, options in mounts
            if fstype == "cgroup" and "devices" in options.split(",")
        ),
        None,
    )
    if mount is None:
        raise ApplyError("the devices cgroup controller is not mounted on the host")
    return os.path.join(mount, rel.lstrip("/"))


def _any_cgroup2_dir(lines: list[str], mounts: list[tuple[str, str, str, str]]) -> str | None:
    """Where no devices controller is mounted: the process's cgroup on any cgroup2 mount."""
    cgroup2 = [m for m in mounts if m[2] == "cgroup2"]
    rel = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    if not cgroup2 or rel is None:
        return None
    return os.path.join(cgroup2[0][0], rel.lstrip("/"))


def grant_devices(
    pid: int,
    nodes: Sequence[DeviceRow],
    proc_root: str = "/proc",
    cgroup_lines: list[str] | None = None,
) -> None:
    """Allow read/write/mknod of ``[path, major, minor, mode]`` nodes in the cgroup of ``pid``;
    ``cgroup_lines``: its ``/proc/PID/cgroup``, read while the process was pinned (a pid read
    again could name another process by now).

    Raises:
        ApplyError: no device cgroup to write to, or the grant fails.
    """
    if not nodes:
        return
    lines = _cgroup_lines(pid, proc_root) if cgroup_lines is None else cgroup_lines
    mounts = _mounts(proc_root)
    unified = unified_cgroup_dir(pid, proc_root, lines, mounts)
    directory = None if unified is not None else devices_cgroup_dir(pid, proc_root, lines, mounts)
    if directory is None:
        v2 = unified if unified is not None else _any_cgroup2_dir(lines, mounts)
        if v2 is None:
            raise ApplyError(
                f"process {pid} is in no device cgroup nvct can find (neither the v1 devices "
                "controller nor a cgroup2 mount)",
                hint="mount the cgroup filesystems, or run the container with --runtime=nvidia",
            )
        from nvct.container.cgroup_v2 import grant_devices_v2

        grant_devices_v2(v2, [(major, minor) for _, major, minor, _ in nodes])
        return
    allow = os.path.join(directory, "devices.allow")
    for _, major, minor, _ in nodes:
        try:
            # Bytes: a text file's codec would be looked up and imported in every fresh
            # daemon worker (~1 ms of each --gpus start; the daemon never loads "ascii").
            with open(allow, "wb") as f:
                f.write(f"c {major}:{minor} rwm\n".encode())
        except OSError as err:
            raise ApplyError(f"cannot write {allow}: {err.strerror}") from err
