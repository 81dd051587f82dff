"""Recorded inventories of the simulated drivers, so the pure core is tested without root.

Discovering a simulated driver (integration/simdriver: gcc-built libraries, mknod'ed device
nodes) needs root and gcc and takes seconds; what it yields is a plain value
(``Inventory.to_dict``). It is recorded once per preset in ``tests/fixtures/<preset>.json``, with
the driver root written as ``@ROOT@``. ``recorded_driver`` puts it back under a directory of the
caller's choosing, where it lays out the driver's files as empty files (so the steps that stat
or hard-link libraries work) and no device nodes. ``tests/host/test_inventory_fixtures.py`` (root)
checks that discovery still yields the recorded value.

Regenerate after changing discovery or the simulated driver (as root, with gcc)::

    python -m tests.inventories --write
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from integration.simdriver import LIB32, SimDriver, SimDriverSpec, preset
from nvct.host.fingerprint import inventory_fingerprint
from nvct.host.inventory import Inventory
from nvct.host.load import write_inventory

PRESETS = (
    "h100x4-550",
    "a100x8-570-mig",
    "h100pcie-x8-nvlink-pairs",
    "mixed-ecc-x3",
    "h100x8-nvswitch",
)
FIXTURES = Path(__file__).resolve().parent / "fixtures"
ROOT = "@ROOT@"
REGENERATE = "python -m tests.inventories --write (as root, with gcc)"


def fixture_path(name: str) -> Path:
    return FIXTURES / f"{name}.json"


def _swap(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_swap(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _swap(v, old, new) for k, v in value.items()}
    return value


def record(inventory: Inventory, driver_root: Path) -> dict[str, Any]:
    """``inventory`` as a fixture: JSON-ready, its driver root written as ``@ROOT@``."""
    data = json.loads(json.dumps(inventory.to_dict()))  # tuples -> lists, as the file holds them
    recorded: dict[str, Any] = _swap(data, str(driver_root), ROOT)
    outside = [
        f["host_path"] for f in recorded["files"] if not f["host_path"].startswith(ROOT + "/")
    ]
    if outside:
        raise ValueError(f"host paths outside the driver root {driver_root}: {outside[:3]}")
    return recorded


def discover(sim: SimDriver) -> dict[str, Any]:
    """What discovery yields for a built simulated driver, recorded (needs root)."""
    from nvct.host.discover import discover_inventory

    if sim.dev_root != sim.driver_root or sim.proc_root != sim.driver_root / "proc":
        raise ValueError(f"{sim.driver_root}: recorded drivers keep dev and proc under the root")
    return record(discover_inventory(sim.driver_root, sim.dev_root, sim.proc_root), sim.driver_root)


def read_fixture(name: str) -> dict[str, Any]:
    path = fixture_path(name)
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing: regenerate it: {REGENERATE}") from None
    return data


def without_lib32(data: dict[str, Any]) -> dict[str, Any]:
    """The recording as a machine without a 32-bit toolchain (gcc-multilib) builds it."""
    return {**data, "files": [f for f in data["files"] if f["kind"] != "lib32"]}


def difference(expected: dict[str, Any], found: dict[str, Any], limit: int = 60) -> str:
    """A unified diff of two recordings, at most ``limit`` lines."""
    lines = difflib.unified_diff(
        json.dumps(expected, indent=1).splitlines(),
        json.dumps(found, indent=1).splitlines(),
        "recorded",
        "discovered",
        lineterm="",
    )
    return "\n".join(list(lines)[:limit])


@dataclass(frozen=True)
class RecordedDriver:
    """A simulated driver as its recorded inventory: what tests read of a ``SimDriver`` (spec,
    roots, lib32_dir) and the inventory discovery would yield, under ``driver_root``."""

    spec: SimDriverSpec
    driver_root: Path
    dev_root: Path
    proc_root: Path
    lib32_dir: Path | None
    inventory: Inventory

    def seed_cache(self, cache_dir: Path) -> None:
        """Store the inventory in ``cache_dir`` under these roots' fingerprint, as a first
        ``load_inventory`` would: a CLI run with these roots reads it instead of discovering."""
        key = inventory_fingerprint(self.driver_root, self.dev_root, self.proc_root)
        cache_dir.mkdir(parents=True, exist_ok=True)
        write_inventory(cache_dir, key, self.inventory)


def recorded_driver(name: str, root: Path) -> RecordedDriver:
    """Preset ``name``'s recorded inventory with its driver root at ``root`` (a directory of
    the caller's, made here), where the driver's files are laid out as empty files."""
    data = _swap(read_fixture(name), ROOT, str(root))
    inventory = Inventory.from_dict(data)
    for driver_file in inventory.files:
        if driver_file.kind == "ipc":
            continue  # sockets and the MPS directory: nothing reads them before a container
        path = Path(driver_file.host_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    lib32 = root / LIB32
    return RecordedDriver(
        spec=preset(name),
        driver_root=root,
        dev_root=root,
        proc_root=root / "proc",
        lib32_dir=lib32 if inventory.files_of("lib32") else None,
        inventory=inventory,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.inventories",
        description="Build each simulated driver, discover it, and compare the result with (or "
        "with --write, store it as) tests/fixtures/<preset>.json. Needs root and gcc.",
    )
    parser.add_argument("--write", action="store_true", help="rewrite the fixtures")
    args = parser.parse_args(argv)
    from integration.simdriver import cached_driver
    from tests.conftest import SIM_CACHE

    if os.geteuid() != 0:
        print("needs root: the simulated driver creates device nodes with mknod", file=sys.stderr)
        return 2
    stale = 0
    for name in PRESETS:
        sim = cached_driver(preset(name), SIM_CACHE)
        if sim.lib32_dir is None:
            print(f"{name}: recordings need 32-bit libraries: apt-get install gcc-multilib")
            return 2
        found = discover(sim)
        path = fixture_path(name)
        if args.write:
            FIXTURES.mkdir(exist_ok=True)
            path.write_text(json.dumps(found, indent=1) + "\n")
            print(f"{path}: written")
        elif path.exists() and json.loads(path.read_text()) == found:
            print(f"{path}: current")
        else:
            stale += 1
            print(f"{path}: stale; regenerate: {REGENERATE}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
