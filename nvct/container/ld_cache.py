"""The container's ld.so.cache without ldconfig: the image's own cache with the driver's
entries added, or the driver's entries alone for an image whose ldconfig would list nothing else
(busybox, static, distroless). The format itself is ``nvct.base.ldcache_format``.
"""

from __future__ import annotations

import os
import posixpath
import stat

from nvct.base.ldcache_format import (
    ENDIAN_FLAGS,
    HWCAP_SUBDIRS,
    MAX_SIZE,
    TRUSTED_DIRS,
    add_entries,
    with_entries,
)
from nvct.container.rootfs import in_container

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvct.base.order import WorkOrder
    from nvct.container.rootfs import Rootfs

LD_SO_CACHE = "/etc/ld.so.cache"


def image_cache_with(rootfs: Rootfs, order: WorkOrder) -> tuple[str, bytes] | None:
    """The container's ld.so.cache with a work order's ``ld_cache`` entries, and how it was
    made: ``"merged"`` (the image's ``/etc/ld.so.cache`` plus the entries, ``add_entries``)
    or ``"fresh"`` (an image with no cache and no library ldconfig would list but the
    driver's: the entries alone, ``_only_driver_libraries``); None when ldconfig must run."""
    entries = order.get("ld_cache")
    if not entries:
        return None
    extra = [(s, p, f) for s, p, f in entries]
    try:
        merged = merged_image_cache(rootfs, extra)
    except FileNotFoundError:
        if not _only_driver_libraries(rootfs, order):
            return None
        fresh = with_entries(ENDIAN_FLAGS, [], extra)
        return None if fresh is None else ("fresh", fresh)
    return None if merged is None else ("merged", merged)


def merged_image_cache(rootfs: Rootfs, extra: list[tuple[str, str, int]]) -> bytes | None:
    """The image's ``/etc/ld.so.cache`` with the ``(soname, path, flags)`` entries added in
    ldconfig's order (``add_entries``); None when only ldconfig can say what it would make.

    Raises:
        FileNotFoundError: the image has no ld.so.cache.
    """
    try:
        data = rootfs.read_file(LD_SO_CACHE, MAX_SIZE + 1)
    except FileNotFoundError:
        raise
    except OSError:
        return None  # not a regular file, unreadable: ldconfig decides
    if len(data) > MAX_SIZE:
        return None
    return add_entries(data, extra)


def write_ld_cache(rootfs: Rootfs, data: bytes) -> None:
    """Replace the container's ld.so.cache with ``data``.

    Raises:
        ApplyError: its directory cannot be resolved, or the file not written.
    """
    # An image FROM scratch has no /etc until the runtime makes one for its own files.
    os.close(in_container("/etc", rootfs.makedirs, "/etc"))
    in_container(LD_SO_CACHE, rootfs.replace_file, LD_SO_CACHE, data, 0o644)


def _only_driver_libraries(rootfs: Rootfs, order: WorkOrder) -> bool:
    """Whether ldconfig, run over this rootfs, would list no library but the driver's: no
    ``/etc/ld.so.conf`` to name more directories, and in every directory it may scan (its
    trusted ones on any distribution, multiarch ones, the work order's) nothing that it could
    take for a library or descend into. Busybox, static and distroless images qualify.

    Conservative by construction: any name containing ``.so`` that the work order does not
    put there, any symlink or unknown subdirectory, and two scanned paths that are one
    directory (which path ldconfig would list then depends on its order) all decline.
    """
    if rootfs.exists("/etc/ld.so.conf"):
        return False
    dirs = list(order["ldconfig_dirs"])
    ours = {
        posixpath.split(path)
        for path in (
            *(e[1] for e in order["ld_cache"]),
            *(link[0] for link in order["symlinks"]),
            *(m[1] for m in order["mounts"]),
            *(b[0] for b in order.get("binlinks", ())),
        )
    }
    # What a library directory holds (the hook runs once it is mounted): its files and links.
    for _host, target, files, links, _copies in order.get("libdirs", ()):
        ours.update((target, name) for _, name in files)
        ours.update((target, name) for name, _ in links)
    # Directories the driver's files are put in (vdpau/, firmware/nvidia/...): ldconfig does
    # not descend there.
    our_dirs: set[str] = set()
    for holder, _ in ours:
        parent = holder
        while parent not in our_dirs and parent != "/":
            our_dirs.add(parent)
            parent = posixpath.dirname(parent)
    usr_less = [d[4:] for d in dirs if d.startswith("/usr/")]
    pending = list(dict.fromkeys((*TRUSTED_DIRS, *dirs, *usr_less)))
    scanned = set(pending)
    seen: set[tuple[int, int]] = set()
    while pending:
        directory = pending.pop()
        try:
            fd = rootfs.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue  # ldconfig skips it too
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) in seen:
                return False
            seen.add((st.st_dev, st.st_ino))
            for name in os.listdir(fd):
                if ".so" in name:
                    if (directory, name) in ours:
                        continue
                    return False
                mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
                if stat.S_ISREG(mode):
                    continue  # not a library name: ldconfig skips regular files by name
                sub = posixpath.join(directory, name)
                if stat.S_ISDIR(mode) and sub in our_dirs and name not in HWCAP_SUBDIRS:
                    continue
                if stat.S_ISDIR(mode) and (sub in scanned or "-linux-gnu" in name):
                    if sub not in scanned:  # a multiarch directory: scanned like the rest
                        scanned.add(sub)
                        pending.append(sub)
                    continue
                return False
        finally:
            os.close(fd)
    return True
