"""The work order's contract: a plan reduced to plain JSON data, all that carrying it out needs.

The shim caches it per kind of container (so a repeated start needs no config, inventory or
planning code) and applies it before the runtime starts; the hook (``docker --gpus``, podman)
applies the one it plans itself. Format::

    {"v": 4, "devices": [[path, major, minor, mode], ...],
     "mounts": [[host_path, container_path, [options]], ...],
     "symlinks": [[path, target], ...], "ldconfig": "/sbin/ldconfig",
     "ldconfig_dirs": [...], "ld_cache": [[soname, path, flags], ...],
     "libdirs": [[host_dir, container_dir, [[host_path, name], ...], [[name, target], ...],
                  copies]],
     "binlinks": [[container_path, link_target, host_path, [options]], ...],
     "log": [file, level], "gpus": [...], "capabilities": [...]}

``libdirs`` (v4): the host directories a ``mounts`` entry binds as the driver's libraries
(``nvct.store.libdir``), with what they hold, so a cached order can remake one that is gone;
``copies`` (v8): true when it holds copies of the files (``nvct.store.libcopies``), not hard
links.
``binlinks`` (v9): driver binaries made symlinks into a library directory (its
``container_dir``/name); where the image has its own file at that path, ``host_path`` is bound
there with ``options`` instead. Orders without it (CDI's) have none.

The plan makes orders (``nvct.plan.workorder``, ``nvct.plan.cdi_order``); the store caches them
and the container package carries them out. Their types live here, below all three, so neither
the store nor the container names the plan. The format's version is ``ORDER_VERSION`` in
``nvct.store.cache``, which a cached create imports anyway: here it would cost that create one
more module.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, TypedDict

    # Rows are tuples when planned and lists once read back from JSON: readers unpack them.
    DeviceRow = tuple[str, int, int, int]  # container path, major, minor, mode
    MountRow = tuple[str, str, list[str]]  # host path, container path, options
    LinkRow = tuple[str, str]  # path in the container, target
    LdCacheRow = tuple[str, str, int]  # SONAME, path in the container, ld.so.cache flags
    FileRow = tuple[str, str]  # host path, name in the library directory
    # host dir, container dir, files, links, whether the files are copies
    LibdirRow = tuple[str, str, list[FileRow], list[LinkRow], bool]
    # container path, link target, host path, the options of its bind where the image has a file
    BinlinkRow = tuple[str, str, str, list[str]]

    class _WorkOrderRequired(TypedDict):
        v: int
        devices: list[DeviceRow]
        mounts: list[MountRow]
        symlinks: list[LinkRow]
        ldconfig: str
        ldconfig_dirs: list[str]
        ld_cache: list[LdCacheRow]
        libdirs: list[LibdirRow]
        log: tuple[str, str]  # log file, level
        gpus: list[str]
        capabilities: list[str]
        # The proc root and the entries of /proc/driver/nvidia (relative: gpus/<bus id>,
        # capabilities/gpu<minor>, ...) the container sees (nvct.container.procfs); None:
        # the host's is left as it is.
        proc_driver: tuple[str, list[str]] | None
        # The host driver's version and whether every selected GPU is a data-center one, for
        # the image's forward-compatible libcuda (nvct.container.cuda_compat); None: off.
        cuda_compat: tuple[str, bool] | None
        # nvct-runtime covers /proc/driver/nvidia too (a createContainer hook: a process per
        # start); else only the --gpus/podman hook does, in the process it runs anyway.
        proc_driver_in_runtime: bool

    class WorkOrder(_WorkOrderRequired, total=False):
        """A plan as the shim and the hook carry it out (the format above). CDI devices
        (``nvct.plan.cdi_order``) may also bring variables, OCI hooks and groups."""

        binlinks: list[BinlinkRow]
        env: list[str]  # KEY=VALUE, appended to the process's
        hooks: list[tuple[str, dict[str, Any]]]  # (OCI hook stage, hook)
        additional_gids: list[int]
        cdi: list[tuple[str, str]]  # (CDI device name, spec file) it came from

    class _CacheEntryRequired(TypedDict):
        roots: list[str]  # driver, dev and proc roots the fingerprint covers
        fingerprint: str
        runtimes: list[str]  # the low-level runtimes to exec
        log: tuple[str, str]
        order: WorkOrder | None  # None: the container asks for no GPU

    class CacheEntry(_CacheEntryRequired, total=False):
        """What the shim caches per kind of container (``nvct.plan.order_key``)."""

        decisions: list[str]  # why no GPU (order None)
        ignored: list[str]  # NVIDIA inputs nvct left alone, and why: logged on every start
        gpus: list[str]  # the selected GPUs' labels, for the log
        cdi: tuple[list[str], str]  # CDI spec dirs and their stamp, when the order is from CDI
        key: str  # the order key, checked when read back
