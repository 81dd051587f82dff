"""glibc's ``ld.so.cache`` binary format: read its entries, add the driver's, write it back.

Format (glibc ``sysdeps/generic/dl-cache.h``): an optional old libc5 block (magic
``ld.so-1.7.0``, count, 12-byte entries) followed, aligned to 8, by the new header
``glibc-ld.so.cache1.1``: nlibs, len_strings, flags, extension offset, then 24-byte entries
(flags, key, value, osversion, hwcap). String offsets are relative to the new header.
The loader binary-searches the entries, so they are kept in ldconfig's order: keys
descending by ``_dl_cache_libcmp`` (digit runs compare as numbers), then flags descending,
then the most specific hwcap first.

``add_entries`` is what lets a container get its driver libraries into its ld.so.cache
without running ldconfig over the image (a process, a mount namespace and a chroot, ~25 ms
per start): the image's own cache plus the driver's entries, in the order ldconfig would
write them. An image with no cache at all (busybox, static, distroless) gets the driver's
entries alone when ldconfig would find no other library in it. Otherwise it declines
(returns None, and ldconfig runs) whenever the result could differ from ldconfig's: an
unreadable cache, a SONAME the image already lists (which one wins depends on the image's
ld.so.conf order), glibc-hwcaps entries, or names outside ASCII.

Stdlib ``struct`` only (its C half ``_struct``, built into the interpreter, without the
``struct`` wrapper module's load): this runs in the shim's create (and the hook).
"""

from __future__ import annotations

import sys
from _struct import Struct  # what ``struct`` re-exports, without loading ``struct`` itself

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
MAX_SIZE = 16 << 20  # larger caches (from an image, or nvct's own) are not read

FLAG_ELF = 0x0001
FLAG_ELF_LIBC6 = 0x0003
FLAG_TYPE_MASK = 0x00FF
FLAG_ARCH_MASK = 0xFF00
HWCAP_EXTENSION = 1 << 62  # the hwcap field indexes glibc-hwcaps subdirectories
# glibc's cache_file_new_flags_endian_{little,big}: the header flags ldconfig writes.
ENDIAN_FLAGS = 2 if sys.byteorder == "little" else 3
# What a glibc ldconfig scans with no ld.so.conf, on Debian (plus multiarch), Fedora, Arch...
TRUSTED_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")
# Subdirectories ldconfig descends into (glibc-hwcaps; tls and x86 platforms before 2.37).
HWCAP_SUBDIRS = ("glibc-hwcaps", "tls", "x86_64", "haswell", "xeon_phi", "avx512_1", "i686")

NEW_HEADER = Struct("<20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, ext
NEW_ENTRY = Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
_OLD_HEADER = Struct("<11sxI")
_OLD_ENTRY_SIZE = 12
_MAX_STRING = 4096

# (flags, key, value, osversion, hwcap), as in the file.
Entry = tuple[int, bytes, bytes, int, int]


class FormatError(ValueError):
    """The data is not a glibc 1.1 ld.so.cache, or is truncated."""


def read_entries(data: bytes) -> tuple[int, list[Entry]]:
    """The new-format header's flags byte and the entries, in file order.

    Raises:
        FormatError: not a glibc 1.1 cache, or truncated.
    """
    offset = 0
    if data.startswith(OLD_MAGIC):
        if len(data) < _OLD_HEADER.size:
            raise FormatError("truncated libc5 header")
        _, old_count = _OLD_HEADER.unpack_from(data, 0)
        offset = (_OLD_HEADER.size + old_count * _OLD_ENTRY_SIZE + 7) & ~7
        if offset > len(data):
            raise FormatError("libc5 block runs past the end of the file")
    if data[offset : offset + len(NEW_MAGIC)] != NEW_MAGIC:
        raise FormatError("not a glibc ld.so.cache (format 1.1)")
    if offset + NEW_HEADER.size > len(data):
        raise FormatError("truncated header")
    _, nlibs, _, flags, _ = NEW_HEADER.unpack_from(data, offset)
    start = offset + NEW_HEADER.size
    end = start + nlibs * NEW_ENTRY.size
    if end > len(data):
        raise FormatError(f"header announces {nlibs} entries but the file is too short")
    entries = []
    # One object per string offset: an image's cache whose entries all name one long string
    # would otherwise cost a copy of it per entry (gigabytes for a 16 MiB file).
    strings: dict[int, bytes] = {}
    for e_flags, key, value, osversion, hwcap in NEW_ENTRY.iter_unpack(data[start:end]):
        k = strings.get(key)
        if k is None:
            k = strings[key] = _cstring(data, offset, key)
        v = strings.get(value)
        if v is None:
            v = strings[value] = _cstring(data, offset, value)
        entries.append((e_flags, k, v, osversion, hwcap))
    return flags, entries


def _cstring(data: bytes, base: int, offset: int) -> bytes:
    at = base + offset
    if at >= len(data):
        raise FormatError(f"string offset {offset} outside the file")
    end = data.find(b"\0", at, at + _MAX_STRING)
    if end < 0:
        raise FormatError(f"unterminated string at offset {offset}")
    return data[at:end]


def write_cache(flags: int, entries: list[Entry]) -> bytes:
    """A new-format-only cache (every glibc loader since 2.3 reads it) of ``entries``, which
    must already be in ldconfig's order; no extension section."""
    strings: dict[bytes, int] = {}
    table = bytearray()
    base = NEW_HEADER.size + len(entries) * NEW_ENTRY.size

    def offset_of(s: bytes) -> int:
        at = strings.get(s)
        if at is None:
            at = strings[s] = base + len(table)
            table.extend(s + b"\0")
        return at

    packed = bytearray()
    for e_flags, key, value, osversion, hwcap in entries:
        packed += NEW_ENTRY.pack(e_flags, offset_of(key), offset_of(value), osversion, hwcap)
    header = NEW_HEADER.pack(NEW_MAGIC, len(entries), len(table), flags, 0)
    return bytes(header + packed + table)


def libcmp(a: bytes, b: bytes) -> int:
    """glibc's ``_dl_cache_libcmp``: byte order, except that runs of digits compare as
    numbers (``libfoo.so.10`` sorts after ``libfoo.so.9``)."""
    i = j = 0
    while i < len(a):
        ca = a[i]
        cb = b[j] if j < len(b) else 0
        if 0x30 <= ca <= 0x39:
            if not 0x30 <= cb <= 0x39:
                return 1
            i0, j0 = i, j
            while i < len(a) and 0x30 <= a[i] <= 0x39:
                i += 1
            while j < len(b) and 0x30 <= b[j] <= 0x39:
                j += 1
            diff = int(a[i0:i]) - int(b[j0:j])
            if diff:
                return diff
        elif 0x30 <= cb <= 0x39:
            return -1
        elif ca != cb:
            return ca - cb
        else:
            i += 1
            j += 1
    return -(b[j] if j < len(b) else 0)


def _before(a: Entry, b: Entry) -> bool:
    """Whether ldconfig writes ``a`` before ``b`` (its ``compare``; hwcap entries, which
    ``add_entries`` never mixes in, aside)."""
    res = libcmp(b[1], a[1])
    if res:
        return res < 0
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[4] > b[4]


def add_entries(data: bytes, extra: list[tuple[str, str, int]]) -> bytes | None:
    """``data`` (an image's ld.so.cache) with the ``(soname, path, flags)`` entries added, in
    ldconfig's order; None when only ldconfig can say what the cache must be."""
    try:
        flags, entries = read_entries(data)
    except FormatError:
        return None
    return with_entries(flags, entries, extra)


def with_entries(
    flags: int, entries: list[Entry], extra: list[tuple[str, str, int]]
) -> bytes | None:
    """The cache of ``entries`` (in ldconfig's order) and ``extra``; None as ``add_entries``."""
    names = {e[1] for e in entries}
    for _, key, value, _, hwcap in entries:
        if hwcap & HWCAP_EXTENSION or not (key.isascii() and value.isascii()):
            return None
    for soname, path, e_flags in extra:
        if not (soname.isascii() and path.isascii()):  # before encode(): a lone surrogate
            return None
        key = soname.encode()
        if key in names:
            return None
        new: Entry = (e_flags, key, path.encode(), 0, 0)
        lo, hi = 0, len(entries)
        while lo < hi:
            mid = (lo + hi) // 2
            if _before(entries[mid], new):
                lo = mid + 1
            else:
                hi = mid
        entries.insert(lo, new)
    return write_cache(flags, entries)
