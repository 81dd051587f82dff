"""ld.so.cache parsing: the real host cache, synthetic caches in both layouts, fuzzing."""

from __future__ import annotations

import contextlib
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvct.base.errors import DiscoveryError
from nvct.host.ldcache import NEW_MAGIC, OLD_MAGIC, parse_ldcache, read_ldcache


def build_cache(entries: list[tuple[str, str, int]], *, old_prefix: bool = False) -> bytes:
    """Write a glibc 1.1 cache (optionally behind a libc5 block), as ldconfig does."""
    header_size, entry_size = 48, 24
    strings = b""
    offsets = []
    base = header_size + entry_size * len(entries)
    for key, value, _ in entries:
        k = base + len(strings)
        strings += key.encode() + b"\0"
        v = base + len(strings)
        strings += value.encode() + b"\0"
        offsets.append((k, v))
    new = struct.pack("<20sIIB3xI12x", NEW_MAGIC, len(entries), len(strings), 2, 0)
    for (k, v), (_, _, flags) in zip(offsets, entries, strict=True):
        new += struct.pack("<iIIIQ", flags, k, v, 0, 0)
    new += strings
    if not old_prefix:
        return new
    old = struct.pack("<11sxI", OLD_MAGIC, 1) + struct.pack("<iII", 1, 0, 0)
    old += b"\0" * ((8 - len(old) % 8) % 8)
    return old + new


ENTRIES = [
    ("libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", 0x0303),
    ("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x0303),
    ("libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", 0x0003),
]


@pytest.mark.parametrize("old_prefix", [False, True], ids=["glibc-1.1", "libc5+glibc-1.1"])
def test_synthetic_cache_round_trips(old_prefix: bool) -> None:
    parsed = parse_ldcache(build_cache(ENTRIES, old_prefix=old_prefix))
    assert [(e.soname, e.path, e.flags) for e in parsed] == ENTRIES
    assert [hex(e.arch_flags) for e in parsed] == ["0x300", "0x300", "0x0"]


@pytest.mark.skipif(shutil.which("ldconfig") is None, reason="needs ldconfig (libc-bin)")
def test_host_cache_matches_ldconfig_p() -> None:
    path = Path("/etc/ld.so.cache")
    if not path.exists():
        pytest.skip("this host has no /etc/ld.so.cache")
    printed = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    expected = {
        (line.split()[0], line.rsplit("=> ", 1)[1])
        for line in printed.splitlines()[1:]
        if "=>" in line
    }
    parsed = {(e.soname, e.path) for e in read_ldcache(path)}
    assert parsed == expected


@pytest.mark.parametrize(
    "data",
    [b"", b"garbage", OLD_MAGIC + b"\0\xff\xff\xff\x7f", NEW_MAGIC + b"\x05\0\0\0"],
    ids=["empty", "garbage", "old-count-overflow", "new-truncated"],
)
def test_bad_caches_are_clear_errors(data: bytes) -> None:
    with pytest.raises(DiscoveryError, match="ldconfig"):
        parse_ldcache(data, source="ld.so.cache")


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match=str(tmp_path)):
        read_ldcache(tmp_path / "etc/ld.so.cache")


@given(st.binary(max_size=512))
def test_fuzz_random_bytes_raise_only_discovery_error(data: bytes) -> None:
    with contextlib.suppress(DiscoveryError):
        parse_ldcache(data)


@given(
    st.lists(
        st.tuples(
            st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30),
            st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=60),
            st.sampled_from([0x0303, 0x0003, 0x0A03, 0x0001]),
        ),
        max_size=20,
    ),
    st.booleans(),
)
def test_fuzz_generated_caches_round_trip(entries, old_prefix) -> None:
    parsed = parse_ldcache(build_cache(entries, old_prefix=old_prefix))
    assert [(e.soname, e.path, e.flags) for e in parsed] == entries


@given(st.binary(min_size=1, max_size=64), st.integers(min_value=0, max_value=200))
def test_fuzz_corrupted_caches(noise: bytes, at: int) -> None:
    data = bytearray(build_cache(ENTRIES))
    at = min(at, len(data) - 1)
    data[at : at + len(noise)] = noise
    with contextlib.suppress(DiscoveryError):
        parse_ldcache(bytes(data))
