"""``make demo``: nvct's main job on this machine — a GPU in a container.

A container started by runc through ``nvct-runtime`` asks for one GPU
(``NVIDIA_VISIBLE_DEVICES``) and runs ``nvidia-smi -L``: it lists exactly that GPU. Then
``nvct-cli info``. On a host with an NVIDIA driver both use it; on one without (development
machines, CI) a simulated driver (4 x H100, driver 550.54.15) is built under /tmp and nvct is
pointed at it through its config's roots. Without root or runc the container is left out with
one line saying what it needs, and what can be shown still is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
ASKED = "1"  # the GPU the container asks for (its index)


def _real_driver() -> bool:
    return Path("/dev/nvidiactl").exists() and any(
        Path(d, "libnvidia-ml.so.1").exists()
        for d in (
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/local/nvidia/lib64",
        )
    )


def _config(work: Path) -> tuple[Path | None, str]:
    """nvct's config for the demo and what it points at; None: no driver can be had."""
    lines = [f'cache-dir = "{work / "cache"}"']
    if _real_driver():
        where = "this host's NVIDIA driver"
    elif os.geteuid() != 0:
        return None, ""
    else:
        from integration.simdriver import cached_driver, preset

        sim = cached_driver(preset("h100x4-550"), Path(tempfile.gettempdir()) / "nvct-demo")
        where = f"the simulated driver in {sim.driver_root} (this host has no NVIDIA driver)"
        lines += [
            f'driver-root = "{sim.driver_root}"',
            f'dev-root = "{sim.dev_root}"',
            f'proc-root = "{sim.proc_root}"',
        ]
    config = work / "config.toml"
    config.write_text("\n".join([*lines, "[log]", f'file = "{work / "nvct.log"}"', ""]))
    return config, where


def _missing_for_container() -> str | None:
    if os.geteuid() != 0:
        return "root (runc creates the container's namespaces and device nodes)"
    if shutil.which("runc") is None:
        return "runc (apt-get install runc)"
    if not (BIN / "nvct-runtime").exists():
        return f"nvct-runtime in {BIN} (make venv builds it)"
    from integration.harness.images import is_static_busybox

    if not is_static_busybox():
        return "a static busybox for the container's image (apt-get install busybox-static)"
    return None


def _container(config: Path, work: Path) -> int:
    from integration.harness.bundles import make_bundle
    from integration.harness.images import glibc_rootfs

    rootfs = glibc_rootfs(work / "rootfs")
    bundle = make_bundle(
        work / "bundle",
        rootfs,
        ["nvidia-smi", "-L"],
        [f"NVIDIA_VISIBLE_DEVICES={ASKED}", "NVIDIA_DRIVER_CAPABILITIES=utility"],
    )
    name = f"nvct-demo-{os.getpid()}"
    argv = [str(BIN / "nvct-runtime"), "run", "--bundle", str(bundle), name]
    print(f"\n$ NVIDIA_VISIBLE_DEVICES={ASKED} nvidia-smi -L  # a container, runc via nvct-runtime")
    env = {**os.environ, "NVCT_CONFIG": str(config)}
    start = time.monotonic()
    try:
        rc = subprocess.run(argv, env=env, timeout=60, check=False).returncode
    finally:
        subprocess.run(
            [str(BIN / "nvct-runtime"), "delete", "-f", name],
            env=env,
            capture_output=True,
            check=False,
        )
    print(f"(container exited {rc} after {time.monotonic() - start:.2f} s)")
    return rc


def main() -> int:
    """The container, then ``nvct-cli info``; returns the first non-zero exit status."""
    with tempfile.TemporaryDirectory(prefix="nvct-demo-") as tmp:
        work = Path(tmp)
        config, where = _config(work)
        if config is None:
            print(
                "demo: no NVIDIA driver here, and the simulated one needs root (it makes device "
                "nodes with mknod): run make demo as root"
            )
            print(f"\n$ nvct-cli --version\n{_cli_version()}")
            return 0
        print(f"== nvct on {where}")
        rc = 0
        missing = _missing_for_container()
        if missing is None:
            rc = _container(config, work)
        else:
            print(f"demo: the container is left out: it needs {missing}")
        print("\n$ nvct-cli info", flush=True)
        env = {**os.environ, "NVCT_CONFIG": str(config)}
        info = subprocess.run([str(BIN / "nvct-cli"), "info"], env=env, check=False).returncode
        return rc or info


def _cli_version() -> str:
    done = subprocess.run(
        [str(BIN / "nvct-cli"), "--version"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
