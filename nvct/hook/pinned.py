"""The container's process, pinned for the native hook's work in a shim daemon worker.

The native hook (``hook.c``) hands the OCI state to a worker of the shim daemon, a process
that did not start with the container: the state's pid is all it has, and a pid can name
another process once the first is reaped. So the worker opens a pidfd on it, then
``/proc/PID`` and what it needs from there (the mount namespace, the cgroup lines, the parent),
and checks through the pidfd that the process was alive all along: what it read is the
pinned process's, and it never uses the pid again. The process must also be a child of the
hook's own parent (runc and crun run prestart hooks from the process whose child the
container is), other than the hook, and in a mount namespace of its own: a state naming any
other process is refused.

Any doubt raises ``NotPinned`` before anything is touched: the worker then declines and the
hook runs the Python hook itself, which does the same work from the pid as before.
"""

from __future__ import annotations

import os
import signal

from nvct.base import linux


class NotPinned(Exception):
    """The container's process could not be pinned beyond doubt; nothing was done."""


def _parent(proc_dir: int) -> int:
    """The parent pid from ``stat`` in an open ``/proc/PID`` (the name may hold ``)``)."""
    fd = os.open("stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_dir)
    try:
        fields = os.read(fd, 4096).rsplit(b")", 1)[1].split()
    finally:
        os.close(fd)
    return int(fields[1])


def _read(proc_dir: int, name: str) -> str:
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_dir)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def single_threaded() -> bool:
    """Whether this process has one thread: setns(CLONE_NEWNS) needs it (and a namespace
    entered by one thread of many would leave the others where they were)."""
    return len(os.listdir("/proc/self/task")) == 1


class Pinned:
    """A container's init process, pinned: its mount namespace (an open descriptor) and its
    ``/proc/PID/cgroup`` lines, read while a pidfd showed it alive."""

    def __init__(self, pid: int, caller: int) -> None:
        """Pin ``pid``, the state's process, for a hook run by process ``caller``.

        Raises:
            NotPinned: the process is gone, is not the child of the caller's parent, or this
                worker cannot enter namespaces (not single-threaded).
        """
        if not single_threaded():
            raise NotPinned("the worker is not single-threaded")
        self.pid = pid
        self.pidfd = -1
        self.mnt_fd = -1
        proc_dir = -1
        try:
            if pid == caller:
                raise NotPinned(f"process {pid} is the hook itself")
            self.pidfd = os.pidfd_open(pid)
            proc_dir = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            caller_dir = os.open(f"/proc/{caller}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                runtime = _parent(caller_dir)
            finally:
                os.close(caller_dir)
            if runtime <= 1 or _parent(proc_dir) != runtime:
                raise NotPinned(f"process {pid} is not a child of the hook's runtime {runtime}")
            self.mnt_fd = os.open("ns/mnt", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_dir)
            ours = os.stat("/proc/self/ns/mnt")
            theirs = os.fstat(self.mnt_fd)
            if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino):
                raise NotPinned(f"process {pid} shares the host's mount namespace")
            self.cgroup_lines = _read(proc_dir, "cgroup").splitlines()
            # Alive now, so alive since the pidfd was opened: no other process had its pid.
            signal.pidfd_send_signal(self.pidfd, 0)
        except (OSError, ValueError, IndexError) as err:
            self.close()
            raise NotPinned(f"cannot pin process {pid}: {err}") from err
        except NotPinned:
            self.close()
            raise
        finally:
            if proc_dir >= 0:
                os.close(proc_dir)

    def enter_mount_namespace(self) -> None:
        """Join the pinned process's mount namespace (this worker is single-threaded)."""
        from nvct.base.errors import ApplyError

        try:
            linux.setns(self.mnt_fd, linux.CLONE_NEWNS)
        except OSError as err:
            raise ApplyError(
                f"cannot join the mount namespace of pid {self.pid}: {err.strerror}"
            ) from err

    def close(self) -> None:
        """Let go of the process and its namespace."""
        for fd in (self.pidfd, self.mnt_fd):
            if fd >= 0:
                os.close(fd)
        self.pidfd = self.mnt_fd = -1
