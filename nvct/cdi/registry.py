"""Reading CDI specs back from the spec directories (``nvct-cli cdi list``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvct.cdi.spec import device_names

SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
SUFFIXES = (".json", ".yaml", ".yml")
MAX_SPEC_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Listing:
    """Device names found, with the file each came from, and files that could not be read."""

    devices: tuple[tuple[str, Path], ...]
    problems: tuple[str, ...]


def load_spec_file(path: Path) -> dict[str, Any]:
    """Parse one spec file (YAML needs PyYAML, imported only here).

    Raises:
        ValueError: unreadable, not JSON/YAML, or not a mapping; the message says which.
    """
    try:
        raw = path.read_bytes()[: MAX_SPEC_BYTES + 1]
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from err
    if len(raw) > MAX_SPEC_BYTES:
        raise ValueError(f"{path} is larger than {MAX_SPEC_BYTES} bytes")
    if path.suffix == ".json":
        try:
            data = json.loads(raw)
        except ValueError as err:
            raise ValueError(f"{path} is not valid JSON ({err})") from err
    else:
        try:
            import yaml
        except ImportError as err:
            raise ValueError(
                f"{path} is YAML and PyYAML is not installed (pip install PyYAML)"
            ) from err
        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise ValueError(f"{path} is not valid YAML ({' '.join(str(err).split())})") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a CDI spec (not a mapping)")
    return data


def list_devices(dirs: Sequence[Path] = SPEC_DIRS) -> Listing:
    """Every qualified device name in the spec files of ``dirs`` (missing dirs are skipped)."""
    found: list[tuple[str, Path]] = []
    problems: list[str] = []
    for directory in dirs:
        try:
            files = sorted(p for p in directory.iterdir() if p.suffix in SUFFIXES and p.is_file())
        except FileNotFoundError:
            continue
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
