"""Bindings for the Linux calls Python's os module lacks (3.10/3.11).

openat2(2) for in-root path resolution, mount(2), umount2(2), setns(2), unshare(2),
madvise(2), prctl(2), capset(2). Errors raise OSError with errno.

They are built on ``_ctypes``, the C core of ctypes, rather than on ``ctypes``: the shim
calls them on every GPU container start, and ``import ctypes`` (its ~80 type classes,
``struct``, platform probing) costs ~5 ms there, a quarter of the shim's own time. The three
C types needed are declared here exactly as ctypes declares them.
"""

from __future__ import annotations

import _ctypes
import os
import sys


# Declared as ctypes declares c_int, c_long, c_ulong and c_char_p (typeshed types the base
# as generic, which it is not at run time).
class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "i"


class CLong(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "l"


class _ULong(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "L"


class _CharP(_ctypes._SimpleCData):  # type: ignore[type-arg]  # char *: bytes, or None for NULL
    _type_ = "z"


class _LibcFunction(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


def libc_function(name: str, *argtypes: type) -> _LibcFunction:
    """libc's ``name``, called with ``argtypes`` (errno kept for ``_ctypes.get_errno``)."""
    func = _LibcFunction(_ctypes.dlsym(_LIBC, name))
    func.argtypes = argtypes
    return func


_LIBC = _ctypes.dlopen(None, _ctypes.RTLD_LOCAL)  # type: ignore[arg-type]  # the program itself
# long syscall(long number, ...): openat2 has no libc wrapper before glibc 2.36.
_syscall_openat2 = libc_function("syscall", CLong, CLong, _CharP, _CharP, CLong)
_mount = libc_function("mount", _CharP, _CharP, _CharP, _ULong, _CharP)
_umount2 = libc_function("umount2", _CharP, _Int)
_setns = libc_function("setns", _Int, _Int)
_unshare = libc_function("unshare", _Int)
_madvise = libc_function("madvise", _ULong, _ULong, _Int)
_prctl = libc_function("prctl", _Int, _ULong, _ULong, _ULong, _ULong)
_capset = libc_function("capset", _CharP, _CharP)

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

MNT_DETACH = 0x2
UMOUNT_NOFOLLOW = 0x8

CLONE_NEWNS = 0x00020000

MADV_POPULATE_WRITE = 23  # Linux 5.14+

PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
_CAPABILITY_VERSION_3 = 0x20080522

_openat2_missing = False


def _check(rc: int, what: str) -> int:
    if rc < 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def openat2(dirfd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
    """openat2(2). Raises OSError(ENOSYS) on kernels older than 5.6."""
    global _openat2_missing  # noqa: PLW0603 - remember ENOSYS for the process lifetime
    if _openat2_missing:
        raise OSError(38, "openat2 not supported")
    # struct open_how {u64 flags; u64 mode; u64 resolve}; the kernel only reads it.
    how = b"".join(v.to_bytes(8, sys.byteorder) for v in (flags | os.O_CLOEXEC, mode, resolve))
    fd = _syscall_openat2(SYS_OPENAT2, dirfd, os.fsencode(path), how, len(how))
    if fd < 0:
        err = _ctypes.get_errno()
        if err == 38:
            _openat2_missing = True
        raise OSError(err, f"{os.strerror(err)}: {path}")
    return int(fd)


def mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    """mount(2) with no data argument."""
    rc = _mount(
        None if source is None else os.fsencode(source),
        os.fsencode(target),
        None if fstype is None else os.fsencode(fstype),
        flags,
        None,
    )
    _check(rc, f"mount {source} on {target}")


def umount2(target: str, flags: int) -> None:
    """umount2(2)."""
    _check(_umount2(os.fsencode(target), flags), f"umount {target}")


def setns(fd: int, nstype: int) -> None:
    """setns(2): join the namespace ``fd`` refers to."""
    _check(_setns(fd, nstype), "setns")


def unshare(flags: int) -> None:
    """unshare(2): leave the caller's namespaces of the ``flags`` kinds for new copies."""
    _check(_unshare(flags), "unshare")


def madvise(start: int, length: int, advice: int) -> None:
    """madvise(2) on ``length`` bytes at address ``start``."""
    _check(_madvise(start, length, advice), "madvise")


def prctl(option: int, arg: int = 0) -> None:
    """prctl(2) with one argument (the others zero)."""
    _check(_prctl(option, arg, 0, 0, 0), f"prctl {option}")


def capset(effective: int, permitted: int, inheritable: int) -> None:
    """capset(2) of this thread's three capability sets, as 64-bit masks."""
    header = b"".join(v.to_bytes(4, sys.byteorder) for v in (_CAPABILITY_VERSION_3, 0))
    data = b"".join(
        (mask >> shift & 0xFFFFFFFF).to_bytes(4, sys.byteorder)
        for shift in (0, 32)
        for mask in (effective, permitted, inheritable)
    )
    _check(_capset(header, data), "capset")
