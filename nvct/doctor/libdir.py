"""Whether the driver's libraries can be bound as one directory (``nvct.store.libdir``).

That needs hard links from the cache dir to the libraries, so both on one filesystem; a
separate ``/var`` silently costs every GPU start one mount per library instead, unless
``inject.library-mounts = "directory-copies"`` copies them there (``nvct.store.libcopies``).
The cache dir also decides what every GPU container mounts, so only root may write it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nvct.base.errors import DiscoveryError
from nvct.doctor.context import DoctorContext
from nvct.doctor.result import CheckResult, failed, passed, warned
from nvct.host.ldcache import read_ldcache
from nvct.store.libdir import existing_parent

LIBDIR = "library-dir"
PROBE = "libnvidia-ml.so.1"


def check_library_dir(ctx: DoctorContext) -> CheckResult:
    """The cache dir is root's alone, and on the driver libraries' filesystem."""
    config = ctx.config
    if config.inject.library_mounts == "files":
        return passed(LIBDIR, 'one mount per library (inject.library-mounts = "files")')
    if not config.cache_dir:
        return warned(
            LIBDIR,
            "cache-dir is empty: every GPU start mounts each driver library on its own "
            "(slower starts)",
            "set cache-dir in nvct's config.toml (default /var/cache/nvct)",
        )
    cache_dir = Path(existing_parent(config.cache_dir))
    st = cache_dir.stat()
    if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return failed(
            LIBDIR,
            f"{cache_dir} (cache-dir {config.cache_dir}) is writable by others than root "
            f"(owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}): whoever writes "
            "there chooses the libraries GPU containers get",
            f"chown root:root {cache_dir} && chmod go-w {cache_dir}",
        )
    library = _driver_library(config.driver_root)
    if library is None:
        return warned(
            LIBDIR,
            f"no {PROBE} in {config.driver_root / 'etc/ld.so.cache'}: cannot tell whether "
            "the driver's libraries can be linked from the cache dir",
            "see the ldcache check",
        )
    if library.stat().st_dev != st.st_dev:
        if config.inject.library_mounts == "directory-copies":
            return _copies(config.cache_dir, library, config.inject.binaries)
        return warned(
            LIBDIR,
            f"cache-dir {config.cache_dir} is on another filesystem than {library}: no hard "
            "links, so every GPU start mounts each driver library on its own (slower starts)",
            "set cache-dir to a directory on the libraries' filesystem (e.g. /var/lib/nvct "
            'when /var/cache is separate), or inject.library-mounts = "directory-copies" to '
            "copy the libraries there once per driver (disk: their size), or "
            'inject.library-mounts = "files" to say so',
        )
    return passed(
        LIBDIR,
        f"driver libraries bound as one directory, hard-linked under {config.cache_dir}"
        + _binaries(config.inject.binaries),
    )


def _binaries(mode: str) -> str:
    """What the check adds about the driver's binaries (``inject.binaries``)."""
    if mode == "links":
        return "; the driver's binaries in it too, /usr/bin/nvidia-smi a link there"
    return '; each driver binary bound on its own (inject.binaries = "mounts")'


def _copies(cache_dir: str, library: Path, binaries: str) -> CheckResult:
    """With "directory-copies" and the libraries elsewhere: copies, if the cache dir takes them."""
    from nvct.store.libcopies import SUBDIR, copies_size

    parent = existing_parent(cache_dir)
    if not os.access(parent, os.W_OK):
        return failed(
            LIBDIR,
            f'inject.library-mounts is "directory-copies" but {parent} (cache-dir '
            f"{cache_dir}) is not writable here: every GPU start mounts each driver library "
            "on its own",
            f"run nvct as root, or make {parent} root's and writable by it",
        )
    count, size = copies_size(cache_dir)
    made = (
        f"{count} copies, {size / 1e6:.1f} MB, under {os.path.join(cache_dir, SUBDIR)}"
        if count
        else "none made yet: the first GPU start copies the libraries it needs"
    )
    return passed(
        LIBDIR,
        f"driver libraries bound as one directory of copies ({library.parent} is on another "
        f'filesystem than cache-dir; inject.library-mounts = "directory-copies"): {made}'
        + _binaries(binaries),
    )


def _driver_library(root: Path) -> Path | None:
    """The host file of the driver root's ``libnvidia-ml.so.1``, or None."""
    try:
        entries = read_ldcache(root / "etc/ld.so.cache")
    except DiscoveryError:
        return None
    for entry in entries:
        if entry.soname == PROBE and entry.is_elf:
            path = root / entry.path.lstrip("/")
            if path.exists():
                return Path(os.path.realpath(path))
    return None
