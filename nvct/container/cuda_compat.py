"""CUDA forward compatibility: an image's ``/usr/local/cuda/compat/libcuda.so.<version>``.

Images built for a newer CUDA than the host's driver supports ship the newer user-mode driver
there (NGC images, ``cuda-compat-*`` packages). As NVIDIA's ``enable-cuda-compat`` hook (and
libnvidia-container's ``cuda-compat-mode=ldconfig``) does, when that libcuda is newer than the
host driver its directory comes first for the loader: first on ldconfig's command line (so
its ``libcuda.so.1`` is the first the container's ld.so.cache lists) and in
``/etc/ld.so.conf.d/00-cuda-compat.conf`` (which sorts before nvct's own entry, so an
``ldconfig`` the container runs later keeps it first). Otherwise the host driver's libcuda is
used. Forward compatibility only works on data-center GPUs; on others the image's library would
fail to initialise, so it is not put first.
"""

from __future__ import annotations

import os

from nvct.container.rootfs import Rootfs, in_container

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from nvct.base.order import WorkOrder

COMPAT_DIR = "/usr/local/cuda/compat"
COMPAT_CONF = "/etc/ld.so.conf.d/00-cuda-compat.conf"
_PREFIX = "libcuda.so."


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def _compat_version(name: str) -> str | None:
    """``560.35.03`` of ``libcuda.so.560.35.03`` (not of the ``libcuda.so.1`` link)."""
    version = name[len(_PREFIX) :] if name.startswith(_PREFIX) else ""
    parts = version.split(".")
    return version if len(parts) > 1 and all(p.isdigit() for p in parts) else None


def choose_compat(names: list[str], host_driver: str, datacenter: bool) -> tuple[str | None, str]:
    """The compat libcuda file name to load first (None: the host's), and why.

    ``names``: the entries of the image's compat directory; ``host_driver``: the host driver's
    version; ``datacenter``: every GPU of the container is a data-center GPU.
    """
    found = sorted((v for v in map(_compat_version, names) if v is not None), key=_version)
    if not found:
        return None, f"the host driver's libcuda.so.{host_driver} (no {COMPAT_DIR}/libcuda.so.*)"
    newest = found[-1]
    if _version(newest) <= _version(host_driver):
        return None, (
            f"the host driver's libcuda.so.{host_driver}: the image's compat libcuda.so.{newest} "
            "is not newer"
        )
    if not datacenter:
        return None, (
            f"the host driver's libcuda.so.{host_driver}: the image's compat libcuda.so.{newest} "
            "is newer, but forward compatibility needs data-center GPUs"
        )
    return f"libcuda.so.{newest}", (
        f"{COMPAT_DIR}/libcuda.so.{newest}: the image's forward-compatible libcuda, newer than "
        f"the host driver {host_driver}"
    )


def compat_names(rootfs: Rootfs) -> list[str]:
    """The entries of the image's compat directory (resolved in the rootfs; none: [])."""
    try:
        fd = rootfs.open(COMPAT_DIR, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return []
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def stage_compat(rootfs: Rootfs, order: WorkOrder) -> tuple[bool, str]:
    """Decide for this rootfs; when the compat libcuda goes first, write its ld.so.conf.d
    entry. Returns (whether it goes first, why), for ldconfig's directories and the log."""
    wanted = order.get("cuda_compat")
    if wanted is None:
        return False, "off"
    host_driver, datacenter = wanted
    chosen, why = choose_compat(compat_names(rootfs), host_driver, datacenter)
    if chosen is None:
        return False, why
    if rootfs.is_dir("/etc/ld.so.conf.d"):
        text = (
            f"# CUDA forward compatibility: the image's newer libcuda first (nvct)\n{COMPAT_DIR}\n"
        )
        in_container(COMPAT_CONF, rootfs.replace_file, COMPAT_CONF, text.encode(), 0o644)
    return True, why
