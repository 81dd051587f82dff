"""Parser for glibc's ``/etc/ld.so.cache``.

Format (glibc ``sysdeps/generic/dl-cache.h``): an optional old libc5 block (magic
``ld.so-1.7.0``, count, 12-byte entries) followed, aligned to 8, by the new header
``glibc-ld.so.cache1.1``: nlibs, len_strings, flags, extension offset, then 24-byte entries
(flags, key, value, osversion, hwcap). String offsets are relative to the new header.
Only the new format's entries are read, as libnvidia-container does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from nvct.errors import DiscoveryError

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"

FLAG_ELF = 0x0001
FLAG_TYPE_MASK = 0x00FF
FLAG_ARCH_MASK = 0xFF00

# (flags & FLAG_ARCH_MASK) per machine; 32-bit x86 libc6 entries carry no arch bits.
ARCH_FLAGS: dict[str, int] = {
    "x86_64": 0x0300,
    "i386": 0x0000,
    "x32": 0x0800,
    "aarch64": 0x0A00,
    "armhf": 0x0900,
    "ppc64le": 0x0500,
}

_NEW_HEADER = struct.Struct("<20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, ext
_NEW_ENTRY = struct.Struct("<iIIIQ")
_OLD_HEADER = struct.Struct("<11sxI")
_OLD_ENTRY_SIZE = 12


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
    offset = 0
    if data.startswith(OLD_MAGIC):
        if len(data) < _OLD_HEADER.size:
            raise _bad(source, "truncated libc5 header")
        _, old_count = _OLD_HEADER.unpack_from(data, 0)
        offset = _OLD_HEADER.size + old_count * _OLD_ENTRY_SIZE
        offset = (offset + 7) & ~7
        if offset > len(data):
            raise _bad(source, "libc5 block runs past the end of the file")
    if data[offset : offset + len(NEW_MAGIC)] != NEW_MAGIC:
        raise _bad(source, "not a glibc ld.so.cache (format 1.1)")
    if offset + _NEW_HEADER.size > len(data):
        raise _bad(source, "truncated header")
    _, nlibs, _, _, _ = _NEW_HEADER.unpack_from(data, offset)
    entries_start = offset + _NEW_HEADER.size
    if entries_start + nlibs * _NEW_ENTRY.size > len(data):
        raise _bad(source, f"header announces {nlibs} entries but the file is too short")
    strings = memoryview(data)[offset:]
    result = []
    for i in range(nlibs):
        flags, key, value, _, _ = _NEW_ENTRY.unpack_from(data, entries_start + i * _NEW_ENTRY.size)
        result.append(
            CacheEntry(
                soname=_cstring(strings, key, source),
                path=_cstring(strings, value, source),
                flags=flags,
            )
        )
    return tuple(result)


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


def _cstring(strings: memoryview, offset: int, source: str) -> str:
    if offset >= len(strings):
        raise _bad(source, f"string offset {offset} outside the file")
    end = bytes(strings[offset : offset + 4096]).find(b"\0")
    if end < 0:
        raise _bad(source, f"unterminated string at offset {offset}")
    return bytes(strings[offset : offset + end]).decode("utf-8", "surrogateescape")


def _bad(source: str, what: str) -> DiscoveryError:
    return DiscoveryError(
        f"{source}: {what}",
        hint="regenerate it with ldconfig (or ldconfig -r <driver-root>)",
    )
