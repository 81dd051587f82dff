"""The host's ldconfig run over an image nvct does not trust (nvct.container.ldconfig): what
kind of file the image puts where ldconfig reads or writes must not hang a start or reach a
host device."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvct.base.errors import ApplyError
from nvct.container import ldconfig
from nvct.container.rootfs import Rootfs

LDCONFIG = next((p for p in ("/sbin/ldconfig.real", "/sbin/ldconfig") if os.path.isfile(p)), "")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="ldconfig's sandbox (unshare, chroot) needs root"),
    pytest.mark.skipif(not LDCONFIG, reason="no host ldconfig at /sbin/ldconfig"),
]


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """A rootfs with one library for ldconfig to list."""
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "lib").mkdir()
    libc = next(Path("/lib/x86_64-linux-gnu").glob("libc.so.6"), None) or next(
        Path("/lib64").glob("libc.so.6")
    )
    shutil.copyfile(libc, root / "lib/libc.so.6")
    (root / "etc/ld.so.conf").write_text("")
    return root


def run(root: Path) -> None:
    with Rootfs(str(root)) as rootfs:
        ldconfig.run_ldconfig(rootfs, LDCONFIG, ["/lib"])


def test_a_plain_image_gets_its_cache(image: Path) -> None:
    run(image)
    assert b"libc.so.6" in (image / "etc/ld.so.cache").read_bytes()


def test_a_fifo_for_its_config_ends_in_one_error_not_a_hang(
    image: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ldconfig, "SECONDS", 2)
    (image / "etc/ld.so.conf").unlink()
    os.mkfifo(image / "etc/ld.so.conf")
    began = time.monotonic()
    with pytest.raises(ApplyError) as raised:
        run(image)
    assert time.monotonic() - began < 15
    assert "ldconfig in the container did not finish within 2 s" in str(raised.value)


def test_a_started_ldconfig_can_be_killed_and_reaped(image: Path) -> None:
    (image / "etc/ld.so.conf").unlink()
    os.mkfifo(image / "etc/ld.so.conf")
    with Rootfs(str(image)) as rootfs:
        child = ldconfig.start_ldconfig(rootfs, LDCONFIG, ["/lib"])
    child.kill()
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # reaped: no child of that pid is left


def test_a_device_node_where_ldconfig_writes_is_refused(image: Path) -> None:
    """/etc/ld.so.cache~ as a character device (the numbers of /dev/null): ldconfig's write
    there is refused by the nodev mount it runs on."""
    os.mknod(image / "etc/ld.so.cache~", 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    with pytest.raises(ApplyError) as raised:
        run(image)
    assert "ld.so.cache~: Permission denied" in str(raised.value)


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A loop block device over a scratch file of zeros: (the file, the device number)."""
    backing = tmp_path / "disk"
    backing.write_bytes(bytes(1 << 20))
    done = subprocess.run(
        ["losetup", "--find", "--show", str(backing)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"no loop device here: {done.stderr.strip()}")
    device = done.stdout.strip()
    try:
        yield backing, os.stat(device).st_rdev
    finally:
        subprocess.run(["losetup", "-d", device], check=False)


@pytest.mark.parametrize("etc", ["in the rootfs", "a mount of its own"])
def test_a_block_device_where_ldconfig_writes_is_never_written(
    image: Path, loop_device: tuple[Path, int], etc: str
) -> None:
    """An image layer may hold a block device node (rootful engines unpack them): named
    /etc/ld.so.cache~, ldconfig, as root on the host, would write its cache over that disk.
    The same where /etc is a mount below the root (a volume, runc's own mounts)."""
    backing, rdev = loop_device
    mounted = etc == "a mount of its own"
    if mounted:
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(image / "etc")], check=True)
    try:
        (image / "etc/ld.so.conf").write_text("")
        os.mknod(image / "etc/ld.so.cache~", 0o644 | stat.S_IFBLK, rdev)
        with pytest.raises(ApplyError):
            run(image)
    finally:
        if mounted:
            subprocess.run(["umount", str(image / "etc")], check=True)
    assert backing.read_bytes() == bytes(1 << 20)


def test_a_dynamically_linked_ldconfig_is_refused(image: Path) -> None:
    """Chrooted, a dynamic ldconfig's loader and libc would be the image's, run as root."""
    with Rootfs(str(image)) as rootfs, pytest.raises(ApplyError) as raised:
        ldconfig.run_ldconfig(rootfs, "/bin/true", ["/lib"])  # any dynamic ELF
    assert "ldconfig /bin/true is dynamically linked" in str(raised.value)
    assert not (image / "etc/ld.so.cache").exists()
