"""Per-architecture constants: ld.so.cache flags, ELF machine, Debian multiarch dirs."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Arch:
    """How one CPU architecture's libraries are named and flagged."""

    name: str
    ldcache_flags64: int
    elf_machine64: int
    multiarch64: str
    ldcache_flags32: int | None = None
    elf_machine32: int | None = None
    multiarch32: str | None = None


ARCHES: dict[str, Arch] = {
    "x86_64": Arch("x86_64", 0x0300, 62, "x86_64-linux-gnu", 0x0000, 3, "i386-linux-gnu"),
    "aarch64": Arch("aarch64", 0x0A00, 183, "aarch64-linux-gnu"),
    "ppc64le": Arch("ppc64le", 0x0500, 21, "powerpc64le-linux-gnu"),
}


def host_arch() -> Arch:
    """The running machine's Arch (x86_64 when unknown, with a clear later mismatch)."""
    return ARCHES.get(os.uname().machine, ARCHES["x86_64"])
