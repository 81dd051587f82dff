"""Reading a file the image controls (nvct.container.rootfs.Rootfs.read_file)."""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvct.container.rootfs import Rootfs


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def rootfs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rootfs]:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    with Rootfs(str(root), openat2=request.param) as fs:
        yield fs


@pytest.fixture
def alarm() -> Iterator[None]:
    """A read that blocks fails the test after 5 s instead of hanging the suite."""

    def expired(*_: object) -> None:
        raise TimeoutError("read_file blocked")

    before = signal.signal(signal.SIGALRM, expired)
    signal.alarm(5)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def test_a_regular_file_is_read_up_to_the_limit(rootfs: Rootfs) -> None:
    (Path(rootfs.path) / "etc/ld.so.cache").write_bytes(b"0123456789")
    assert rootfs.read_file("/etc/ld.so.cache", 4) == b"0123"
    assert rootfs.read_file("/etc/ld.so.cache", 100) == b"0123456789"


def test_a_fifo_is_refused_without_being_opened(rootfs: Rootfs, alarm: None) -> None:
    """Opening a FIFO for reading waits for a writer: nvct would hang the container's start."""
    os.mkfifo(Path(rootfs.path) / "etc/ld.so.cache")
    with pytest.raises(OSError) as raised:
        rootfs.read_file("/etc/ld.so.cache", 100)
    assert raised.value.errno == errno.EINVAL


def test_a_missing_file_says_so(rootfs: Rootfs) -> None:
    with pytest.raises(FileNotFoundError):
        rootfs.read_file("/etc/missing", 100)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_a_device_node_is_refused(rootfs: Rootfs) -> None:
    os.mknod(Path(rootfs.path) / "etc/ld.so.cache", 0o644 | 0o020000, os.makedev(1, 3))
    with pytest.raises(OSError) as raised:
        rootfs.read_file("/etc/ld.so.cache", 100)
    assert raised.value.errno == errno.EINVAL


def test_a_symlink_at_the_file_is_refused_in_either_lookup(rootfs: Rootfs) -> None:
    """openat2 and the walk agree, and so does the launcher's ``open_regular``: the file's own
    name must not be a link (it stays inside the root either way, but only one rule holds)."""
    root = Path(rootfs.path)
    (root / "etc/real.cache").write_bytes(b"cache")
    (root / "etc/ld.so.cache").symlink_to("real.cache")
    with pytest.raises(OSError) as raised:
        rootfs.read_file("/etc/ld.so.cache", 100)
    assert raised.value.errno == errno.EINVAL


def test_a_symlink_on_the_way_is_followed_inside_the_root(rootfs: Rootfs) -> None:
    root = Path(rootfs.path)
    (root / "var/etc").mkdir(parents=True)
    (root / "var/etc/ld.so.cache").write_bytes(b"cache")
    (root / "etc").rmdir()
    (root / "etc").symlink_to("/../../var/etc")
    assert rootfs.read_file("/etc/ld.so.cache", 100) == b"cache"
