"""nvct from its wheel in a fresh venv (the pip install path), for tests and the bench."""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIP = [sys.executable, "-m", "pip"]


def install_wheel(wheel: Path, venv: Path) -> Path:
    """A fresh venv on the system's python3 holding ``wheel`` (``--no-deps``: its libraries
    come from this venv through a ``.pth``, as pip would have fetched them); its bin dir."""
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin/python3"
    subprocess.run(
        [*PIP, "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
    )
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = [p for p in site.getsitepackages() if "site-packages" in p]
    Path(purelib, "nvct-deps.pth").write_text("\n".join(deps) + "\n")
    return venv / "bin"
