"""Stage a container's rootfs from a work order: the one sequence the shim and the hook share.

The way the container's ld.so.cache will be made is chosen first, on the rootfs as the image
left it; then library directories the order binds are made whole again (a cache cleaner may
have taken a file), the driver's files are bind-mounted when the caller mounts them itself
(the hook; the shim leaves mounts to the runtime, through the spec), then the SONAME links, the
``ld.so.conf.d`` entry, and the ld.so.cache: one made without ldconfig (merged, fresh or
reused: ``choose_ld_cache``), or the host's ldconfig, started here and returned for the caller
to wait on (the shim edits the spec meanwhile).
"""

from __future__ import annotations

import posixpath
import time

from nvct.container.cuda_compat import COMPAT_DIR, stage_compat
from nvct.container.ld_cache import image_cache_with, write_ld_cache
from nvct.container.ld_conf import write_ld_conf
from nvct.container.links import create_symlinks, link_binaries
from nvct.container.rootfs import Rootfs, in_container
from nvct.store.libdir import complete, ensure

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Callable

    from nvct.base.order import MountRow, WorkOrder
    from nvct.container.ldconfig import Ldconfig


class Staged:
    """What staging did, for the caller's log line, and ldconfig when it still runs."""

    __slots__ = (
        "binary_binds",
        "binary_links",
        "cuda_compat",
        "ld_cache",
        "ldconfig",
        "mounts",
        "phases_ms",
        "skipped_symlinks",
        "symlinks",
    )

    def __init__(self) -> None:
        self.cuda_compat = "off"  # which libcuda the container loads first, and why
        self.ld_cache = "none"  # none | merged | fresh | reused | ldconfig
        self.ldconfig: Ldconfig | None = None
        self.mounts = 0
        self.symlinks = 0
        self.skipped_symlinks = 0
        self.binary_links = 0
        # Bind mounts standing in for binary links the image's own files took the place of
        # (``link_binaries``): the shim adds them to the spec; the hook has made them.
        self.binary_binds: list[MountRow] = []
        self.phases_ms: dict[str, float] = {}

    def lap(self, phase: str, start: float) -> float:
        """Record ``phase`` as the time since ``start``; return now."""
        now = time.perf_counter()
        self.phases_ms[phase] = round((now - start) * 1000, 2)
        return now


def choose_ld_cache(
    rootfs: Rootfs, order: WorkOrder, reused: Callable[[], bytes | None] | None = None
) -> tuple[str, bytes | None]:
    """How the container gets its ld.so.cache, and its bytes when ldconfig is not needed:
    ``"none"`` (no library directory), ``"merged"``/``"fresh"`` (``image_cache_with``),
    ``"reused"`` (what ``reused`` returns: ldconfig's earlier result for this image), or
    ``"ldconfig"`` (None: only ldconfig can decide)."""
    if not order["ldconfig_dirs"]:
        return "none", None
    made = image_cache_with(rootfs, order)
    if made is not None:
        return made
    known = reused() if reused is not None else None
    return ("reused", known) if known is not None else ("ldconfig", None)


def stage_rootfs(
    rootfs: Rootfs,
    order: WorkOrder,
    *,
    bind_mounts: bool,
    reused: Callable[[], bytes | None] | None = None,
) -> Staged:
    """Carry out the rootfs half of ``order`` (see the module doc). With ``bind_mounts`` the
    driver's files are mounted here (the hook, in the container's mount namespace); without,
    ldconfig gets them bound in its own private namespace. ``reused``: see
    ``choose_ld_cache``.

    Raises:
        ApplyError: a step failed; the container must not start.
    """
    staged = Staged()
    start = time.perf_counter()
    # Decided first, on the rootfs as the image left it: a fresh overlay's empty upper layer
    # is what lets ldconfig's earlier result for the image be reused.
    compat, staged.cuda_compat = stage_compat(rootfs, order)
    if compat:  # only ldconfig puts the image's compat directory before the driver's
        staged.ld_cache, known = "ldconfig", None
    else:
        staged.ld_cache, known = choose_ld_cache(rootfs, order, reused)
    remake_missing(order)
    if bind_mounts:
        from nvct.container.apply import bind_mount

        for source, target, options in order["mounts"]:
            in_container(target, bind_mount, rootfs, source, target, options)
            staged.mounts += 1
        start = staged.lap("mounts", start)
    staged.symlinks, staged.skipped_symlinks = create_symlinks(rootfs, order["symlinks"])
    binlinks = order.get("binlinks", ())
    if binlinks:
        staged.binary_binds = link_binaries(rootfs, binlinks)
        staged.binary_links = len(binlinks) - len(staged.binary_binds)
        if bind_mounts:
            from nvct.container.apply import bind_mount

            for source, target, options in staged.binary_binds:
                in_container(target, bind_mount, rootfs, source, target, options)
                staged.mounts += 1
    write_ld_conf(rootfs, order)
    start = staged.lap("symlinks", start)
    if known is not None:
        write_ld_cache(rootfs, known)
    elif staged.ld_cache == "ldconfig":
        from nvct.container.ldconfig import start_ldconfig

        dirs = order["ldconfig_dirs"]
        # Without the hook's mounts, ldconfig gets the libraries bound in its own namespace.
        binds = [
            (source, target)
            for source, target, _ in order["mounts"]
            if not bind_mounts and (target in dirs or posixpath.dirname(target) in dirs)
        ]
        first = [COMPAT_DIR] if compat else []
        staged.ldconfig = start_ldconfig(rootfs, order["ldconfig"], [*first, *dirs], binds=binds)
    staged.lap("ld_cache", start)
    return staged


def remake_missing(order: WorkOrder) -> None:
    """Remake the library directories of a (cached) work order that are gone or incomplete:
    a cache dir cleaned since the order was planned.

    Raises:
        ApplyError: one cannot be made again; the container must not start without it.
    """
    for host, _target, files, links, copies in order.get("libdirs", ()):
        try:
            if not copies:
                ensure(host, files, links)  # one listdir when the directory is whole
            elif not complete(host, files, links):
                from nvct.store.libcopies import ensure_copies  # only when one is missing

                ensure_copies(host, files, links)
        except OSError as err:
            from nvct.base.errors import ApplyError  # loaded by the rare failure only

            raise ApplyError(
                f"cannot prepare the driver's library directory {host}: {err.strerror or err}",
                hint='set inject.library-mounts = "files" in nvct\'s config.toml, or a '
                "writable cache-dir: on the driver libraries' filesystem, or with room for "
                'their copies under "directory-copies"',
            ) from err
