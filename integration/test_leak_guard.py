"""request.only-allocated-gpus: with nvct-runtime as a node's default runtime, a container
whose image sets NVIDIA_VISIBLE_DEVICES=all but that the device plugin allocated nothing gets no
GPU, nor does one that mounts a directory of its own (an emptyDir) where the device plugin's
volume-mounts answer mounts /dev/null; one with an allocation (a volume-mount list or a CDI
annotation) gets exactly that."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from integration.harness.bundles import BundleFactory, run_runc, runc_spec
from integration.harness.nvct_config import NVCT_BIN, write_nvct_config

pytestmark = [pytest.mark.runc, pytest.mark.root]

SCRIPT = "ls /dev; echo ===; nvidia-smi -L 2>&1 || true"
IMAGE_ENV = ["NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.4.0"]


@pytest.fixture
def guarded(sim_driver: Any, tmp_path: Path) -> Path:
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    config = write_nvct_config(
        tmp_path / "nvct" / "config.toml",
        sim_driver,
        **{"request.only-allocated-gpus": "true", "cdi.spec-dirs": f'["{spec_dir}"]'},
    )
    generate = ["cdi", "generate", "-o", str(spec_dir / "nvidia.json")]
    done = subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", "--config", str(config), *generate],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return config


def gpus_seen(result: subprocess.CompletedProcess[str]) -> tuple[list[str], str]:
    assert result.returncode == 0, result.stderr
    devs, smi = result.stdout.split("===")
    return sorted(d for d in devs.split() if d.startswith("nvidia")), smi


def run(bundle: Path, container_id: str, config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NVCT_CONFIG": str(config)}
    return run_runc(bundle, container_id, runtime=NVCT_BIN / "nvct-runtime", env=env)


def test_an_image_asking_for_all_gpus_without_an_allocation_gets_none(
    runc_bundle_factory: BundleFactory, container_id: str, guarded: Path
) -> None:
    bundle = runc_bundle_factory(["/bin/sh", "-c", SCRIPT], IMAGE_ENV)
    nodes, smi = gpus_seen(run(bundle, container_id, guarded))
    assert nodes == []
    assert "UUID: GPU-" not in smi


def test_a_volume_mount_allocation_gives_exactly_that_gpu(
    runc_bundle_factory: BundleFactory, container_id: str, guarded: Path, sim_driver: Any
) -> None:
    uuid = sim_driver.spec.gpus[2].uuid
    mount = {
        "destination": f"/var/run/nvidia-container-devices/{uuid}",
        "source": "/dev/null",
        "type": "bind",
        "options": ["rbind", "ro"],
    }
    mounts = [*runc_spec()["mounts"], mount]
    bundle = runc_bundle_factory(["/bin/sh", "-c", SCRIPT], IMAGE_ENV, extra={"mounts": mounts})
    nodes, smi = gpus_seen(run(bundle, container_id, guarded))
    assert "nvidia2" in nodes and not {"nvidia0", "nvidia1", "nvidia3"} & set(nodes)
    assert smi.count("UUID: GPU-") == 1 and uuid in smi


def test_a_cdi_annotation_allocation_gives_exactly_that_gpu(
    runc_bundle_factory: BundleFactory, container_id: str, guarded: Path, sim_driver: Any
) -> None:
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", SCRIPT],
        IMAGE_ENV,
        extra={"annotations": {"cdi.k8s.io/nvct-device-plugin_gpu": "nvidia.com/gpu=1"}},
    )
    nodes, smi = gpus_seen(run(bundle, container_id, guarded))
    assert "nvidia1" in nodes and not {"nvidia0", "nvidia2", "nvidia3"} & set(nodes)
    assert smi.count("UUID: GPU-") == 1 and sim_driver.spec.gpus[1].uuid in smi


def test_a_directory_mounted_as_the_device_list_gives_no_gpu(
    runc_bundle_factory: BundleFactory, container_id: str, guarded: Path, tmp_path: Path
) -> None:
    """What any pod's emptyDir at /var/run/nvidia-container-devices/all is: a bind mount of an
    ordinary directory. NVIDIA's toolkit counts only a /dev/null source; so does nvct."""
    empty_dir = tmp_path / "pods" / "volumes" / "kubernetes.io~empty-dir" / "all"
    empty_dir.mkdir(parents=True)
    mount = {
        "destination": "/var/run/nvidia-container-devices/all",
        "source": str(empty_dir),
        "type": "bind",
        "options": ["rbind", "rw"],
    }
    mounts = [*runc_spec()["mounts"], mount]
    bundle = runc_bundle_factory(["/bin/sh", "-c", SCRIPT], IMAGE_ENV, extra={"mounts": mounts})
    nodes, smi = gpus_seen(run(bundle, container_id, guarded))
    assert nodes == []
    assert "UUID: GPU-" not in smi
