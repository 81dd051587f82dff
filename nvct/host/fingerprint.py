"""The driver's fingerprint: what a cached inventory, work order or library directory was
derived from, checked with stats and listdirs alone (cheap enough for every container start).

It covers the driver root's ld.so.cache identity, the NVIDIA device nodes under the dev root,
the MIG capability tree and driver version in procfs, and the IPC endpoints. Any change gives a
new fingerprint, hence a fresh discovery and fresh plans. Stdlib only: a cached create
revalidates its work order with it.
"""

from __future__ import annotations

import os

from nvct._version import __version__
from nvct.base.digest import sha256
from nvct.host.components import IPC_FABRICMANAGER, IPC_MPS_DIR, IPC_PERSISTENCED
from nvct.store.cache import listdir

CDI_SUFFIXES = (".json", ".yaml", ".yml")
# Bumped whenever the inventory's fields change (MIG attributes, PCI class, fabric clique were
# added): a cache written by an earlier build of the same version would load with the new
# fields at their defaults, so it must not match.
INVENTORY_FORMAT = "inventory-2"


# The driver's IPC endpoints, stat'ed by their path under the driver root (no inode: each is
# made anew by its daemon's start); nvct-runtime's native create stats the same ones.
IPC_STATS = (IPC_PERSISTENCED, IPC_FABRICMANAGER, IPC_MPS_DIR)


def inventory_fingerprint(
    driver_root: str | os.PathLike[str],
    dev_root: str | os.PathLike[str],
    proc_root: str | os.PathLike[str],
) -> str:
    """A hash of the host facts the inventory depends on (cheap: stats and listdirs)."""
    driver, dev, proc = os.fspath(driver_root), os.fspath(dev_root), os.fspath(proc_root)
    return fingerprint_of_parts(driver, dev, proc, fingerprint_parts(driver, dev, proc))


def fingerprint_of_parts(driver: str, dev: str, proc: str, parts: list[str]) -> str:
    """``inventory_fingerprint`` of the ``fingerprint_parts`` taken already."""
    every = [__version__, INVENTORY_FORMAT, driver, dev, proc, *parts]
    return sha256("\0".join(every).encode()).hexdigest()[:32]


def fingerprint_parts(driver: str, dev: str, proc: str) -> list[str]:
    """The host facts of ``inventory_fingerprint``, each as text: nvct-runtime's native create
    (``nvct/runtime/launch/native.h``) takes the same parts, in this order and spelling, and
    compares them with those a native entry was written with."""
    parts = [_stat_id(os.path.join(driver, "etc/ld.so.cache"))]
    for rel in IPC_STATS:
        parts.append(_stat_id(os.path.join(driver, rel.lstrip("/")), inode=False))
    for directory in (os.path.join(dev, "dev"), os.path.join(dev, "dev/nvidia-caps")):
        parts.extend(_nodes(directory))
    # The optional features' nodes outside /dev/nvidia* (nvct.host.discover.features).
    for directory in ("dev/infiniband", "dev/nvidia-caps-imex-channels", "dev/dri"):
        parts.extend(_nodes(os.path.join(dev, directory), prefix=""))
    parts.append(_stat_id(os.path.join(dev, "dev/gdrdrv")))
    try:
        with open(os.path.join(proc, "driver/nvidia/version"), encoding="utf-8") as f:
            parts.append(f.read())
    except OSError:
        parts.append("-")
    parts.extend(_mig_instances(os.path.join(proc, "driver/nvidia/capabilities")))
    return parts


def _stat_id(path: str, *, inode: bool = True) -> str:
    name = os.path.basename(path)
    try:
        st = os.stat(path)
    except OSError:
        return f"{name}:-"
    ident = f"{name}:{st.st_mode:o}:{st.st_size}:{st.st_mtime_ns}"
    return ident + (f":{st.st_ino}" if inode else "")


def _nodes(directory: str, prefix: str = "nvidia") -> list[str]:
    try:
        entries = os.scandir(directory)
    except OSError:
        return [f"{os.path.basename(directory)}:-"]
    out = []
    with entries:
        for entry in entries:
            if entry.name.startswith(prefix):
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                out.append(f"{entry.name}:{st.st_mode:o}:{st.st_rdev}")
    return sorted(out)


def _mig_instances(caps: str) -> list[str]:
    """``gpu<N>/mig/gi<G>/ci<C>`` entries: MIG reconfiguration changes the fingerprint."""
    out: list[str] = []
    for gpu in listdir(caps, "gpu"):
        mig = os.path.join(caps, gpu, "mig")
        for gi in listdir(mig, "gi"):
            out.extend(f"{gpu}/mig/{gi}/{ci}" for ci in listdir(os.path.join(mig, gi), "ci"))
    return sorted(out)


def cdi_specs_stamp(dirs: list[str]) -> str:
    """A hash of the CDI spec files in ``dirs`` (names, sizes, times, inodes): a work order
    made from CDI specs is good while it is unchanged."""
    return sha256("\0".join(cdi_stamp_parts(dirs)).encode()).hexdigest()[:32]


def cdi_stamp_parts(dirs: list[str]) -> list[str]:
    """The stats ``cdi_specs_stamp`` hashes, in its order and spelling (nvct-runtime's native
    create takes them again, ``nvct/runtime/launch/native.h``)."""
    parts: list[str] = []
    for directory in dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            parts.append(f"{directory}:-")
            continue
        parts.extend(
            _stat_id(os.path.join(directory, n)) for n in names if n.endswith(CDI_SUFFIXES)
        )
    return parts
