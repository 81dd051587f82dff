"""Podman as a real CDI engine for the tests: private storage, the glibc rootfs imported,
runc as its runtime (crun refuses the hybrid cgroup layout of some CI hosts).

podman 4.3 reads CDI specs only from /etc/cdi and /var/run/cdi, so a test's spec goes to
/var/run/cdi under a name unique to it and is removed afterwards (``spec_in_cdi_dir``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from integration.harness.images import rootfs_tar

CDI_DIR = Path("/var/run/cdi")
TAG = "localhost/nvct-glibc:cdi"
RUN_FLAGS = ("--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")


@contextmanager
def private_podman(
    work: Path, glibc_rootfs_dir: Path, storage_driver: str = "vfs"
) -> Iterator[list[str]]:
    """podman's command line with storage under ``work`` and the glibc image as ``TAG``
    (``vfs`` by default: a plain copy per container, nothing mounted that a test could leak;
    ``overlay`` is podman's own default, what users run)."""
    runroot = Path(tempfile.mkdtemp(prefix="nvct-pm-"))  # podman: at most 50 characters
    base = [
        "podman",
        "--root", str(work / "storage"),
        "--runroot", str(runroot),
        "--storage-driver", storage_driver,
        "--runtime", "runc",
        "--cgroup-manager", "cgroupfs",
        "--events-backend", "none",
    ]  # fmt: skip
    try:
        tar = work / "rootfs.tar"
        tar.write_bytes(rootfs_tar(glibc_rootfs_dir))
        done = subprocess.run(
            [*base, "import", str(tar), TAG],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        yield base
    finally:
        subprocess.run([*base, "rm", "-af"], capture_output=True, timeout=120, check=False)
        subprocess.run([*base, "rmi", "-af"], capture_output=True, timeout=120, check=False)
        shutil.rmtree(runroot, ignore_errors=True)


def podman_run(
    base: list[str], devices: list[str], script: str
) -> subprocess.CompletedProcess[str]:
    """``podman run --rm`` of ``script`` in the glibc image with CDI ``devices``."""
    flags = [arg for device in devices for arg in ("--device", device)]
    return subprocess.run(
        [*base, "run", "--rm", *RUN_FLAGS, *flags, TAG, "/bin/sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@contextmanager
def spec_in_cdi_dir(suffix: str = ".json") -> Iterator[Path]:
    """A path in /var/run/cdi unique to this test; the file (and a backup beside it) is
    removed afterwards."""
    path = CDI_DIR / f"nvct-test-{uuid.uuid4().hex[:12]}{suffix}"
    CDI_DIR.mkdir(parents=True, exist_ok=True)  # /var/run is a tmpfs: gone after a reboot
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
        path.with_name(path.name + ".nvct-backup").unlink(missing_ok=True)
