"""Device nodes and bind mounts inside a container's mount namespace, before its process runs
(the hook's part; ``nvct.container.stage`` calls ``bind_mount`` for each of a work order's mounts).

Every path in the rootfs is resolved with ``Rootfs`` (never outside it), mounts target the
resolved descriptor, and each mount is verified after it is made. On any error the hook exits
non-zero; the runtime then tears the container (and this mount namespace) down, so no
half-configured container runs.
"""

from __future__ import annotations

import os
import posixpath
import stat

from nvct.base import linux
from nvct.base.errors import ApplyError
from nvct.container.rootfs import Rootfs, fd_path, in_container

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvct.base.order import DeviceRow

_FLAG_BY_OPTION = {
    "ro": linux.MS_RDONLY,
    "nosuid": linux.MS_NOSUID,
    "nodev": linux.MS_NODEV,
    "noexec": linux.MS_NOEXEC,
}


def enter_mount_namespace(pid: int) -> None:
    """Join the mount namespace of the container's init process."""
    try:
        fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise ApplyError(f"cannot open the mount namespace of pid {pid}: {err.strerror}") from err
    try:
        linux.setns(fd, linux.CLONE_NEWNS)
    except OSError as err:
        raise ApplyError(f"cannot join the mount namespace of pid {pid}: {err.strerror}") from err
    finally:
        os.close(fd)


def create_device_nodes(rootfs: Rootfs, nodes: Sequence[DeviceRow]) -> int:
    """mknod ``[path, major, minor, mode]`` nodes in the container (a hook run without the shim)."""
    for path, major, minor, mode in nodes:
        parent = in_container(path, rootfs.makedirs, posixpath.dirname(path))
        name = posixpath.basename(path)
        try:
            os.mknod(name, stat.S_IFCHR | mode, os.makedev(major, minor), dir_fd=parent)
        except FileExistsError:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISCHR(st.st_mode) or st.st_rdev != os.makedev(major, minor):
                raise ApplyError(
                    f"{path} exists in the container but is not device {major}:{minor}",
                    hint="remove it from the image",
                ) from None
        except OSError as err:
            raise ApplyError(f"cannot create {path} in the container: {err.strerror}") from err
        finally:
            os.close(parent)
    return len(nodes)


def bind_mount(rootfs: Rootfs, source: str, target: str, options: list[str]) -> None:
    """Bind ``source`` (a host path) onto ``target`` inside the rootfs, then restrict it."""
    try:
        src = os.stat(source)
    except OSError as err:
        raise ApplyError(
            f"driver file {source} is missing: {err.strerror}",
            hint="run `nvct-cli list --no-cache` to refresh the inventory",
        ) from err
    rootfs.make_mount_point(target, is_dir=stat.S_ISDIR(src.st_mode))
    fd = rootfs.open(target)
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if stat.S_ISDIR(src.st_mode) != (kind == stat.S_IFDIR) or kind not in (
            stat.S_IFREG,
            stat.S_IFDIR,
        ):
            raise ApplyError(
                f"{target} in the container is not a "
                f"{'directory' if stat.S_ISDIR(src.st_mode) else 'regular file'}",
                hint="remove it from the image",
            )
        linux.mount(source, fd_path(fd), None, linux.MS_BIND)
    except OSError as err:
        raise ApplyError(f"cannot mount {source} on {target}: {err.strerror}") from err
    finally:
        os.close(fd)
    # The descriptor above names the covered inode; resolve again to reach the new mount,
    # and check it is ours before changing its flags.
    fd = rootfs.open(target)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (src.st_dev, src.st_ino):
            raise ApplyError(f"{target} changed while it was being mounted; refusing")
        flags = linux.MS_REMOUNT | linux.MS_BIND
        for option in options:
            flags |= _FLAG_BY_OPTION.get(option, 0)
        linux.mount(None, fd_path(fd), None, flags)
        linux.mount(None, fd_path(fd), None, linux.MS_PRIVATE)
    except OSError as err:
        raise ApplyError(f"cannot restrict the mount on {target}: {err.strerror}") from err
    finally:
        os.close(fd)
