"""The bpf(2) commands a device-cgroup grant needs: load, query, fetch, attach.

Only ``nvct-hook`` on a cgroup v2 host calls these: in a daemon worker (preloaded), or as the
Python hook where no daemon answers, a fresh process per GPU container. So, as
``nvct.base.linux``, they are built on ``_ctypes``, the C core of ctypes, with the kernel's
buffers as ``char`` arrays: ``ctypes`` itself and ``platform`` (for the machine's name) cost
that process ~10 ms of imports (``re``, ``enum``, ``collections``). Each ``union bpf_attr``
member is packed as the kernel's UAPI lays it out; the kernel zero-fills what a shorter
attribute leaves out. Errors raise OSError with errno.
"""

from __future__ import annotations

import _ctypes
import os
from _struct import pack, pack_into, unpack_from

from nvct.base.linux import CLong, libc_function

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

# bpf(2) syscall numbers per architecture (x86_64, aarch64, ppc64le).
_SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "ppc64": 361}

BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_DETACH = 9
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_PROG_QUERY = 16

BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6

BPF_F_ALLOW_OVERRIDE = 1
BPF_F_ALLOW_MULTI = 2
BPF_F_REPLACE = 4

_LOG_SIZE = 1 << 16


class _Char(_ctypes._SimpleCData):  # type: ignore[type-arg]  # as ctypes declares c_char
    _type_ = "c"


# long syscall(long number, long cmd, union bpf_attr *attr, unsigned int size): the pointer
# passed as the buffer's address.
_syscall = libc_function("syscall", CLong, CLong, CLong, CLong)


def _buffer(data: bytes | int) -> Any:
    """A writable C buffer: a copy of ``data``, or ``data`` zero bytes."""
    size = data if isinstance(data, int) else len(data)
    buf: Any = (_Char * max(size, 1))()  # typeshed knows .raw only on ctypes.c_char arrays
    if not isinstance(data, int):
        buf.raw = data
    return buf


def _bpf(cmd: int, attr: bytes) -> tuple[int, bytes]:
    """bpf(cmd, attr); the attribute as the kernel left it (queries write into it)."""
    machine = os.uname().machine
    number = _SYS_BPF.get(machine)
    if number is None:
        raise OSError(38, f"bpf(2) is not known on {machine}")
    buf = _buffer(attr)
    rc = _syscall(number, cmd, _ctypes.addressof(buf), len(attr))
    if rc < 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"bpf command {cmd}: {os.strerror(err)}")
    return int(rc), bytes(buf.raw[: len(attr)])


def load_device_program(insns: bytes, name: str = "nvct_devices") -> int:
    """Load a BPF_PROG_TYPE_CGROUP_DEVICE program; its fd. The verifier's log is in the error."""
    code = _buffer(insns)
    license_ = _buffer(b"Apache-2.0\0")
    log = _buffer(_LOG_SIZE)
    attr = pack(
        "<IIQQIIQII16sII",
        BPF_PROG_TYPE_CGROUP_DEVICE,
        len(insns) // 8,
        _ctypes.addressof(code),
        _ctypes.addressof(license_),
        1,  # log level: the verifier says why it refused
        _LOG_SIZE,
        _ctypes.addressof(log),
        0,
        0,
        name.encode()[:15],
        0,
        BPF_CGROUP_DEVICE,
    )
    try:
        return _bpf(BPF_PROG_LOAD, attr)[0]
    except OSError as err:
        verifier = log.value.decode(errors="replace").strip().splitlines()
        last = verifier[-1] if verifier else ""
        raise OSError(err.errno, f"{err.strerror} {last}".strip()) from None


def query_device_programs(cgroup_fd: int) -> tuple[list[int], int]:
    """The ids of the device programs attached to this cgroup itself, and their attach flags."""
    count = 64
    ids = _buffer(4 * count)
    attr = pack("<IIIIQI4x", cgroup_fd, BPF_CGROUP_DEVICE, 0, 0, _ctypes.addressof(ids), count)
    _, out = _bpf(BPF_PROG_QUERY, attr)
    flags, prog_cnt = unpack_from("<I", out, 12)[0], unpack_from("<I", out, 24)[0]
    raw = bytes(ids.raw)
    return [unpack_from("<I", raw, 4 * i)[0] for i in range(min(prog_cnt, count))], flags


def program_fd(prog_id: int) -> int:
    """An fd for the loaded program ``prog_id``."""
    return _bpf(BPF_PROG_GET_FD_BY_ID, pack("<III", prog_id, 0, 0))[0]


def program_instructions(prog_fd: int) -> bytes:
    """The program's instructions as the kernel holds them after verification (xlated)."""
    info_len = 40  # struct bpf_prog_info up to xlated_prog_insns
    info = _buffer(info_len)
    _bpf(BPF_OBJ_GET_INFO_BY_FD, pack("<IIQ", prog_fd, info_len, _ctypes.addressof(info)))
    size = unpack_from("<I", bytes(info.raw), 20)[0]
    code = _buffer(size)
    ask = bytearray(info_len)
    pack_into("<IQ", ask, 20, size, 0)
    pack_into("<Q", ask, 32, _ctypes.addressof(code))
    info = _buffer(bytes(ask))
    _bpf(BPF_OBJ_GET_INFO_BY_FD, pack("<IIQ", prog_fd, info_len, _ctypes.addressof(info)))
    return bytes(code.raw[:size])


def attach_device_program(cgroup_fd: int, prog_fd: int, flags: int, replace_fd: int = 0) -> None:
    """Attach (with BPF_F_REPLACE: atomically in place of ``replace_fd``)."""
    attr = pack("<IIIII4x", cgroup_fd, prog_fd, BPF_CGROUP_DEVICE, flags, replace_fd)
    _bpf(BPF_PROG_ATTACH, attr)


def detach_device_program(cgroup_fd: int, prog_fd: int) -> None:
    """Detach one program (BPF_F_ALLOW_MULTI attachments are detached by program)."""
    attr = pack("<IIIII4x", cgroup_fd, prog_fd, BPF_CGROUP_DEVICE, 0, 0)
    _bpf(BPF_PROG_DETACH, attr)
