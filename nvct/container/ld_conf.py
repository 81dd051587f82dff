"""The container's ``/etc/ld.so.conf.d`` entry for the driver's library directories."""

from __future__ import annotations

from nvct.container.rootfs import Rootfs, in_container

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvct.base.order import WorkOrder

LD_CONF = "/etc/ld.so.conf.d/000-nvidia-driver.conf"


def write_ld_conf(rootfs: Rootfs, order: WorkOrder) -> bool:
    """List the order's library directories in the container's ``/etc/ld.so.conf.d``, so
    that an ldconfig the container runs later (a package install) keeps the driver in its
    cache; only where the image has that directory (and so an ldconfig that reads it).
    Returns whether the file was written."""
    return write_ld_conf_dirs(rootfs, [d[1] for d in order.get("libdirs", ())])


def write_ld_conf_dirs(rootfs: Rootfs, dirs: Sequence[str]) -> bool:
    """``write_ld_conf`` for the container paths ``dirs`` (a CDI spec's hook names them)."""
    if not dirs or not rootfs.is_dir("/etc/ld.so.conf.d"):
        return False
    text = "# The host's NVIDIA driver libraries, bound here by nvct\n" + "".join(
        f"{d}\n" for d in dirs
    )
    in_container(LD_CONF, rootfs.replace_file, LD_CONF, text.encode(), 0o644)
    return True
