"""The host driver's nvidia-smi, run for a claim's GPU settings (time-slice, compute mode).

NVIDIA's DRA driver sets both with nvidia-smi, not NVML (NVML's setters need the same
privilege and nvidia-smi is what an administrator reads back); nvct runs the driver's own
binary under the driver root with its libraries, never an image's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nvct.base.errors import NvctError

TIMEOUT_S = 30.0  # nvidia-smi initialises NVML: seconds on a large node without persistence
PRIVILEGE = (
    "give nvct-dra-plugin CAP_SYS_ADMIN (the chart's dra.sharing=true): the driver takes GPU "
    "settings from its administrator only"
)


class SmiError(NvctError):
    """nvidia-smi is missing, or refused or failed a setting."""


def run_smi(program: tuple[Path, str] | str, args: list[str], *, what: str, instead: str) -> str:
    """nvidia-smi's output for ``args``; ``program``: the binary and the LD_LIBRARY_PATH it
    needs, or the one line saying why there is none.

    Raises:
        SmiError: no nvidia-smi (``what`` names the setting), or it failed; the hint names
            what to install or the privilege it needs, or ``instead`` (what the claim can ask
            for that needs no setting).
    """
    if isinstance(program, str):
        raise SmiError(
            f"{what}: {program}", hint=f"install the driver's nvidia-smi on the node, or {instead}"
        )
    binary, library_path = program
    env = dict(os.environ)
    if library_path:
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, (library_path, env.get("LD_LIBRARY_PATH"))))
    argv = [str(binary), *args]
    try:
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SmiError(f"{' '.join(argv)}: {err}") from err
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split()) or f"exit {done.returncode}"
        raise SmiError(
            f"{' '.join(argv)} failed: {said}",
            hint=f"{PRIVILEGE}; or {instead}",
        )
    return done.stdout
