"""ELF facts the driver-library selector needs, read with pyelftools.

Imported only during discovery (whose result is cached), never on the hook's hot path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EM_386 = 3
EM_X86_64 = 62
EM_AARCH64 = 183
EM_ARM = 40
EM_PPC64 = 21


@dataclass(frozen=True, slots=True)
class ElfInfo:
    """The few ELF header and dynamic-section fields nvct looks at."""

    elf_class: int  # 32 or 64
    machine: int
    soname: str
    needed: tuple[str, ...]
    abi_tag: tuple[str, ...] | None  # (os, "major.minor.patch") from .note.ABI-tag


def read_elf(path: Path) -> ElfInfo | None:
    """ELF facts of a file, or None when it is not a readable ELF object."""
    from elftools.common.exceptions import ELFError  # heavy, lazy
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import NoteSection

    try:
        with path.open("rb") as stream:
            elf = ELFFile(stream)
            soname = ""
            needed: list[str] = []
            abi: tuple[str, ...] | None = None
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags():
                        if tag.entry.d_tag == "DT_SONAME":
                            soname = str(tag.soname)  # type: ignore[attr-defined]
                        elif tag.entry.d_tag == "DT_NEEDED":
                            needed.append(str(tag.needed))  # type: ignore[attr-defined]
                elif isinstance(section, NoteSection) and section.name == ".note.ABI-tag":
                    for note in section.iter_notes():
                        if note["n_type"] == "NT_GNU_ABI_TAG":
                            desc = note["n_desc"]
                            abi = (
                                str(desc["abi_os"]),
                                f"{desc['abi_major']}.{desc['abi_minor']}.{desc['abi_tiny']}",
                            )
            return ElfInfo(
                elf_class=int(elf.elfclass),
                machine=_machine_number(str(elf.header["e_machine"])),
                soname=soname,
                needed=tuple(needed),
                abi_tag=abi,
            )
    except (OSError, ELFError, ValueError, KeyError):
        return None


_MACHINES = {
    "EM_386": EM_386,
    "EM_X86_64": EM_X86_64,
    "EM_AARCH64": EM_AARCH64,
    "EM_ARM": EM_ARM,
    "EM_PPC64": EM_PPC64,
}


def _machine_number(name: str) -> int:
    return _MACHINES.get(name, -1)
