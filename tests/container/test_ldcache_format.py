"""The ld.so.cache writer: the driver's entries added to an image's cache, as ldconfig would."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nvct.base.ldcache_format import (
    HWCAP_EXTENSION,
    NEW_ENTRY,
    NEW_HEADER,
    NEW_MAGIC,
    add_entries,
    libcmp,
    read_entries,
    write_cache,
)
from nvct.container.ld_cache import image_cache_with
from nvct.host.arch import host_arch
from nvct.host.fingerprint import inventory_fingerprint
from nvct.plan.build import build_plan
from nvct.plan.libdirs import with_library_dirs
from nvct.plan.model import RootfsLayout
from nvct.request.parse import parse_request
from tests.conftest import sim_config, sim_inventory


def sign(n: int) -> int:
    return (n > 0) - (n < 0)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (b"libfoo.so.9", b"libfoo.so.10", -1),  # digit runs compare as numbers
        (b"libfoo.so.10", b"libfoo.so.10", 0),
        (b"libfoo.so.010", b"libfoo.so.10", 0),
        (b"libfoo.so", b"libfoo.so.1", -1),
        (b"libfoo.so.1", b"libfoo.so", 1),
        (b"libc.so.6", b"libcuda.so.1", -1),  # '.' < 'u'
        (b"lib1", b"liba", 1),  # a digit sorts after any other character
        (b"liba", b"lib1", -1),
        (b"libnvidia-ml.so.1", b"libnvidia-ml.so.1", 0),
        (b"", b"", 0),
        (b"", b"a", -1),
    ],
)
def test_libcmp_is_glibcs(a: bytes, b: bytes, expected: int) -> None:
    assert sign(libcmp(a, b)) == expected
    assert sign(libcmp(b, a)) == -expected


def entry(key: str, flags: int = 0x0303, hwcap: int = 0) -> tuple[int, bytes, bytes, int, int]:
    return (flags, key.encode(), f"/usr/lib/x86_64-linux-gnu/{key}".encode(), 0, hwcap)


def test_write_then_read_round_trips_and_shares_strings() -> None:
    entries = [entry("libz.so.1"), entry("libc.so.6"), entry("libc.so.6", flags=0x0003)]
    data = write_cache(2, entries)
    assert data.startswith(NEW_MAGIC)
    assert read_entries(data) == (2, entries)
    assert data.count(b"libc.so.6\0") == 2  # the key and the tail of the path


def test_entries_land_where_ldconfig_puts_them() -> None:
    image = write_cache(0, [entry("libz.so.1"), entry("libm.so.6"), entry("libc.so.6")])
    merged = add_entries(
        image,
        [
            ("libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", 0x0303),
            ("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x0303),
            ("libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", 0x0003),
        ],
    )
    assert merged is not None
    _, entries = read_entries(merged)
    assert [(e[1].decode(), e[0]) for e in entries] == [
        ("libz.so.1", 0x0303),
        ("libnvidia-ml.so.1", 0x0303),
        ("libm.so.6", 0x0303),
        ("libcuda.so.1", 0x0303),  # the same key: flags descending
        ("libcuda.so.1", 0x0003),
        ("libc.so.6", 0x0303),
    ]


@pytest.mark.parametrize(
    "image",
    [
        b"",
        b"not a cache at all",
        NEW_MAGIC + b"\xff" * 8,  # truncated header
        write_cache(0, [entry("libcuda.so.1")]),  # the image has its own libcuda.so.1
        write_cache(0, [entry("libz.so.1", hwcap=HWCAP_EXTENSION | 1)]),  # glibc-hwcaps
        write_cache(0, [entry("libé.so.1")]),  # ordering of non-ASCII bytes is per-platform
    ],
    ids=["empty", "garbage", "truncated", "same-soname", "glibc-hwcaps", "non-ascii"],
)
def test_declines_what_only_ldconfig_can_decide(image: bytes) -> None:
    extra = [("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x0303)]
    assert add_entries(image, extra) is None


@pytest.mark.parametrize(
    "extra",
    [
        [("lib\udcff.so.1", "/usr/lib/x86_64-linux-gnu/libx.so.1", 0x0303)],  # os.environ's
        [("libx.so.1", "/usr/lib/x86_64-linux-gnu/\ud800/libx.so.1", 0x0303)],  # a JSON \ud800
        [("libé.so.1", "/usr/lib/x86_64-linux-gnu/libé.so.1", 0x0303)],
    ],
    ids=["surrogate-escape", "lone-surrogate", "non-ascii"],
)
def test_entries_outside_ascii_are_declined_not_raised(extra: list) -> None:
    """The CDI hook's entries come from its environment: bytes that are not UTF-8 arrive as
    surrogates, which cannot be encoded; such an entry is ldconfig's to place, as the native
    hook leaves it (found by tests/runtime/test_native_sanitized.py)."""
    assert add_entries(write_cache(0, [entry("libz.so.1")]), extra) is None


def test_cut_caches_never_raise() -> None:
    whole = write_cache(0, [entry("libz.so.1"), entry("libc.so.6")])
    extra = [("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x0303)]
    for end in range(len(whole)):
        assert add_entries(whole[:end], extra) is None


def test_entries_sharing_one_string_cost_one_copy_of_it() -> None:
    """An image's cache whose 20,000 entries all name one 4,000-byte string: read, it holds
    that string once, not 40,000 copies (160 MB; a 16 MiB file could ask for gigabytes)."""
    import tracemalloc

    n, text = 20000, b"x" * 4000 + b"\0"
    head = NEW_HEADER.pack(NEW_MAGIC, n, len(text), 0, 0)
    at = NEW_HEADER.size + n * NEW_ENTRY.size
    data = head + NEW_ENTRY.pack(0x303, at, at, 0, 0) * n + text
    tracemalloc.start()
    try:
        _, entries = read_entries(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(entries) == n and entries[-1][1] == text[:-1]
    assert peak < 20 << 20, peak


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "walk"])
def test_a_cache_is_written_where_an_image_from_scratch_has_no_etc(
    tmp_path: Path, openat2: bool
) -> None:
    from nvct.container.ld_cache import write_ld_cache
    from nvct.container.rootfs import Rootfs

    root = tmp_path / "scratch"
    root.mkdir()
    with Rootfs(str(root), openat2=openat2) as rootfs:
        write_ld_cache(rootfs, b"a cache")
    assert (root / "etc/ld.so.cache").read_bytes() == b"a cache"


def _driver_in(image: Path, plan: Any) -> Path:
    """``image`` with the plan's libraries copied where the runtime would mount them (a
    library directory with its files and links) and its SONAME links made (what the
    container holds once nvct has prepared it)."""
    for m in plan.mounts:
        if m.kind in ("lib", "lib32"):
            dest = image / m.target.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(m.source, dest)
        elif m.kind == "libdir":
            shutil.copytree(m.source, image / m.target.lstrip("/"), symlinks=True)
    for link in plan.symlinks:  # as create_symlinks does: parents made (gbm/)
        (image / link.path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (image / link.path.lstrip("/")).symlink_to(link.target)
    return image


def _plan(sim: Any, tmp_path: Path, caps: str, *, debian: bool, grouped: bool = False) -> Any:
    """The per-file plan, or (``grouped``) the one a start carries out, with the libraries
    bound as one directory."""
    cfg = sim_config(sim, tmp_path)
    request = parse_request(
        {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": caps}, config=cfg
    )
    plan = build_plan(
        request, sim_inventory(sim, tmp_path), cfg, host_arch(), RootfsLayout(debian=debian)
    )
    if not grouped:
        return plan
    fingerprint = inventory_fingerprint(cfg.driver_root, cfg.dev_root, cfg.proc_root)
    plan = with_library_dirs(plan, cfg, fingerprint, create=True)
    if not plan.library_dirs:
        pytest.skip("no hard links to the simulated driver's libraries can be made here")
    return plan


def _order(plan: Any) -> dict[str, Any]:
    return {
        "ld_cache": [list(e) for e in plan.ld_cache_entries],
        "ldconfig_dirs": list(plan.ldconfig_dirs),
        "symlinks": [[s.path, s.target] for s in plan.symlinks],
        "mounts": [[m.source, m.target, list(m.options)] for m in plan.mounts],
        "libdirs": [
            [
                d.host_dir,
                d.target,
                [list(f) for f in d.files],
                [list(k) for k in d.links],
                d.copies,
            ]
            for d in plan.library_dirs
        ],
    }


@pytest.mark.root
@pytest.mark.parametrize("grouped", [False, True], ids=["files", "directory"])
@pytest.mark.parametrize("caps", ["utility,compute", "all,compat32"])
def test_same_entries_as_ldconfig_over_the_driver(
    h100x4: Any, tmp_path: Path, caps: str, grouped: bool
) -> None:
    """The image's cache plus the work order's entries equals, entry by entry and in order,
    what the host's ldconfig writes once the driver's libraries and links are in the image
    (the shim's ldconfig command line)."""
    from integration.harness.images import glibc_rootfs

    if os.geteuid() != 0:
        pytest.skip("ldconfig -r chroots: needs root")
    plan = _plan(h100x4, tmp_path, caps, debian=True, grouped=grouped)
    image = glibc_rootfs(tmp_path / "image")
    with_driver = tmp_path / "with-driver"
    shutil.copytree(image, with_driver, symlinks=True)
    _driver_in(with_driver, plan)
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    argv = ["-X", "-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache", *plan.ldconfig_dirs]
    subprocess.run([ldconfig, "-r", str(with_driver), *argv], check=True)

    merged = add_entries((image / "etc/ld.so.cache").read_bytes(), list(plan.ld_cache_entries))
    assert merged is not None
    expected = read_entries((with_driver / "etc/ld.so.cache").read_bytes())[1]
    got = read_entries(merged)[1]
    assert len(got) > len(read_entries((image / "etc/ld.so.cache").read_bytes())[1])
    missing, extra = set(expected) - set(got), set(got) - set(expected)
    assert (missing, extra) == (set(), set())
    assert got == expected  # and in ldconfig's order
    if "compat32" in caps and h100x4.lib32_dir is not None:
        assert any(e[0] == 0x0003 for e in got)  # 32-bit entries were checked too


@pytest.mark.root
@pytest.mark.parametrize("grouped", [False, True], ids=["files", "directory"])
@pytest.mark.parametrize(
    ("caps", "debian"),
    [("utility,compute", False), ("all,compat32", False), ("utility,compute", True)],
    ids=["lib64", "lib64+compat32", "multiarch"],
)
def test_fresh_cache_for_an_image_without_one_is_ldconfigs(
    h100x4: Any, tmp_path: Path, caps: str, debian: bool, grouped: bool
) -> None:
    """A busybox image has no ld.so.cache and no library: the driver's entries alone are,
    entry by entry and in order, what the host's ldconfig writes over it."""
    from integration.harness.images import busybox_rootfs
    from nvct.container.rootfs import Rootfs

    if os.geteuid() != 0:
        pytest.skip("ldconfig -r chroots: needs root")
    plan = _plan(h100x4, tmp_path, caps, debian=debian, grouped=grouped)
    image = _driver_in(busybox_rootfs(tmp_path / "image"), plan)
    assert not (image / "etc/ld.so.cache").exists()
    with Rootfs(str(image), openat2=False) as rootfs:
        made = image_cache_with(rootfs, _order(plan))
    assert made is not None
    how, data = made

    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    argv = ["-X", "-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache", *plan.ldconfig_dirs]
    subprocess.run([ldconfig, "-r", str(image), *argv], check=True)
    expected = read_entries((image / "etc/ld.so.cache").read_bytes())
    assert how == "fresh"
    assert read_entries(data) == expected  # header flags, entries and their order
    assert len(expected[1]) == len(plan.ld_cache_entries) > 0


def _busybox_like(root: Path, plan: Any) -> Path:
    """A library-less image with the plan's files in it (no gcc or root needed)."""
    (root / "etc").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin/busybox").write_bytes(b"\x7fELF static")
    for m in plan.mounts:  # all of them, as the hook sees the rootfs (firmware/ too)
        dest = root / m.target.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if m.kind == "libdir":  # the library directory, mounted with what it holds
            shutil.copytree(m.source, dest, symlinks=True)
        else:
            dest.write_bytes(b"")
    for link in plan.symlinks:  # as create_symlinks does: parents made (gbm/)
        (root / link.path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / link.path.lstrip("/")).symlink_to(link.target)
    return root


@pytest.mark.parametrize("grouped", [False, True], ids=["files", "directory"])
@pytest.mark.parametrize(
    "change",
    [
        "none",
        "foreign-library",
        "ld.so.conf",
        "lib64-alias",
        "hwcaps-dir",
        "odd-symlink",
    ],
)
def test_fresh_cache_only_when_ldconfig_would_find_nothing_else(
    h100x4: Any, tmp_path: Path, change: str, grouped: bool
) -> None:
    from nvct.container.rootfs import Rootfs

    plan = _plan(h100x4, tmp_path, "utility,compute", debian=False, grouped=grouped)
    root = _busybox_like(tmp_path / "image", plan)
    if change == "foreign-library":
        (root / "usr/lib").mkdir(parents=True, exist_ok=True)
        (root / "usr/lib/libfoo.so.1").write_bytes(b"")
    elif change == "ld.so.conf":
        (root / "etc/ld.so.conf").write_text("/opt/lib\n")
    elif change == "lib64-alias":
        (root / "lib64").symlink_to("usr/lib64")  # which path ldconfig lists is its choice
    elif change == "hwcaps-dir":
        (root / "usr/lib64/glibc-hwcaps/x86-64-v3").mkdir(parents=True)
    elif change == "odd-symlink":
        (root / "usr/lib64/x86_64").symlink_to("/opt")
    with Rootfs(str(root), openat2=False) as rootfs:
        made = image_cache_with(rootfs, _order(plan))
    if change == "none":
        assert made is not None
        assert made[0] == "fresh"
        keys = {e[1].decode() for e in read_entries(made[1])[1]}
        assert "libcuda.so.1" in keys
        assert "libnvidia-ml.so.1" in keys
    else:
        assert made is None


def test_fresh_cache_declines_a_foreign_library_in_the_library_directory(
    h100x4: Any, tmp_path: Path
) -> None:
    """The hook checks once the library directory is mounted: what it holds is the driver's,
    anything else there is not."""
    from nvct.container.rootfs import Rootfs

    plan = _plan(h100x4, tmp_path, "utility,compute", debian=False, grouped=True)
    root = _busybox_like(tmp_path / "image", plan)
    with Rootfs(str(root), openat2=False) as rootfs:
        made = image_cache_with(rootfs, _order(plan))
    assert made is not None and made[0] == "fresh"
    (root / "usr/lib64/nvidia-driver/libfoo.so.1").write_bytes(b"")
    with Rootfs(str(root), openat2=False) as rootfs:
        assert image_cache_with(rootfs, _order(plan)) is None
