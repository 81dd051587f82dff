"""Select the driver's libraries: ld.so.cache of the driver root, then ELF checks.

Rules (libnvidia-container's ``select_libraries``, tightened):
- the SONAME key must be in a capability's table (``nvct.host.components``);
- the resolved file name must end with ``.so.<driver version>``, which rejects stale
  libraries of an older driver still listed in the cache;
- its ELF class and machine must match the cache entry's architecture;
- ``libnvidia-tls`` must carry the GNU/Linux 2.3.99 ABI tag when it has one.
"""

from __future__ import annotations

from pathlib import Path

from nvct.base.errors import DiscoveryError
from nvct.host.arch import Arch
from nvct.host.components import LIBRARY_PREFIXES, library_capability
from nvct.host.discover.elf import read_elf
from nvct.host.discover.rootpath import resolve_in_root
from nvct.host.inventory import DriverFile
from nvct.host.ldcache import FLAG_TYPE_MASK, CacheEntry, read_ldcache

_LIBC6 = 0x0003


def discover_libraries(
    driver_root: Path, version: str, arch: Arch
) -> tuple[tuple[DriverFile, ...], tuple[str, ...]]:
    """Driver libraries under ``driver_root`` for ``version``, and warnings about rejects."""
    entries = read_ldcache(driver_root / "etc/ld.so.cache")
    files: list[DriverFile] = []
    warnings: list[str] = []
    seen: set[Path] = set()
    lib_dirs: dict[str, Path] = {}
    for entry in entries:
        kind = _kind(entry, arch)
        match = library_capability(entry.soname)
        if kind is None or match is None:
            continue
        real = resolve_in_root(driver_root, entry.path)
        if real is None or real in seen:
            continue
        if not real.name.endswith(f".so.{version}"):
            continue  # another driver's leftover: never mix versions
        lib = _checked(real, kind, arch, match, warnings)
        if lib is not None:
            seen.add(real)
            files.append(lib)
            lib_dirs.setdefault(kind, real.parent)
    # libvdpau_nvidia lives in a vdpau/ subdirectory that ldconfig does not index.
    for kind, directory in lib_dirs.items():
        vdpau = directory / "vdpau" / f"libvdpau_nvidia.so.{version}"
        if vdpau.is_file() and vdpau not in seen:
            lib = _checked(vdpau, kind, arch, ("video", "libvdpau_nvidia.so"), warnings)
            if lib is not None:
                files.append(lib)
    return tuple(files), tuple(warnings)


def nvml_library(driver_root: Path, arch: Arch) -> Path | None:
    """The 64-bit libnvidia-ml.so.1 of the driver root, found through its ld.so.cache."""
    for entry in read_ldcache(driver_root / "etc/ld.so.cache"):
        if entry.soname == "libnvidia-ml.so.1" and _kind(entry, arch) == "lib":
            found = resolve_in_root(driver_root, entry.path)
            if found is not None:
                return found
    return None


def driver_nvml_library(driver_root: Path, arch: Arch) -> Path:
    """``nvml_library``, for the long-running NVML users that cannot work without it.

    Raises:
        DiscoveryError: the driver root's ld.so.cache lists no libnvidia-ml.so.1.
    """
    library = nvml_library(driver_root, arch)
    if library is None:
        raise DiscoveryError(
            f"no libnvidia-ml.so.1 in {driver_root}'s ld.so.cache",
            hint="set driver-root to where the NVIDIA driver is installed",
        )
    return library


def _kind(entry: CacheEntry, arch: Arch) -> str | None:
    if not entry.is_elf:
        return None
    if entry.arch_flags == arch.ldcache_flags64:
        return "lib"
    if (
        arch.ldcache_flags32 is not None
        and entry.arch_flags == arch.ldcache_flags32
        and entry.flags & FLAG_TYPE_MASK == _LIBC6
    ):
        return "lib32"
    return None


def _checked(
    real: Path, kind: str, arch: Arch, match: tuple[str, str], warnings: list[str]
) -> DriverFile | None:
    cap, prefix = match
    info = read_elf(real)
    want_class, want_machine = (
        (64, arch.elf_machine64) if kind == "lib" else (32, arch.elf_machine32)
    )
    if info is None or info.elf_class != want_class or info.machine != want_machine:
        warnings.append(f"skipped {real}: not a {want_class}-bit {arch.name} ELF library")
        return None
    if prefix == "libnvidia-tls.so" and info.abi_tag not in (None, ("ELF_NOTE_OS_LINUX", "2.3.99")):
        return None  # an old TLS variant for another ABI
    return DriverFile(
        host_path=str(real),
        kind=kind,
        capability=cap,
        name=prefix,
        soname=info.soname or real.name,
    )


__all__ = ["LIBRARY_PREFIXES", "discover_libraries", "nvml_library"]
