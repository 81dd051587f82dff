"""``make demo``: nvct's main job on this machine.

On a host with an NVIDIA driver, run ``nvct-cli info`` and ``nvct-cli list`` against it. On a
host without one (development machines, CI), build the simulated driver (4 x H100, driver
550.54.15) under /tmp and run the same commands against it through nvct's root options.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def _real_driver() -> bool:
    return Path("/dev/nvidiactl").exists() and any(
        Path(d, "libnvidia-ml.so.1").exists()
        for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu")
    )


def main() -> int:
    """Run info + list; returns the first non-zero exit status."""
    cli = [str(Path(sys.executable).with_name("nvct-cli"))]
    if _real_driver():
        print("== NVIDIA driver found on this host")
        roots: list[str] = []
    else:
        from integration.simdriver import cached_driver, preset

        if os.geteuid() != 0:
            print("demo: the simulated driver needs root (it creates device nodes with mknod)")
            return 1
        cache = Path(tempfile.gettempdir()) / "nvct-demo"
        sim = cached_driver(preset("h100x4-550"), cache)
        print(f"== no NVIDIA driver here: using the simulated driver in {sim.driver_root}")
        roots = [
            "--driver-root",
            str(sim.driver_root),
            "--dev-root",
            str(sim.dev_root),
            "--proc-root",
            str(sim.proc_root),
        ]
    for args in (
        ["info"],
        ["list"],
        ["list", "--device", "1", "--capabilities", "graphics,display"],
    ):
        print(f"\n$ nvct-cli {' '.join(roots + args)}", flush=True)
        rc = subprocess.run([*cli, *roots, *args], check=False).returncode
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
