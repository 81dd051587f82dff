"""The bpf(2) commands a device-cgroup grant needs: load, query, fetch, attach.

Only ``nvct-hook`` on a cgroup v2 host calls these, so full ``ctypes`` (buffers with
addresses) is fine here; the shim's hot path never imports this module. Each ``union
bpf_attr`` member is packed as the kernel's UAPI lays it out; the kernel zero-fills what a
shorter attribute leaves out. Errors raise OSError with errno.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

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

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _bpf(cmd: int, attr: bytes) -> tuple[int, bytes]:
    """bpf(cmd, attr); the attribute as the kernel left it (queries write into it)."""
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        raise OSError(38, f"bpf(2) is not known on {platform.machine()}")
    buf = ctypes.create_string_buffer(attr, len(attr))
    rc = _libc.syscall(ctypes.c_long(number), ctypes.c_long(cmd), buf, ctypes.c_uint(len(attr)))
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf command {cmd}: {os.strerror(err)}")
    return int(rc), buf.raw


def load_device_program(insns: bytes, name: str = "nvct_devices") -> int:
    """Load a BPF_PROG_TYPE_CGROUP_DEVICE program; its fd. The verifier's log is in the error."""
    code = ctypes.create_string_buffer(insns, len(insns))
    license_ = ctypes.create_string_buffer(b"Apache-2.0")
    log = ctypes.create_string_buffer(_LOG_SIZE)
    attr = struct.pack(
        "<IIQQIIQII16sII",
        BPF_PROG_TYPE_CGROUP_DEVICE,
        len(insns) // 8,
        ctypes.addressof(code),
        ctypes.addressof(license_),
        1,  # log level: the verifier says why it refused
        _LOG_SIZE,
        ctypes.addressof(log),
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
    ids = (ctypes.c_uint32 * count)()
    attr = struct.pack(
        "<IIIIQI4x", cgroup_fd, BPF_CGROUP_DEVICE, 0, 0, ctypes.addressof(ids), count
    )
    _, out = _bpf(BPF_PROG_QUERY, attr)
    flags, prog_cnt = struct.unpack_from("<I", out, 12)[0], struct.unpack_from("<I", out, 24)[0]
    return [int(i) for i in ids[: min(prog_cnt, count)]], flags


def program_fd(prog_id: int) -> int:
    """An fd for the loaded program ``prog_id``."""
    return _bpf(BPF_PROG_GET_FD_BY_ID, struct.pack("<III", prog_id, 0, 0))[0]


def program_instructions(prog_fd: int) -> bytes:
    """The program's instructions as the kernel holds them after verification (xlated)."""
    info_len = 40  # struct bpf_prog_info up to xlated_prog_insns
    info = ctypes.create_string_buffer(info_len)
    _bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("<IIQ", prog_fd, info_len, ctypes.addressof(info)))
    size = struct.unpack_from("<I", info.raw, 20)[0]
    code = ctypes.create_string_buffer(max(size, 1))
    ask = bytearray(info_len)
    struct.pack_into("<IQ", ask, 20, size, 0)
    struct.pack_into("<Q", ask, 32, ctypes.addressof(code))
    info = ctypes.create_string_buffer(bytes(ask), info_len)
    _bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("<IIQ", prog_fd, info_len, ctypes.addressof(info)))
    return code.raw[:size]


def attach_device_program(cgroup_fd: int, prog_fd: int, flags: int, replace_fd: int = 0) -> None:
    """Attach (with BPF_F_REPLACE: atomically in place of ``replace_fd``)."""
    attr = struct.pack("<IIIII4x", cgroup_fd, prog_fd, BPF_CGROUP_DEVICE, flags, replace_fd)
    _bpf(BPF_PROG_ATTACH, attr)


def detach_device_program(cgroup_fd: int, prog_fd: int) -> None:
    """Detach one program (BPF_F_ALLOW_MULTI attachments are detached by program)."""
    attr = struct.pack("<IIIII4x", cgroup_fd, prog_fd, BPF_CGROUP_DEVICE, 0, 0)
    _bpf(BPF_PROG_DETACH, attr)
