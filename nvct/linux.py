"""Thin ctypes bindings for the Linux calls Python's os module lacks (3.10/3.11).

openat2(2) for in-root path resolution, mount(2), setns(2). Errors raise OSError with errno.
"""

from __future__ import annotations

import ctypes
import os
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long

SYS_OPENAT2 = 437  # same number on x86_64, aarch64 and ppc64le (post-4.20 syscall table)

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

CLONE_NEWNS = 0x00020000

_openat2_missing = False


def openat2(dirfd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
    """openat2(2). Raises OSError(ENOSYS) on kernels older than 5.6."""
    global _openat2_missing  # noqa: PLW0603 - remember ENOSYS for the process lifetime
    if _openat2_missing:
        raise OSError(38, "openat2 not supported")
    how = struct.pack("QQQ", flags | os.O_CLOEXEC, mode, resolve)
    buf = ctypes.create_string_buffer(how, len(how))
    fd = _syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dirfd),
        ctypes.c_char_p(os.fsencode(path)),
        buf,
        ctypes.c_size_t(len(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        if err == 38:
            _openat2_missing = True
        raise OSError(err, f"{os.strerror(err)}: {path}")
    return int(fd)


def mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    """mount(2) with no data argument."""
    rc = _libc.mount(
        None if source is None else os.fsencode(source),
        os.fsencode(target),
        None if fstype is None else os.fsencode(fstype),
        ctypes.c_ulong(flags),
        None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def setns(fd: int, nstype: int) -> None:
    """setns(2): join the namespace ``fd`` refers to."""
    if _libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")
