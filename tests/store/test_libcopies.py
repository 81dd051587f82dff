"""A directory of copies of the driver's libraries where hard links cannot be made
(inject.library-mounts = "directory-copies", nvct.store.libcopies): the cache dir on a private
tmpfs, another filesystem than the simulated driver."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.harness.tmpfs import mounted_tmpfs
from nvct.config.container import Inject
from nvct.container.stage import remake_missing
from nvct.plan.explain import _plan_lines
from nvct.plan.workorder import from_plan
from nvct.store.libcopies import copies_dir, ensure_copies
from tests.conftest import sim_config
from tests.store.test_libdir import at_once, plans

pytestmark = pytest.mark.root

COPIES = Inject(library_mounts="directory-copies")
OLD = time.time() - 7200


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[Path]:
    """A cache dir on another filesystem than the simulated driver and tmp_path."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    with mounted_tmpfs(tmp_path / "otherfs") as mount:
        yield mount / "cache"


def _inodes(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.lstat().st_ino, p.lstat().st_mtime_ns) for p in directory.iterdir()}


def test_without_the_option_another_filesystem_keeps_one_mount_per_library(
    h100x4, tmp_path, elsewhere
) -> None:
    files, same = plans(h100x4, tmp_path, "compute,utility", cache_dir=str(elsewhere))
    assert same == files and not same.library_dirs
    assert sum(m.kind == "lib" for m in same.mounts) > 1


def test_copies_are_bound_as_one_directory_made_once(h100x4, tmp_path, elsewhere) -> None:
    files, grouped = plans(
        h100x4, tmp_path, "compute,utility", cache_dir=str(elsewhere), inject=COPIES
    )
    (d,) = grouped.library_dirs
    assert d.copies and d.host_dir.startswith(f"{elsewhere}/libcopies/dirs/")
    assert [m.kind for m in grouped.mounts].count("libdir") == 1
    assert not any(m.kind == "lib" for m in grouped.mounts)
    bins = sum(m.kind == "bin" for m in files.mounts)
    assert bins and len(grouped.binary_links) == bins  # copied too, run through links
    assert sum(m.kind == "lib" for m in files.mounts) + bins == len(d.files) > 1
    host = Path(d.host_dir)
    assert stat.S_IMODE(host.stat().st_mode) == 0o755 and host.stat().st_uid == 0
    for source, name in d.files:  # byte-identical copies, not the driver's inodes
        copy, original = host / name, Path(source)
        assert copy.read_bytes() == original.read_bytes()
        assert copy.stat().st_ino != original.stat().st_ino
        assert stat.S_IMODE(copy.stat().st_mode) == stat.S_IMODE(original.stat().st_mode) & 0o755
    for name, target in d.links:
        assert os.readlink(host / name) == target and (host / name).exists()
    # what a container start is told, and what explain shows
    order = from_plan(grouped, sim_config(h100x4, tmp_path, cache_dir=str(elsewhere)))
    assert [row[4] for row in order["libdirs"]] == [True]
    cuda = next(name for _, name in d.files if name.startswith("libcuda.so."))
    source = dict((n, s) for s, n in d.files)[cuda]
    assert f"      {cuda}  (copy of {source})" in _plan_lines(grouped)
    # a second start copies nothing: the same files, inodes and times
    before = _inodes(host)
    objects = _inodes(elsewhere / "libcopies/objects")
    _, again = plans(h100x4, tmp_path, "compute,utility", cache_dir=str(elsewhere), inject=COPIES)
    assert again.library_dirs == grouped.library_dirs
    assert _inodes(host) == before and _inodes(elsewhere / "libcopies/objects") == objects
    # another capability set links the same copies: no library is copied twice
    _, more = plans(
        h100x4, tmp_path, "compute,utility,video", cache_dir=str(elsewhere), inject=COPIES
    )
    (other,) = more.library_dirs
    assert other.host_dir != d.host_dir
    assert (Path(other.host_dir) / cuda).stat().st_ino == before[cuda][0]
    assert (host / cuda).stat().st_nlink == 3  # the object and two directories
    # a cached order whose directory a cleaner took gets it back from the same copies
    for entry in host.iterdir():
        entry.unlink()
    host.rmdir()
    remake_missing(order)
    after = _inodes(host)
    assert sorted(after) == sorted(before)
    assert all(after[name][0] == before[name][0] for _, name in d.files)  # nothing copied


def test_a_copy_that_cannot_be_made_leaves_nothing_and_one_mount_per_library(
    h100x4, tmp_path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    with mounted_tmpfs(tmp_path / "tiny", size="64k") as tiny:  # the libraries do not fit
        cache = tiny / "cache"
        files, same = plans(
            h100x4, tmp_path, "compute,utility", cache_dir=str(cache), inject=COPIES
        )
        assert same == files and not same.library_dirs
        left = [p.relative_to(cache) for p in cache.rglob("*") if not p.is_dir()]
        assert left == []  # no temporary file, half copy or manifest


def test_a_symlink_in_the_cache_dir_is_never_followed(tmp_path, elsewhere) -> None:
    source = tmp_path / "libx.so.1"
    source.write_bytes(b"x" * 100)
    victim = tmp_path / "victim"
    victim.mkdir()
    (elsewhere / "libcopies").mkdir(parents=True)
    (elsewhere / "libcopies/objects").symlink_to(victim)
    files = [[str(source), "libx.so.1"]]
    path = copies_dir(str(elsewhere), "fp", files, [])
    with pytest.raises(OSError, match="symlink"):
        ensure_copies(path, files, [])
    assert list(victim.iterdir()) == [] and not os.path.lexists(path)


def _age(*paths: Path) -> None:
    for path in paths:
        os.utime(path, (OLD, OLD), follow_symlinks=False)


def test_a_changed_driver_file_gets_a_new_directory_and_the_old_one_is_swept(
    tmp_path, elsewhere
) -> None:
    """Copies are keyed by their source's identity: a changed library gets a new directory;
    the old one (and the copy only it held) goes once an hour old, a current one never."""
    driver = tmp_path / "driver"
    driver.mkdir()
    lib, other = driver / "libnvidia-ml.so.1", driver / "libcuda.so.1"
    lib.write_bytes(b"old" * 1000)
    other.write_bytes(b"cuda" * 1000)
    one = [[str(lib), lib.name]]
    both = [[str(lib), lib.name], [str(other), other.name]]
    cuda = [[str(other), other.name]]
    first = copies_dir(str(elsewhere), "fp", one, [])
    ensure_copies(first, one, [])
    current = copies_dir(str(elsewhere), "fp", cuda, [])
    ensure_copies(current, cuda, [])
    objects = elsewhere / "libcopies/objects"
    stale_copy = Path(first) / lib.name
    stale_object = next(p for p in objects.iterdir() if p.stat().st_ino == stale_copy.stat().st_ino)
    _age(Path(first), Path(current), Path(first + ".sources"), *objects.iterdir())
    time.sleep(0.01)
    lib.write_bytes(b"new" * 1001)  # the driver changed this library
    second = copies_dir(str(elsewhere), "fp", one, [])
    assert second != first
    ensure_copies(second, one, [])  # builds, then sweeps
    assert (Path(second) / lib.name).read_bytes() == b"new" * 1001
    assert not os.path.lexists(first) and not os.path.lexists(first + ".sources")
    assert not stale_object.exists()
    # the directory of the unchanged library is current: old as it is, it stays whole
    assert (Path(current) / other.name).read_bytes() == b"cuda" * 1000
    # a directory whose source is gone goes once old; a young one stays until it is old
    young = copies_dir(str(elsewhere), "fp", both, [])
    ensure_copies(young, both, [])
    other.unlink()
    ptx = [[str(driver / "libnvidia-ptxjitcompiler.so.1"), "libnvidia-ptxjitcompiler.so.1"]]
    Path(ptx[0][0]).write_bytes(b"ptx")
    ensure_copies(copies_dir(str(elsewhere), "fp", ptx, []), ptx, [])
    assert not os.path.lexists(current) and os.path.isdir(young)
    _age(Path(young))
    nvml = [[str(lib), "libnvidia-ml.so.2"]]
    ensure_copies(copies_dir(str(elsewhere), "fp", nvml, []), nvml, [])
    assert not os.path.lexists(young) and os.path.isdir(second)


def test_a_copy_takes_its_sources_selinux_label(tmp_path, elsewhere, monkeypatch) -> None:
    """Without SELinux on this machine, its calls are observed: each copy gets the label of
    the file it copies (a hard link would share it)."""
    import nvct.store.libcopies as libcopies

    source = tmp_path / "libx.so.1"
    source.write_bytes(b"x" * 10)
    labelled: list[tuple[object, bytes]] = []

    def getxattr(path: object, name: str, **_: object) -> bytes:
        assert name == "security.selinux"
        if path != str(source):
            raise OSError(61, "No data available")
        return b"system_u:object_r:lib_t:s0"

    def setxattr(target: object, name: str, value: bytes, **_: object) -> None:
        labelled.append((target, value))

    monkeypatch.setattr(libcopies.os, "getxattr", getxattr)
    monkeypatch.setattr(libcopies.os, "setxattr", setxattr)
    files = [[str(source), source.name]]
    ensure_copies(copies_dir(str(elsewhere), "fp", files, []), files, [])
    ((target, label),) = labelled  # the copy's; its directory's source has no label here
    assert Path(str(target)).parent == elsewhere / "libcopies/objects"
    assert label == b"system_u:object_r:lib_t:s0"


def test_concurrent_starts_build_one_directory_of_copies(h100x4, tmp_path, elsewhere) -> None:
    """Six starts that find no directory build it at once: one whole directory, its copies
    byte-identical, nothing temporary left in the cache."""
    _, grouped = plans(h100x4, tmp_path, "compute,utility", cache_dir=str(elsewhere), inject=COPIES)
    (d,) = grouped.library_dirs
    root = elsewhere / "libcopies"
    for path in sorted(root.rglob("*"), reverse=True):  # as a cache cleaner would
        path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    assert at_once(6, lambda: ensure_copies(d.host_dir, d.files, d.links)) == [0] * 6
    host = Path(d.host_dir)
    assert sorted(p.name for p in host.iterdir()) == sorted(
        [name for _, name in d.files] + [name for name, _ in d.links]
    )
    for source, name in d.files:
        assert (host / name).read_bytes() == Path(source).read_bytes()
    assert [p for p in root.rglob(".*")] == []
