"""Reading CDI specs back from the spec directories (``nvct-cli cdi list``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nvct.base.defaults import CDI_SPEC_DIRS
from nvct.cdi.specs import device_names, load_spec_file, spec_files  # the runtime's loader

SPEC_DIRS = tuple(Path(d) for d in CDI_SPEC_DIRS)


@dataclass(frozen=True, slots=True)
class Listing:
    """Device names found, with the file each came from, and files that could not be read."""

    devices: tuple[tuple[str, Path], ...]
    problems: tuple[str, ...]


def list_devices(dirs: Sequence[Path] = SPEC_DIRS) -> Listing:
    """Every qualified device name in the spec files of ``dirs`` (missing dirs are skipped)."""
    found: list[tuple[str, Path]] = []
    problems: list[str] = []
    for directory in dirs:
        try:
            files = spec_files(directory)
        except OSError as err:
            problems.append(f"cannot list {directory}: {err.strerror}")
            continue
        for path in files:
            try:
                spec = load_spec_file(path)
            except ValueError as err:
                problems.append(str(err))
                continue
            found += [(name, path) for name in device_names(spec)]
    return Listing(tuple(found), tuple(problems))
