"""nvct's OCI image (``make image``: Debian 12 minbase + the .deb, no registry), imported into a
private dockerd: its nvct-cli reads a driver mounted into it, and its node installer installs and
uninstalls on a node root mounted at /host."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from integration.harness.dockerd import Dockerd
from integration.harness.packages import ROOT, build_packages, need_build_tools
from integration.harness.skips import need_binary, need_root, require

pytestmark = [pytest.mark.docker, pytest.mark.root, pytest.mark.slow]
TAG = "nvct:image-test"


@pytest.fixture(scope="module")
def image(dockerd_factory: Any) -> tuple[Dockerd, str]:
    require(need_root(), need_binary("debootstrap"), need_build_tools())
    packages = build_packages()
    tar = ROOT / "packaging/build/nvct-image-test.tar"
    done = subprocess.run(
        ["sh", "packaging/image.sh", str(tar), str(packages.deb)],
        cwd=ROOT,
        env={**os.environ, "BUILD_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    dockerd: Dockerd = dockerd_factory({})
    dockerd.docker("import", str(tar), TAG, timeout=600)
    tar.unlink()
    return dockerd, TAG


def test_the_images_nvct_cli_reads_a_mounted_driver(image, sim_driver: Any) -> None:
    dockerd, tag = image
    root = sim_driver.driver_root  # at its own path: the simulated NVML knows it
    done = dockerd.docker(
        "run", "--rm", "--network", "none", "-v", f"{root}:{root}:ro", tag,
        "nvct-cli", "--driver-root", str(root), "--dev-root", str(sim_driver.dev_root),
        "--proc-root", str(sim_driver.proc_root), "--no-cache", "info",
        check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for gpu in sim_driver.spec.gpus:
        assert gpu.uuid in done.stdout


def test_the_images_installer_installs_and_uninstalls_on_a_node(image, tmp_path: Path) -> None:
    containerd = shutil.which("containerd")
    if containerd is None:
        pytest.skip("needs containerd")
    dockerd, tag = image
    host = tmp_path / "host"
    (host / "etc/containerd").mkdir(parents=True)
    default = subprocess.run(
        [containerd, "config", "default"], capture_output=True, text=True, check=True
    ).stdout
    (host / "etc/containerd/config.toml").write_text(default)

    def node_install(action: str) -> subprocess.CompletedProcess[str]:
        return dockerd.docker(
            "run", "--rm", "--network", "none", "-v", f"{host}:/host",
            "-e", "ENGINE=containerd", "-e", "RESTART=true",
            tag, "/usr/share/nvct/node-install.sh", action,
            check=False, timeout=300,
        )  # fmt: skip

    done = node_install("install")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (host / "usr/bin/nvct-runtime").read_bytes()[:4] == b"\x7fELF"
    assert (host / "usr/share/nvct/lib/nvct/__init__.py").is_file()
    assert (
        'BinaryName = "/usr/bin/nvct-runtime"' in (host / "etc/containerd/config.toml").read_text()
    )
    done = node_install("uninstall")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (host / "etc/containerd/config.toml").read_text() == default
    assert not (host / "usr/bin/nvct-runtime").exists()
    assert not (host / "usr/share/nvct").exists()


def test_the_device_plugin_from_the_image_registers_and_its_answer_gives_a_gpu(
    image, sim_driver: Any, tmp_path: Path, runc_bundle_factory, container_id: str
) -> None:
    """docker run of the image's nvct-device-plugin (the device-plugins directory mounted, the
    simulated driver as its driver root) against the kubelet stand-in; the envvar answer then
    runs a real container through this checkout's nvct-runtime."""
    from integration.conftest import NVCT_BIN, write_nvct_config
    from integration.harness.bundles import run_runc
    from integration.kubelet.standin import Kubelet

    dockerd, tag = image
    plugins = tmp_path / "device-plugins"
    kubelet = Kubelet(plugins).start()
    root = sim_driver.driver_root
    name = f"nvct-plugin-{container_id}"
    try:
        dockerd.docker(
            "run", "-d", "--name", name, "--network", "none",
            "-v", f"{plugins}:{plugins}", "-v", f"{root}:{root}:ro", tag,
            "nvct-device-plugin", "--driver-root", str(root),
            "--dev-root", str(sim_driver.dev_root), "--proc-root", str(sim_driver.proc_root),
            "--plugin-dir", str(plugins),
            "--device-list-strategy", "envvar",
            timeout=120,
        )  # fmt: skip
        registered = kubelet.wait(lambda: "nvidia.com/gpu" in kubelet.plugins, timeout=60)
        logs = dockerd.docker("logs", name, check=False)
        state = dockerd.docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name)
        assert registered, (state.stdout, logs.stdout, logs.stderr)
        uuid = sim_driver.spec.gpus[2].uuid
        assert kubelet.devices("nvidia.com/gpu")[uuid] == "Healthy"
        answer = kubelet.allocate("nvidia.com/gpu", [uuid])
        env = [f"{k}={v}" for k, v in answer.envs.items()]
        bundle = runc_bundle_factory(["/bin/sh", "-c", "nvidia-smi -L"], env)
        config = write_nvct_config(tmp_path / "rt" / "config.toml", sim_driver)
        result = run_runc(
            bundle,
            container_id,
            runtime=NVCT_BIN / "nvct-runtime",
            env={**os.environ, "NVCT_CONFIG": str(config)},
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("UUID: GPU-") == 1 and uuid in result.stdout
    finally:
        dockerd.docker("rm", "-f", name, check=False)
        kubelet.stop()
