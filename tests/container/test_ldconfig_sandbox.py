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


def test_an_image_owned_by_another_uid_gets_its_cache(image: Path) -> None:
    """An image unpacked for a user namespace: its /etc and old cache belong to uid 100000,
    mode 0700 and 0600. ldconfig, left with three capabilities, still reads and replaces them
    (without CAP_DAC_OVERRIDE it cannot create its temporary file there, without CAP_FOWNER it
    cannot chmod the stale one)."""
    (image / "etc/ld.so.cache").write_bytes(b"old")
    (image / "etc/ld.so.cache~").write_bytes(b"stale")
    for path in (image / "etc", image / "lib", *(image / "etc").iterdir()):
        os.chown(path, 100000, 100000)
        path.chmod(0o700 if path.is_dir() else 0o600)
    run(image)
    assert b"libc.so.6" in (image / "etc/ld.so.cache").read_bytes()
    assert stat.S_IMODE((image / "etc/ld.so.cache").stat().st_mode) == 0o644


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


# A static stand-in for ldconfig that reports, in the cache it is asked to write, what it runs
# with: its capability sets, bounding set, no_new_privs, open descriptors and its stdin.
_PROBE = r"""
#include <fcntl.h>
#include <linux/capability.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

int main(void)
{
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    unsigned long long bounding = 0;
    struct stat in;
    FILE *out = fopen("/etc/ld.so.cache", "w");
    if (!out || syscall(SYS_capget, &head, data) != 0 || fstat(0, &in) != 0)
        return 1;
    for (int cap = 0; cap < 64; cap++)
        if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1)
            bounding |= 1ULL << cap;
    fprintf(out, "effective=%llx permitted=%llx inheritable=%llx bounding=%llx nnp=%d\n",
            (unsigned long long)data[1].effective << 32 | data[0].effective,
            (unsigned long long)data[1].permitted << 32 | data[0].permitted,
            (unsigned long long)data[1].inheritable << 32 | data[0].inheritable, bounding,
            prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
    fprintf(out, "stdin=%u:%u fds=", major(in.st_rdev), minor(in.st_rdev));
    for (int fd = 0; fd < 4096; fd++)
        if (fd != fileno(out) && fcntl(fd, F_GETFD) >= 0)
            fprintf(out, "%d,", fd);
    return fclose(out) != 0;
}
"""


@pytest.fixture
def probe(tmp_path: Path) -> str:
    if not shutil.which("gcc"):
        pytest.skip("gcc is needed to build the static probe (.ci/run installs it)")
    source = tmp_path / "probe.c"
    source.write_text(_PROBE)
    binary = tmp_path / "ldconfig-probe"
    subprocess.run(["gcc", "-static", "-O2", "-o", str(binary), str(source)], check=True)
    return str(binary)


def test_ldconfig_runs_with_three_capabilities_and_none_of_the_callers_descriptors(
    image: Path, probe: str
) -> None:
    """ldconfig parses the image's ELF files as root: a flaw there reaches only what it keeps,
    CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER, with no way to regain the rest. A
    descriptor the shim was handed as inheritable (a pipe of its engine's) never reaches it,
    nor does its stdin (a hook's is runc's state)."""
    held_read, held_write = os.pipe()
    os.set_inheritable(held_read, True)
    os.set_inheritable(held_write, True)
    stdin = os.dup(0)
    os.dup2(held_read, 0)
    try:
        with Rootfs(str(image)) as rootfs:
            ldconfig.run_ldconfig(rootfs, probe, ["/lib"])
    finally:
        os.dup2(stdin, 0)
        for fd in (stdin, held_read, held_write):
            os.close(fd)
    report = (image / "etc/ld.so.cache").read_text()
    assert "effective=e permitted=e inheritable=0 bounding=e nnp=1\n" in report
    assert report.endswith("stdin=1:3 fds=0,1,2,")  # /dev/null; the pipe to nvct as 1 and 2
