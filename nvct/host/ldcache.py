"""Parser for glibc's ``/etc/ld.so.cache`` (the format itself: ``nvct.base.ldcache_format``).

Only the new format's entries are read, as libnvidia-container does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nvct.base.errors import DiscoveryError
from nvct.base.ldcache_format import (
    FLAG_ARCH_MASK,
    FLAG_ELF,
    FLAG_TYPE_MASK,
    NEW_MAGIC,
    OLD_MAGIC,
    FormatError,
    read_entries,
)

__all__ = ["FLAG_TYPE_MASK", "NEW_MAGIC", "OLD_MAGIC", "CacheEntry", "parse_ldcache"]

# (flags & FLAG_ARCH_MASK) per machine; 32-bit x86 libc6 entries carry no arch bits.
ARCH_FLAGS: dict[str, int] = {
    "x86_64": 0x0300,
    "i386": 0x0000,
    "x32": 0x0800,
    "aarch64": 0x0A00,
    "armhf": 0x0900,
    "ppc64le": 0x0500,
}


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One ld.so.cache entry: a SONAME (key) and the path the loader would open."""

    soname: str
    path: str
    flags: int

    @property
    def arch_flags(self) -> int:
        """The architecture bits of the entry's flags."""
        return self.flags & FLAG_ARCH_MASK

    @property
    def is_elf(self) -> bool:
        """True for ELF entries (libc5 or libc6), the only ones the toolkit considers."""
        return bool(self.flags & FLAG_ELF)


def parse_ldcache(data: bytes, *, source: str = "ld.so.cache") -> tuple[CacheEntry, ...]:
    """Parse the bytes of an ld.so.cache file.

    Args:
        data: the whole file.
        source: the file name, used in error messages.

    Returns:
        The entries in file order (glibc keeps them sorted by SONAME, most specific first).

    Raises:
        DiscoveryError: the data is not a glibc 1.1 cache or is truncated.
    """
    try:
        _, entries = read_entries(data)
    except FormatError as err:
        raise _bad(source, str(err)) from None
    return tuple(
        CacheEntry(soname=_text(key), path=_text(value), flags=flags)
        for flags, key, value, _, _ in entries
    )


def read_ldcache(path: Path) -> tuple[CacheEntry, ...]:
    """Read and parse an ld.so.cache file; a missing or unreadable file is a DiscoveryError."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DiscoveryError(
            f"cannot read {path}: {err.strerror}",
            hint="check driver-root in nvct's config.toml, or run ldconfig on the host",
        ) from err
    return parse_ldcache(data, source=str(path))


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _bad(source: str, what: str) -> DiscoveryError:
    return DiscoveryError(
        f"{source}: {what}",
        hint="regenerate it with ldconfig (or ldconfig -r <driver-root>)",
    )
