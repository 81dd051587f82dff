"""Driver binaries, IPC endpoints, GSP firmware and graphics configs under the driver root."""

from __future__ import annotations

import stat
from pathlib import Path

from nvct.host.components import (
    BINARIES,
    BINARY_DIRS,
    GRAPHICS_CONFIGS,
    IMEX_CONFIGS,
    IPC_FABRICMANAGER,
    IPC_MPS_DIR,
    IPC_PERSISTENCED,
)
from nvct.host.discover.rootpath import resolve_in_root
from nvct.host.inventory import DriverFile


def discover_binaries(
    driver_root: Path, nvml: Path | None = None
) -> tuple[tuple[DriverFile, ...], tuple[str, ...]]:
    """Each driver binary, first found in the usual bin dirs as an executable ELF file; and a
    warning for each wrapper script passed over.

    A driver installed under its own prefix (GKE and COS: ``/usr/local/nvidia/{bin,lib64}``)
    keeps its binaries in the ``bin`` beside the library directory of ``nvml``, and may put
    shell wrappers in ``/usr/bin`` that exec them by their host path: such a wrapper mounted
    into a container names a path the container does not have, so only ELF files count.
    """
    directories = [f"/{d}" for d in BINARY_DIRS]
    if nvml is not None and nvml.is_relative_to(driver_root):
        beside = "/" + str(nvml.parent.parent.relative_to(driver_root) / "bin")
        if beside not in directories:
            directories.append(beside)
    out: list[DriverFile] = []
    warnings: list[str] = []
    for cap, names in BINARIES.items():
        for name in names:
            for directory in directories:
                found = resolve_in_root(driver_root, f"{directory}/{name}")
                if found is None or not _is_executable(found):
                    continue
                if not _is_elf(found):
                    warnings.append(f"{found} is not an ELF executable (a wrapper?): skipped")
                    continue
                out.append(DriverFile(host_path=str(found), kind="bin", capability=cap, name=name))
                break
    return tuple(out), tuple(warnings)


def discover_ipcs(driver_root: Path) -> tuple[DriverFile, ...]:
    """Sockets of nvidia-persistenced / fabricmanager and the MPS pipe directory."""
    out = []
    for path, cap, name, want in (
        (IPC_PERSISTENCED, "utility", "persistenced", stat.S_ISSOCK),
        (IPC_FABRICMANAGER, "utility", "fabricmanager", stat.S_ISSOCK),
        (IPC_MPS_DIR, "compute", "mps", stat.S_ISDIR),
    ):
        found = resolve_in_root(driver_root, path)
        if found is not None and want(found.stat().st_mode):
            out.append(DriverFile(host_path=str(found), kind="ipc", capability=cap, name=name))
    return tuple(out)


def discover_firmware(driver_root: Path, version: str) -> tuple[DriverFile, ...]:
    """GSP firmware images of this driver version."""
    directory = resolve_in_root(driver_root, f"/lib/firmware/nvidia/{version}")
    if directory is None or not directory.is_dir():
        return ()
    return tuple(
        DriverFile(host_path=str(p), kind="firmware", capability="utility", name="gsp")
        for p in sorted(directory.glob("gsp*.bin"))
        if p.is_file()
    )


def discover_graphics_configs(driver_root: Path) -> tuple[DriverFile, ...]:
    """ICD and platform JSON files that graphics loaders look up, and the IMEX config."""
    out = []
    for cap, names in (("graphics", GRAPHICS_CONFIGS), ("imex", IMEX_CONFIGS)):
        for rel in names:
            found = resolve_in_root(driver_root, "/" + rel)
            if found is not None and found.is_file():
                out.append(
                    DriverFile(host_path=str(found), kind="config", capability=cap, name=rel)
                )
    return tuple(out)


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _is_executable(path: Path) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o111)
