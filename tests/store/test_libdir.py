"""The driver's libraries bound as one directory (nvct.store.libdir, group_libraries)."""

from __future__ import annotations

import os
import posixpath
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nvct.base.errors import ApplyError
from nvct.config.container import Inject
from nvct.container.ld_conf import LD_CONF, write_ld_conf
from nvct.container.rootfs import Rootfs
from nvct.container.stage import remake_missing
from nvct.host.arch import host_arch
from nvct.host.fingerprint import inventory_fingerprint
from nvct.plan.build import build_plan
from nvct.plan.libdirs import with_library_dirs
from nvct.plan.model import RootfsLayout
from nvct.plan.workorder import from_plan
from nvct.request.parse import parse_request
from nvct.store.libdir import ensure, host_dir
from tests.conftest import sim_config, sim_inventory

pytestmark = pytest.mark.root

LIB = "/usr/lib/x86_64-linux-gnu"


def plans(sim, tmp: Path, caps: str, **config: object):
    """(the per-file plan, the plan as a container start carries it out)."""
    cfg = sim_config(sim, tmp, **config)
    request = parse_request(
        {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": caps}, config=cfg
    )
    plan = build_plan(request, sim_inventory(sim, tmp), cfg, host_arch(), RootfsLayout())
    fingerprint = inventory_fingerprint(cfg.driver_root, cfg.dev_root, cfg.proc_root)
    return plan, with_library_dirs(plan, cfg, fingerprint, create=True)


def test_libraries_are_bound_as_one_directory_per_lib_dir(h100x4, tmp_path) -> None:
    if host_arch().name != "x86_64":
        pytest.skip("lib dirs asserted for x86_64")
    files, grouped = plans(h100x4, tmp_path, "compute,utility,video,graphics,compat32")
    libs = [m for m in files.mounts if m.kind in ("lib", "lib32")]
    assert [m.kind for m in grouped.mounts].count("libdir") == 2  # 64- and 32-bit
    dirs = {d.target: d for d in grouped.library_dirs}
    assert set(dirs) == {f"{LIB}/nvidia-driver", "/usr/lib/i386-linux-gnu/nvidia-driver"}
    # vdpau/ libraries keep their own mounts: libvdpau looks for them at that path
    kept = [m.target for m in grouped.mounts if m.kind in ("lib", "lib32")]
    assert kept and all("-linux-gnu/vdpau/" in t for t in kept)
    grouped_libs = [m for m in libs if m.target not in kept]
    # the binaries are links into the 64-bit directory (inject.binaries = "links")
    bins = [m for m in files.mounts if m.kind == "bin"]
    assert len(grouped.binary_links) == len(bins) > 0
    assert not any(m.kind == "bin" for m in grouped.mounts)
    assert sum(len(d.files) for d in dirs.values()) == len(grouped_libs) + len(bins)
    # no SONAME link is left to make in the container's layer, but vdpau's, and the GBM
    # backend's, which follows the allocator into the directory
    assert all("/vdpau/" in s.path or "/gbm/" in s.path for s in grouped.symlinks)
    gbm = [s.target for s in grouped.symlinks if "/gbm/" in s.path]
    assert gbm == ["../nvidia-driver/libnvidia-allocator.so.1"]
    assert grouped.ldconfig_dirs == tuple(dirs)
    for d in dirs.values():
        host = Path(d.host_dir)
        assert stat.S_IMODE(host.stat().st_mode) == 0o755
        for source, name in d.files:  # hard links: the driver's own inodes
            assert (host / name).stat().st_ino == Path(source).stat().st_ino
        for name, target in d.links:
            assert os.readlink(host / name) == target and (host / name).exists()
    # every ld.so.cache entry names a file that exists in the bound directory
    for soname, path, _ in grouped.ld_cache_entries:
        d = dirs[posixpath.dirname(path)]
        assert (Path(d.host_dir) / posixpath.basename(path)).exists(), soname
    assert len(grouped.ld_cache_entries) == len(files.ld_cache_entries)


def test_files_layout_and_no_cache_dir_keep_one_mount_per_library(h100x4, tmp_path) -> None:
    for config in ({"inject": Inject(library_mounts="files")}, {"cache_dir": ""}):
        files, same = plans(h100x4, tmp_path, "compute,utility", **config)
        assert same == files and not same.library_dirs
        assert any(m.kind == "lib" for m in same.mounts)


def test_another_filesystem_keeps_one_mount_per_library(h100x4, tmp_path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == Path(h100x4.driver_root).stat().st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the simulated driver")
    cache = shm / f"nvct-test-{os.getpid()}"
    try:
        files, same = plans(h100x4, tmp_path, "compute,utility", cache_dir=str(cache))
        assert same == files  # EXDEV: hard links cannot be made there
        assert not any((cache / "libdirs").glob("*"))  # nothing half-made is left
    finally:
        if cache.exists():
            for path in sorted(cache.rglob("*"), reverse=True):
                path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
            cache.rmdir()


def at_once(n: int, build: Callable[[], object]) -> list[int]:
    """The exit codes of ``n`` forked processes running ``build`` at once (1: it raised)."""
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 0
            try:
                build()
            except BaseException:
                code = 1
            os._exit(code)
        pids.append(pid)
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]


def test_concurrent_starts_build_one_complete_directory(h100x4, tmp_path) -> None:
    _, grouped = plans(h100x4, tmp_path, "compute,utility")
    (d,) = grouped.library_dirs
    host = Path(d.host_dir)
    for entry in host.iterdir():
        entry.unlink()
    host.rmdir()
    assert at_once(6, lambda: ensure(d.host_dir, d.files, d.links)) == [0] * 6
    assert sorted(p.name for p in host.iterdir()) == sorted(
        [name for _, name in d.files] + [name for name, _ in d.links]
    )
    assert [p.name for p in host.parent.iterdir() if p.name.startswith(".")] == []


def test_a_removed_directory_is_made_again_for_a_cached_order(h100x4, tmp_path) -> None:
    _, grouped = plans(h100x4, tmp_path, "compute,utility")
    order = from_plan(grouped, sim_config(h100x4, tmp_path))
    host = Path(order["libdirs"][0][0])
    names = sorted(p.name for p in host.iterdir())
    for entry in host.iterdir():
        entry.unlink()
    host.rmdir()
    remake_missing(order)
    assert sorted(p.name for p in host.iterdir()) == names


def test_an_incomplete_directory_is_made_whole_again(h100x4, tmp_path) -> None:
    """A cache cleaner that took one library (or link) does not leave containers without it."""
    _, grouped = plans(h100x4, tmp_path, "compute,utility")
    order = from_plan(grouped, sim_config(h100x4, tmp_path))
    host = Path(order["libdirs"][0][0])
    names = sorted(p.name for p in host.iterdir())
    (host / "libcuda.so.1").unlink()
    (host / order["libdirs"][0][2][0][1]).unlink()
    remake_missing(order)
    assert sorted(p.name for p in host.iterdir()) == names
    assert [p.name for p in host.parent.iterdir() if p.name.startswith(".")] == []


def test_a_directory_that_cannot_be_made_refuses_the_start(h100x4, tmp_path) -> None:
    _, grouped = plans(h100x4, tmp_path, "compute,utility")
    order = from_plan(grouped, sim_config(h100x4, tmp_path))
    missing = str(tmp_path / "gone.so")
    _, target, _, links, _ = order["libdirs"][0]
    order["libdirs"][0] = (
        str(tmp_path / "cache/libdirs/other"),
        target,
        [(missing, "libcuda.so.1")],
        links,
        False,
    )
    with pytest.raises(ApplyError, match=r"cannot prepare the driver's library directory .*fix"):
        remake_missing(order)
    assert not (tmp_path / "cache/libdirs/other").exists()


def test_one_directory_per_driver_install_not_per_boot(h100x4, tmp_path) -> None:
    """The directory is keyed by the files (path, device, inode): a changed fingerprint (a
    reboot re-creates the persistenced socket) finds the same one; a reinstalled file (a new
    inode at the same path) gets another."""
    plan, grouped = plans(h100x4, tmp_path, "compute,utility")
    cfg = sim_config(h100x4, tmp_path)
    again = with_library_dirs(plan, cfg, "the-fingerprint-after-a-reboot", create=True)
    assert [d.host_dir for d in again.library_dirs] == [d.host_dir for d in grouped.library_dirs]
    lib = tmp_path / "libx.so.1"
    lib.write_bytes(b"x")
    first = host_dir(str(tmp_path / "cache"), [[str(lib), "libx.so.1"]], [])
    assert host_dir(str(tmp_path / "cache"), [[str(lib), "libx.so.1"]], []) == first
    reinstalled = tmp_path / ".new"
    reinstalled.write_bytes(b"x")
    reinstalled.rename(lib)
    assert host_dir(str(tmp_path / "cache"), [[str(lib), "libx.so.1"]], []) != first
    with pytest.raises(FileNotFoundError):
        host_dir(str(tmp_path / "cache"), [[str(tmp_path / "gone.so"), "gone.so"]], [])


def test_orphaned_directories_are_swept(h100x4, tmp_path) -> None:
    """A directory holding the last link of a file (its driver is gone) goes once it is an
    hour old; one whose files the driver still has, or a fresh one, stays."""
    root = tmp_path / "cache/libdirs"
    root.mkdir(parents=True)
    old = time.time() - 7200
    for name, shared in (("orphan", False), ("live", True), ("young", False)):
        directory = root / name
        directory.mkdir()
        (directory / "libx.so.1").write_bytes(b"x")
        if shared:
            os.link(directory / "libx.so.1", tmp_path / f"{name}-host.so")
        if name != "young":
            os.utime(directory, (old, old))
    source = tmp_path / "libnew.so.1"
    source.write_bytes(b"new")
    ensure(str(root / "new"), [[str(source), "libnew.so.1"]], [])
    assert sorted(p.name for p in root.iterdir()) == ["live", "new", "new.sources", "young"]


def test_a_superseded_directory_is_swept_though_another_links_its_files(tmp_path) -> None:
    """Two directories (a CDI spec's and a start's) link the same driver files, so no file
    is ever the last link of its inode; after the driver file is replaced, each directory's
    manifest says so and the old one goes. A directory whose sources are current stays."""
    root, other = tmp_path / "cache/libdirs", tmp_path / "cdi/libdirs"
    driver = tmp_path / "driver"
    driver.mkdir()
    old_lib, kept_lib = driver / "libcuda.so.1", driver / "libnvidia-ml.so.1"
    old_lib.write_bytes(b"old")
    kept_lib.write_bytes(b"ml")
    ensure(str(root / "old"), [[str(old_lib), "libcuda.so.1"]], [])
    ensure(str(other / "old"), [[str(old_lib), "libcuda.so.1"]], [])
    ensure(str(root / "current"), [[str(kept_lib), "libnvidia-ml.so.1"]], [])
    ensure(str(other / "current"), [[str(kept_lib), "libnvidia-ml.so.1"]], [])
    replacement = driver / ".new"
    replacement.write_bytes(b"new")
    replacement.rename(old_lib)  # an upgrade: the same path, another inode
    assert (root / "old/libcuda.so.1").stat().st_nlink == 2
    hour_ago = time.time() - 7200
    for name in ("old", "current"):
        os.utime(root / name, (hour_ago, hour_ago))
    ensure(str(root / "new"), [[str(old_lib), "libcuda.so.1"]], [])
    assert sorted(p.name for p in root.iterdir()) == [
        "current", "current.sources", "new", "new.sources",
    ]  # fmt: skip
    assert (root / "new/libcuda.so.1").read_bytes() == b"new"
    assert (other / "old/libcuda.so.1").stat().st_nlink == 1  # the next sweep there takes it


def test_ld_conf_lists_the_directories_where_the_image_reads_ld_so_conf_d(h100x4, tmp_path) -> None:
    _, grouped = plans(h100x4, tmp_path, "compute,utility")
    order = from_plan(grouped, sim_config(h100x4, tmp_path))
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    with Rootfs(str(rootfs)) as root:
        assert write_ld_conf(root, order) is False  # no ld.so.conf.d: nothing reads it
    assert not (rootfs / LD_CONF.lstrip("/")).exists()
    # a symlink out of the rootfs is resolved inside it
    outside = tmp_path / "host-etc"
    outside.mkdir()
    (rootfs / "etc/ld.so.conf.d").symlink_to(outside)
    with Rootfs(str(rootfs)) as root:
        assert write_ld_conf(root, order) is False
    assert list(outside.iterdir()) == []
    (rootfs / "etc/ld.so.conf.d").unlink()
    (rootfs / "etc/ld.so.conf.d").mkdir()
    with Rootfs(str(rootfs)) as root:
        assert write_ld_conf(root, order) is True
    lines = (rootfs / LD_CONF.lstrip("/")).read_text().splitlines()
    assert lines[1:] == [d.target for d in grouped.library_dirs]


def test_the_directory_takes_the_libraries_selinux_label(h100x4, tmp_path, monkeypatch) -> None:
    """Without SELinux on this machine, its calls are observed: the directory and its links
    get the label of the libraries' own directory."""
    import nvct.store.libdir as libdir

    labels: dict[str, bytes] = {}
    lib_dir = str(Path(h100x4.driver_root) / "usr/lib/x86_64-linux-gnu")

    def getxattr(path: str, name: str) -> bytes:
        assert name == "security.selinux"
        if path != lib_dir:
            raise OSError(61, "No data available")
        return b"system_u:object_r:lib_t:s0"

    def setxattr(path: str, name: str, value: bytes, follow_symlinks: bool = True) -> None:
        assert name == "security.selinux" and (follow_symlinks or os.path.islink(path))
        labels[os.path.basename(path)] = value

    monkeypatch.setattr(libdir.os, "getxattr", getxattr)
    monkeypatch.setattr(libdir.os, "setxattr", setxattr)
    if host_arch().name != "x86_64":
        pytest.skip("lib dir asserted for x86_64")
    _, grouped = plans(h100x4, tmp_path, "compute,utility")
    (d,) = grouped.library_dirs
    assert set(labels) == {f".{posixpath.basename(d.host_dir)}.{os.getpid()}.tmp"} | {
        name for name, _ in d.links
    }
    assert set(labels.values()) == {b"system_u:object_r:lib_t:s0"}


def test_binaries_are_links_into_the_directory_unless_mounts_are_asked(h100x4, tmp_path) -> None:
    files, grouped = plans(h100x4, tmp_path, "compute,utility")
    (d,) = grouped.library_dirs
    bins = {m.target: m for m in files.mounts if m.kind == "bin"}
    assert {"/usr/bin/nvidia-smi", "/usr/bin/nvidia-cuda-mps-server"} <= set(bins)
    assert {b.path for b in grouped.binary_links} == set(bins)
    for b in grouped.binary_links:
        name = posixpath.basename(b.path)
        assert b.target == f"{d.target}/{name}" and b.source == bins[b.path].source
        # the directory holds the binary itself: its inode, executable
        held = Path(d.host_dir) / name
        assert held.stat().st_ino == Path(b.source).stat().st_ino and os.access(held, os.X_OK)
    assert len(grouped.mounts) == len(files.mounts) - len(bins) - (
        sum(m.kind == "lib" for m in files.mounts) - 1
    )
    # what explain shows: each binary where the container runs it, and where the link goes
    from nvct.plan.explain import _plan_lines

    shown = [ln.split() for ln in _plan_lines(grouped) if ln.startswith("  /usr/bin/")]
    assert ["/usr/bin/nvidia-smi", "->", f"{d.target}/nvidia-smi"] in [ln[:3] for ln in shown]
    # what a start carries out: the links, each with the bind that stands in for it
    order = from_plan(grouped, sim_config(h100x4, tmp_path))
    assert sorted(row[0] for row in order["binlinks"]) == sorted(bins)
    assert all(row[3] == list(bins[row[0]].options) for row in order["binlinks"])
    # inject.binaries = "mounts": a bind mount per binary, as NVIDIA's toolkit makes
    _, mounted = plans(h100x4, tmp_path, "compute,utility", inject=Inject(binaries="mounts"))
    assert not mounted.binary_links and mounted.library_dirs
    assert {m.target for m in mounted.mounts if m.kind == "bin"} == set(bins)
    assert all(name.startswith("lib") for _, name in mounted.library_dirs[0].files)
