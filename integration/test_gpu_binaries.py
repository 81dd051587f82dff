"""The driver's binaries as links into the library directory (``inject.binaries = "links"``),
in real runc containers, through the shim and through the --gpus hook: the container runs
the host's nvidia-smi with no mount of its own at /usr/bin/nvidia-smi, and an image that
ships its own file there still runs the host's, bound over it, its file left as it was."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from integration.harness.bundles import BundleFactory
from integration.test_gpu_runc import run_through, smi_uuids

pytestmark = [pytest.mark.runc, pytest.mark.root]

PROBE = (
    "readlink /usr/bin/nvidia-smi; readlink /usr/bin/nvidia-cuda-mps-server;"
    " grep -c ' /usr/bin/nvidia' /proc/self/mountinfo; nvidia-smi -L"
)
IMAGE_SMI = "#!/bin/sh\necho the image's own nvidia-smi\n"


@pytest.fixture
def start(
    runc_bundle_factory: BundleFactory, container_id: str, nvct_config: Path
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``start(path, script, env, prepare=None)``: ``run_through`` with the test's bundle,
    container id and nvct config."""

    def go(path: str, script: str, env: list[str], prepare: Any = None) -> Any:
        factory, cid, config = runc_bundle_factory, container_id, nvct_config
        return run_through(path, factory, cid, config, script, env, prepare)

    return go


@pytest.mark.parametrize("path", ["shim", "hook"])
def test_binaries_run_through_links_into_the_library_directory(
    start: Callable[..., Any], sim_driver: Any, path: str
) -> None:
    from nvct.host.arch import host_arch

    libdir = f"/usr/lib/{host_arch().multiarch64}/nvidia-driver"
    env = ["NVIDIA_VISIBLE_DEVICES=3", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
    result = start(path, PROBE, env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == [f"{libdir}/nvidia-smi", f"{libdir}/nvidia-cuda-mps-server", "0"]
    assert smi_uuids(result.stdout) == [sim_driver.spec.gpus[3].uuid]


@pytest.mark.parametrize("path", ["shim", "hook"])
def test_an_image_with_its_own_nvidia_smi_runs_the_hosts(
    start: Callable[..., Any], sim_driver: Any, path: str
) -> None:
    kept: list[Path] = []

    def own_smi(rootfs: Path) -> None:
        (rootfs / "usr/bin/nvidia-smi").write_text(IMAGE_SMI)
        (rootfs / "usr/bin/nvidia-smi").chmod(0o755)
        kept.append(rootfs / "usr/bin/nvidia-smi")

    env = ["NVIDIA_VISIBLE_DEVICES=0"]
    script = "readlink /usr/bin/nvidia-debugdump; nvidia-smi -L"
    result = start(path, script, env, own_smi)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "image's own" not in result.stdout
    assert smi_uuids(result.stdout) == [sim_driver.spec.gpus[0].uuid]
    assert result.stdout.splitlines()[0].endswith("/nvidia-driver/nvidia-debugdump")
    assert kept[0].read_text() == IMAGE_SMI  # the image's file is untouched under the bind
