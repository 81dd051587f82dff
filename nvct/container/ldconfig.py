"""Run the host's ldconfig over a container's root, sealed off from the host.

ldconfig runs as root with every capability, chrooted in a rootfs whose ``/etc`` (and
anything ldconfig opens or writes) the image's author controls. A chroot confines absolute
and ``..`` symlinks, but not procfs's magic links: with the container's procfs mounted at
``<rootfs>/proc``, an image whose ``/etc`` is a symlink to ``/proc/1/root/etc`` has ldconfig
write the *host's* ``/etc/ld.so.cache`` through the root of the runtime's init process (the
CVE-2025-23267 class). So the child that becomes ldconfig first moves to a private copy of
its mount namespace and detaches every procfs mounted at or under the rootfs there: nothing
inside the chroot then leads out. The same private namespace lets a caller show ldconfig
files that are not mounted in the container yet (``binds``), without the container ever
seeing those mounts.

The image also controls what kind of file each path is. ldconfig opens its config files and
a library's link target without checking their type, and writes ``/etc/ld.so.cache~`` over
whatever is there: a FIFO would block it for good, a device node (rootful engines unpack them
from layers) would be opened, or written, by root outside any device cgroup. So every mount
ldconfig can reach is made ``nodev`` in its namespace, and it runs under a wall-clock alarm
and an address-space limit besides the CPU and file-size ones, with three capabilities (no
others to regain), no_new_privs and none of its parent's descriptors.
"""

from __future__ import annotations

import os
import posixpath
import resource
import stat

from nvct.base import linux
from nvct.base.errors import ApplyError
from nvct.container.rootfs import Rootfs, fd_path, make_mount_point_at

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence


def run_ldconfig(
    rootfs: Rootfs,
    ldconfig: str,
    dirs: Sequence[str],
    binds: Sequence[tuple[str, str]] = (),
) -> None:
    """Refresh the rootfs's ``/etc/ld.so.cache`` with the host's ldconfig, run chrooted.

    Raises:
        ApplyError: ldconfig cannot be opened, the sandbox cannot be set up, or ldconfig fails.
    """
    start_ldconfig(rootfs, ldconfig, dirs, binds).wait()


# ldconfig over a whole distribution takes well under a second; a run this long is blocked
# (a FIFO where it reads), and is killed by its alarm.
SECONDS = 30
_SIGALRM, _SIGKILL = 14, 9  # the same on every Linux architecture nvct runs on


class Ldconfig:
    """An ldconfig child under way; ``wait()`` for its verdict, or ``kill()`` it."""

    def __init__(self, pid: int, output: int) -> None:
        self.pid = pid
        self.output = output

    def wait(self) -> None:
        """Wait for ldconfig to finish (at most ``SECONDS``: its alarm ends it).

        Raises:
            ApplyError: the sandbox could not be set up, or ldconfig failed or timed out.
        """
        output = b""
        while chunk := os.read(self.output, 65536):
            output += chunk[: 4096 - len(output)] if len(output) < 4096 else b""
        os.close(self.output)
        _, status = os.waitpid(self.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code == -_SIGALRM:
            raise ApplyError(
                f"ldconfig in the container did not finish within {SECONDS} s",
                hint="check the image for a FIFO or device at /etc/ld.so.conf, in "
                "/etc/ld.so.conf.d or among its library links",
            )
        if code != 0:
            text = output.decode(errors="replace").strip().replace("\n", "; ")[:300]
            raise ApplyError(f"ldconfig in the container failed (exit {code}): {text}")

    def kill(self) -> None:
        """End ldconfig and reap it: the create or hook that started it failed first."""
        import contextlib  # a rare path: not loaded by a start that never meets it

        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, _SIGKILL)
        os.close(self.output)
        os.waitpid(self.pid, 0)


def start_ldconfig(
    rootfs: Rootfs,
    ldconfig: str,
    dirs: Sequence[str],
    binds: Sequence[tuple[str, str]] = (),
) -> Ldconfig:
    """Start the host's ldconfig chrooted in the rootfs, to refresh its ``/etc/ld.so.cache``.

    ``binds`` are ``(host file, container path)`` pairs bind-mounted for ldconfig only, in its
    private mount namespace (the shim runs ldconfig before the runtime mounts the driver).
    The binary is opened on the host side and executed by descriptor: nothing from the image
    is ever executed, and a static ldconfig needs nothing from the image to run.

    Raises:
        ApplyError: the host's ldconfig cannot be opened.
    """
    exe = open_host_ldconfig(ldconfig)
    argv = ["ldconfig", "-X", "-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache", *dirs]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: seal off, confine, then exec by descriptor
        try:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the hook's stdin is runc's state
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            os.fchdir(_sandbox(rootfs, binds))
            os.chroot(".")
            os.chdir("/")
            resource.setrlimit(resource.RLIMIT_CPU, (10, 10))
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
            # A config that is /dev/zero would have getline() grow until the CPU limit.
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
            import _signal  # type: ignore[import-not-found]  # the C module: `signal` loads enum

            _signal.signal(_signal.SIGALRM, _signal.SIG_DFL)  # kept by execve, as the alarm
            _signal.alarm(SECONDS)
            _drop_privileges()
            # Nothing of the shim's (an inheritable descriptor the launcher or an engine
            # passed it) reaches ldconfig; the binary's own descriptor closes on exec.
            os.closerange(3, exe)
            os.closerange(exe + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
            os.execve(exe, argv, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        except BaseException as err:  # report anything, then leave the child
            os.write(2, f"{err}\n".encode())
        os._exit(127)
    os.close(write_end)
    os.close(exe)
    return Ldconfig(pid, read_end)


# What ldconfig needs of root: to read the image's library directories and write its /etc,
# which another uid may own (an image unpacked for a user namespace), and to chmod its
# temporary cache there. The rest (CAP_SYS_ADMIN, CAP_MKNOD, CAP_SYS_PTRACE...) only widens
# what a flaw in its parsing of the image's ELF files could reach.
_KEPT_CAPABILITIES = (1 << 1) | (1 << 2) | (1 << 3)  # DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER


def _drop_privileges() -> None:
    """In the child, before its exec: only ``_KEPT_CAPABILITIES`` from here on. The bounding
    set is what matters (root's execve grants the bounding set anew); no_new_privs keeps a
    set-uid or file-capability binary in the image from regaining any."""
    import errno  # the ldconfig path only

    for cap in range(64):
        if not _KEPT_CAPABILITIES >> cap & 1:
            try:
                linux.prctl(linux.PR_CAPBSET_DROP, cap)
            except OSError as err:
                if err.errno != errno.EINVAL:  # past the kernel's last capability
                    raise
                break
    linux.capset(_KEPT_CAPABILITIES, _KEPT_CAPABILITIES, 0)
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)


def open_host_ldconfig(ldconfig: str) -> int:
    """A descriptor of the host's ldconfig executable: ``ldconfig`` itself, or, where that is
    a script (Ubuntu's ``/sbin/ldconfig`` wraps ``/sbin/ldconfig.real``), the ``.real`` beside
    it. A script is never run: its interpreter would be the image's ``/bin/sh`` inside the
    chroot (and a script cannot be executed by a close-on-exec descriptor at all).

    Raises:
        ApplyError: no ELF ldconfig at that path or beside it.
    """
    for path in (ldconfig, ldconfig + ".real"):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as err:
            if path == ldconfig:
                raise ApplyError(
                    f"cannot open ldconfig {ldconfig}: {err.strerror}",
                    hint="set ldconfig in nvct's config.toml to the host's ldconfig",
                ) from err
            break
        if os.pread(fd, 4, 0) == b"\x7fELF":
            if not _asks_for_a_loader(fd):
                return fd
            os.close(fd)
            raise ApplyError(
                f"ldconfig {path} is dynamically linked: in the container's root its loader "
                "and libc would be the image's",
                hint="set ldconfig in nvct's config.toml to a static ldconfig (glibc "
                "distributions ship /sbin/ldconfig static)",
            )
        os.close(fd)
    raise ApplyError(
        f"ldconfig {ldconfig} is not an ELF executable and there is no {ldconfig}.real beside it",
        hint="set ldconfig in nvct's config.toml to the host's ldconfig binary, not a wrapper",
    )


_PT_INTERP = 3


def _asks_for_a_loader(fd: int) -> bool:
    """Whether the ELF file ``fd`` names a program interpreter (PT_INTERP): run chrooted, the
    kernel would load that path, the image's ``ld.so``, as root. A header it cannot read
    counts as one."""
    import struct  # the ldconfig path only

    head = os.pread(fd, 64, 0)
    if len(head) < 52 or head[4] not in (1, 2) or head[5] not in (1, 2):
        return True
    order = "<" if head[5] == 1 else ">"
    if head[4] == 2:
        if len(head) < 64:
            return True
        (phoff,) = struct.unpack_from(order + "Q", head, 32)
        size, count = struct.unpack_from(order + "HH", head, 54)
    else:
        (phoff,) = struct.unpack_from(order + "I", head, 28)
        size, count = struct.unpack_from(order + "HH", head, 42)
    table = os.pread(fd, size * count, phoff) if size >= 4 and count <= 512 else b""
    if len(table) != size * count:
        return True
    return any(
        struct.unpack_from(order + "I", table, i * size)[0] == _PT_INTERP for i in range(count)
    )


def _sandbox(rootfs: Rootfs, binds: Sequence[tuple[str, str]]) -> int:
    """In the child: a private mount namespace with no procfs under the rootfs, plus binds;
    returns a descriptor of the rootfs in that namespace.

    A descriptor opened before unshare(2) still walks the old namespace's mounts (procfs
    included), so the rootfs is opened again by path and checked to be the same directory.
    """
    root = os.readlink(fd_path(rootfs.fd))
    linux.unshare(linux.CLONE_NEWNS)
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    for point in sorted(procfs_mounts_under(root), key=len, reverse=True):
        linux.umount2(point, linux.MNT_DETACH | linux.UMOUNT_NOFOLLOW)
    for point, options in mounts_reaching(root):
        # Only the mount's own flags change (MS_BIND), in this namespace: nodev added.
        flags = linux.MS_REMOUNT | linux.MS_BIND | linux.MS_NODEV
        for option in options.split(","):
            flags |= _MOUNT_FLAGS.get(option, 0)
        linux.mount(None, point, None, flags)
    private = Rootfs(root)
    old, new = os.fstat(rootfs.fd), os.fstat(private.fd)
    if (old.st_dev, old.st_ino) != (new.st_dev, new.st_ino):
        raise ApplyError(f"{root} changed while ldconfig was being set up")
    by_dir: dict[str, list[tuple[str, str]]] = {}
    for source, target in binds:
        by_dir.setdefault(posixpath.dirname(target), []).append((source, target))
    for directory, files in by_dir.items():
        parent = private.makedirs(directory)
        try:
            for source, target in files:
                fd = _mount_point(private, parent, target, stat.S_ISDIR(os.stat(source).st_mode))
                try:
                    linux.mount(source, fd_path(fd), None, linux.MS_BIND)
                finally:
                    os.close(fd)
        finally:
            os.close(parent)
    return private.fd


def _mount_point(rootfs: Rootfs, parent: int, target: str, is_dir: bool) -> int:
    """An O_PATH descriptor of ``target`` in its (resolved) ``parent``, created empty if
    missing, as the runtime will create it; an image's symlink there is resolved in-root."""
    make_mount_point_at(parent, target, is_dir=is_dir)
    fd = os.open(
        posixpath.basename(target), os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
    )
    if stat.S_ISLNK(os.fstat(fd).st_mode):
        os.close(fd)
        return rootfs.open(target)
    return fd


# A mount's own flags as mountinfo's sixth field spells them: a bind remount passes them all
# again (the ones not passed would be cleared).
_MOUNT_FLAGS = {
    "ro": linux.MS_RDONLY,
    "nosuid": linux.MS_NOSUID,
    "nodev": linux.MS_NODEV,
    "noexec": linux.MS_NOEXEC,
    "nosymfollow": 1 << 8,
    "noatime": 1 << 10,
    "nodiratime": 1 << 11,
    "relatime": 1 << 21,
    "strictatime": 1 << 24,
}


def _mountinfo() -> list[tuple[str, str, str]]:
    """This process's mounts: (mount point, its own options, filesystem type)."""
    with open("/proc/self/mountinfo", "rb") as f:
        lines = f.read().decode(errors="surrogateescape").splitlines()
    mounts = []
    for line in lines:
        fields = line.split(" ")
        try:
            fstype = fields[fields.index("-", 6) + 1]
        except (ValueError, IndexError):
            continue
        mounts.append((_unescape(fields[4]), fields[5], fstype))
    return mounts


def procfs_mounts_under(root: str) -> list[str]:
    """Mount points of procfs instances at or below ``root``, from this process's mountinfo."""
    prefix = root.rstrip("/") + "/"
    return [
        point
        for point, _, fstype in _mountinfo()
        if fstype == "proc" and (point == root or point.startswith(prefix))
    ]


def mounts_reaching(root: str) -> list[tuple[str, str]]:
    """The mounts a process chrooted at ``root`` can reach, with their own options: the one
    ``root`` is on and every one at or below it (each point once: the last mount there is
    the one a path finds)."""
    prefix = root.rstrip("/") + "/"
    below: dict[str, str] = {}
    holder = ("", "")
    for point, options, _ in _mountinfo():
        if point == root or point.startswith(prefix):
            below[point] = options
        elif root.startswith(point.rstrip("/") + "/") and len(point) >= len(holder[0]):
            holder = (point, options)
    return [holder, *below.items()] if holder[0] else list(below.items())


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes."""
    if "\\" not in field:
        return field
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field
