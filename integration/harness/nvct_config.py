"""nvct pointed at a simulated driver: where this venv's nvct commands are, and the config.toml
that names the driver's roots (with logs and caches beside it). Lives in the harness, not in
conftest, so harness modules and tests import it without importing the fixtures' module."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

NVCT_BIN = Path(sys.executable).parent


def write_nvct_config(path: Path, sim: Any, **extra: str) -> Path:
    """A config.toml pointing nvct at the simulated driver; logs and caches beside it."""
    lines = [
        f'driver-root = "{sim.driver_root}"',
        f'dev-root = "{sim.dev_root}"',
        f'proc-root = "{sim.proc_root}"',
        f'cache-dir = "{path.parent / "cache"}"',
    ]
    sections: dict[str, list[str]] = {
        "log": [f'file = "{path.parent / "nvct.log"}"', 'level = "debug"']
    }
    for key, value in extra.items():
        section, _, name = key.partition(".")
        sections.setdefault(section, []).append(f"{name} = {value}")
    text = "\n".join(lines) + "\n"
    for section, items in sections.items():
        text += f"[{section}]\n" + "\n".join(items) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
