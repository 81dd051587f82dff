"""``/proc/driver/nvidia`` as NVIDIA's toolkit shows it to a container.

The kernel shows every GPU of the host under ``/proc/driver/nvidia/gpus`` and
``ModifyDeviceFiles: 1`` in ``params``, which tells CUDA it may create device nodes. As
libnvidia-container does (``mount_procfs``, ``mount_procfs_gpu``), a read-only tmpfs goes over
the container's ``/proc/driver/nvidia`` holding a copy of ``params`` with
``ModifyDeviceFiles: 0``, ``version`` and ``registry``, and a bind of the host's entry of each
of the container's own GPUs under ``gpus/`` (and its MIG ``capabilities/gpu<minor>``, which
CUDA reads to find its MIG access caps).

Runs in the container's mount namespace before the container's root is pivoted to (nvct-hook:
prestart after joining it, or createContainer, where the runtime runs it), so host paths (the
proc root) and the rootfs (resolved with ``Rootfs``) are both reachable. Where the container's
procfs has no ``driver/nvidia`` (no driver loaded, e.g. the simulated driver whose procfs lives
under ``proc-root``), its ``/proc/driver`` gets a tmpfs first, when the proc root is not the
host's own ``/proc``; with the host's ``/proc`` there is no driver to show.
"""

from __future__ import annotations

import os
import posixpath

from nvct.base import linux
from nvct.base.errors import ApplyError
from nvct.container.rootfs import Rootfs, fd_path

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence

PROC_DRIVER = "/proc/driver/nvidia"
COPIED = ("params", "version", "registry")
_MAX_FILE = 1 << 20
_TMPFS_FLAGS = linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC


def container_params(text: str) -> str:
    """``params`` as a container sees it: the driver must not make device nodes there."""
    return text.replace("ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0")


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(_MAX_FILE)
    except FileNotFoundError:
        return None


def stage_proc_driver(rootfs: Rootfs, proc_root: str, entries: Sequence[str]) -> str:
    """Cover the container's ``/proc/driver/nvidia``, showing the host's ``entries`` (relative
    to it: ``gpus/<bus id>``, ``capabilities/gpu<minor>``, ``capabilities/mig/config``).

    Returns:
        ``"masked"``, or ``"absent"`` when neither the host nor the container has the driver's
        procfs (nothing to show).

    Raises:
        ApplyError: a mount or a file in the new tmpfs fails.
    """
    host = posixpath.join(proc_root, "driver/nvidia")
    if not os.path.isdir(host):
        return "absent"
    try:
        target = _target(rootfs, proc_root)
        if target is None:
            return "absent"
        try:
            _fill(rootfs, target, host, entries)
        finally:
            os.close(target)
    except OSError as err:
        raise ApplyError(f"cannot cover {PROC_DRIVER} in the container: {err}") from err
    return "masked"


def _target(rootfs: Rootfs, proc_root: str) -> int | None:
    """The container's /proc/driver/nvidia (O_PATH), made on a tmpfs /proc/driver if needed."""
    try:
        return rootfs.open(PROC_DRIVER, os.O_PATH | os.O_DIRECTORY)
    except FileNotFoundError:
        if posixpath.normpath(proc_root) == "/proc":
            return None
    covered = rootfs.open("/proc/driver", os.O_PATH | os.O_DIRECTORY)
    try:
        linux.mount("tmpfs", fd_path(covered), "tmpfs", _TMPFS_FLAGS)
    finally:
        os.close(covered)
    # Resolved again, the path now reaches the new tmpfs (the old descriptor, what it covers).
    driver = rootfs.open("/proc/driver", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.mkdir("nvidia", 0o555, dir_fd=driver)
        os.chmod(fd_path(driver), 0o555)  # noqa: S103 - procfs's own mode, read-only
        linux.mount(None, fd_path(driver), None, linux.MS_REMOUNT | linux.MS_RDONLY | _TMPFS_FLAGS)
        return os.open("nvidia", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=driver)
    finally:
        os.close(driver)


def _bind_ro(parent: int, name: str, source: str) -> None:
    """Bind the host entry ``source`` (directory or file) on a new ``name`` under ``parent``,
    read-only."""
    if os.path.isdir(source):
        os.mkdir(name, 0o555, dir_fd=parent)
    else:
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444, dir_fd=parent))
    point = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=parent)
    try:
        linux.mount(source, fd_path(point), None, linux.MS_BIND | linux.MS_REC)
    finally:
        os.close(point)
    # Resolved again, the name reaches the new mount (the descriptor names what it covers).
    mounted = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=parent)
    try:
        flags = linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | _TMPFS_FLAGS
        linux.mount(None, fd_path(mounted), None, flags)
    finally:
        os.close(mounted)


def _entry_parent(top: int, rel: str) -> int:
    """The directory of ``rel`` in the new tmpfs, made as needed, opened."""
    fd = os.dup(top)
    for part in [p for p in posixpath.dirname(rel).split("/") if p]:
        try:  # noqa: SIM105 - contextlib (and collections) would load on the Python hook's path
            os.mkdir(part, 0o555, dir_fd=fd)
        except FileExistsError:
            pass
        nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        os.close(fd)
        fd = nxt
    return fd


def _fill(rootfs: Rootfs, target: int, host: str, entries: Sequence[str]) -> None:
    linux.mount("tmpfs", fd_path(target), "tmpfs", _TMPFS_FLAGS)
    # Resolved again, the path reaches the new tmpfs's root (the descriptor names what it covers).
    top = rootfs.open(PROC_DRIVER, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in COPIED:
            data = _read(posixpath.join(host, name))
            if data is None:
                continue
            if name == "params":
                data = container_params(data.decode(errors="replace")).encode()
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444, dir_fd=top)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        for rel in entries:
            parts = rel.split("/")
            if rel.startswith("/") or ".." in parts or "" in parts:
                raise OSError(22, f"{rel!r} is not an entry of {PROC_DRIVER}")
            source = posixpath.join(host, rel)
            if not os.path.exists(source):
                continue  # e.g. no MIG capabilities for a GPU without MIG
            parent = _entry_parent(top, rel)
            try:
                _bind_ro(parent, parts[-1], source)
            finally:
                os.close(parent)
        os.chmod(fd_path(top), 0o555)  # noqa: S103 - as the driver's procfs directory
        linux.mount(None, fd_path(top), None, linux.MS_REMOUNT | linux.MS_RDONLY | _TMPFS_FLAGS)
    finally:
        os.close(top)
