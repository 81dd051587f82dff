"""eBPF device-cgroup programs (BPF_PROG_TYPE_CGROUP_DEVICE), assembled by hand.

On cgroup v2 a container's device access is decided by the programs attached to its cgroup
(runc attaches one with BPF_F_ALLOW_MULTI; systemd may attach another): each must return 1 for
an access to pass. Granting a device therefore means replacing each program with one that
allows the device first and otherwise runs the old program unchanged, as runc does on
``update`` and NVIDIA's toolkit does for ``--gpus`` (nvcgo ``PrependDeviceFilter``).

The program's context is ``struct bpf_cgroup_dev_ctx {u32 access_type; u32 major; u32 minor}``
with the device type in the low 16 bits of ``access_type`` (2 = char, 1 = block) and the access
(1 mknod, 2 read, 4 write) in the high 16. The prepended part reads the context into r2, r4
and r5 and never writes r1 (the context pointer), so the old program finds it as the kernel
left it; granting read, write and mknod needs no check of the access bits.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Iterable

INSN_SIZE = 8
DEVCG_DEV_CHAR = 2

# Opcodes (class | size/source | operation) of the instructions used here.
_LDX_W = 0x61  # BPF_LDX | BPF_MEM | BPF_W: dst = *(u32 *)(src + off)
_AND32_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
_MOV32_K = 0xB4  # BPF_ALU | BPF_MOV | BPF_K
_JNE_K = 0x55  # BPF_JMP | BPF_JNE | BPF_K
_EXIT = 0x95  # BPF_JMP | BPF_EXIT
# What a program read back from the kernel must not hold to be loaded again as it is:
# 64-bit immediates (map pointers are rewritten in the dump) and helper or function calls.
_LD_IMM64 = 0x18
_CALL = 0x85


def insn(op: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One ``struct bpf_insn`` (little-endian: code, dst|src<<4, s16 off, s32 imm)."""
    return struct.pack("<BBhi", op, (src << 4) | dst, off, imm)


def _header() -> bytes:
    return b"".join(
        (
            insn(_LDX_W, 2, 1, 0),  # r2 = access_type
            insn(_AND32_K, 2, imm=0xFFFF),  # r2 = device type
            insn(_LDX_W, 4, 1, 4),  # r4 = major
            insn(_LDX_W, 5, 1, 8),  # r5 = minor
        )
    )


def _allow_char(major: int, minor: int) -> bytes:
    """Return 1 for char ``major:minor``; else fall through past these five instructions."""
    return b"".join(
        (
            insn(_JNE_K, 2, off=4, imm=DEVCG_DEV_CHAR),
            insn(_JNE_K, 4, off=3, imm=major),
            insn(_JNE_K, 5, off=2, imm=minor),
            insn(_MOV32_K, 0, imm=1),
            insn(_EXIT),
        )
    )


def allow_rules(devices: Iterable[tuple[int, int]]) -> bytes:
    """Instructions that return 1 for each char ``(major, minor)`` and fall through otherwise."""
    rules = b"".join(_allow_char(major, minor) for major, minor in sorted(set(devices)))
    return _header() + rules if rules else b""


def allow_only(devices: Iterable[tuple[int, int]]) -> bytes:
    """A whole program: the char devices given, nothing else (runc's shape, deny by default)."""
    return allow_rules(devices) + insn(_MOV32_K, 0, imm=0) + insn(_EXIT)


def prepend_allow(devices: Iterable[tuple[int, int]], old: bytes) -> bytes:
    """``old`` with the devices allowed before it runs.

    Raises:
        ValueError: ``old`` is not whole instructions, or holds an instruction that cannot be
            loaded again from its kernel dump (a 64-bit immediate or a call).
    """
    if not old or len(old) % INSN_SIZE:
        raise ValueError(f"a device program of {len(old)} bytes is not whole instructions")
    for at in range(0, len(old), INSN_SIZE):
        if old[at] in (_LD_IMM64, _CALL):
            raise ValueError(
                f"the attached device program uses opcode {old[at]:#04x} at instruction "
                f"{at // INSN_SIZE}, which cannot be reloaded from its kernel dump"
            )
    return allow_rules(devices) + old
