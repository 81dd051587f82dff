"""nvct's OCI image (``make image``: Debian 12 minbase + the .deb, no registry), imported into a
private dockerd: its nvct-cli reads a driver mounted into it, its exporter labels a GPU with the
kubelet stand-in's pod, and its node installer installs and uninstalls on a node root mounted at
/host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
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


def test_the_images_installer_installs_and_uninstalls_on_a_node(
    image, tmp_path: Path, sim_driver: Any
) -> None:
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
    (host / "dev").mkdir()
    (host / "dev/nvidia0").touch()  # a GPU node: the installer leaves others alone

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
    # The hook a CDI spec written in the image names (the device plugin's) runs on the node.
    root = sim_driver.driver_root
    spec = dockerd.docker(
        "run", "--rm", "--network", "none", "-v", f"{root}:{root}:ro", tag,
        "nvct-cli", "--driver-root", str(root), "--dev-root", str(sim_driver.dev_root),
        "--proc-root", str(sim_driver.proc_root), "cdi", "generate", "--format", "json",
        timeout=120,
    ).stdout  # fmt: skip
    hooks = {h["path"] for h in json.loads(spec)["containerEdits"]["hooks"]}
    assert hooks == {"/usr/bin/nvct-cdi-hook"}
    assert (host / "usr/bin/nvct-cdi-hook").read_bytes()[:4] == b"\x7fELF"  # the native hook
    python_hook = host / "usr/libexec/nvct/nvct-cdi-hook"  # what it hands over, beside it
    assert python_hook.read_text().startswith("#!/usr/bin/python3")
    assert (host / "usr/share/nvct/lib/nvct/__init__.py").is_file()
    config = (host / "etc/containerd/config.toml").read_text()
    assert 'BinaryName = "/usr/bin/nvct-runtime"' in config
    # the RuntimeClass nvct-system's runtime (deployments/nvct-system-runtime, from the image)
    assert 'BinaryName = "/usr/bin/nvct-system-runtime"' in config
    assert "exec /usr/bin/nvct-runtime" in (host / "usr/bin/nvct-system-runtime").read_text()
    done = node_install("uninstall")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (host / "etc/containerd/config.toml").read_text() == default
    assert not (host / "usr/bin/nvct-runtime").exists()
    assert not (host / "usr/bin/nvct-system-runtime").exists()
    assert not (host / "usr/share/nvct").exists()


def test_the_device_plugin_from_the_image_registers_and_its_answer_gives_a_gpu(
    image, sim_driver: Any, tmp_path: Path, runc_bundle_factory, container_id: str
) -> None:
    """docker run of the image's nvct-device-plugin (the device-plugins directory mounted, the
    simulated driver as its driver root) against the kubelet stand-in; the envvar answer then
    runs a real container through this checkout's nvct-runtime."""
    from integration.harness.bundles import run_runc
    from integration.harness.nvct_config import NVCT_BIN, write_nvct_config
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


# The GPU operator's device-plugin entrypoint, in its shape (its ConfigMap
# nvidia-device-plugin-entrypoint): wait for the driver validation, export the roots it wrote,
# then exec NVIDIA's program name, which the image carries for nvct-device-plugin.
OPERATOR_ENTRYPOINT = """\
until [ -f /run/nvidia/validations/driver-ready ]; do echo waiting for the driver; sleep 1; done
set -o allexport
. /run/nvidia/validations/driver-ready
exec nvidia-device-plugin
"""


def test_the_gpu_operators_entrypoint_execs_nvidia_device_plugin_from_the_image(
    image, sim_driver: Any, tmp_path: Path, container_id: str
) -> None:
    from integration.harness.nvct_config import write_nvct_config
    from integration.kubelet.standin import Kubelet

    dockerd, tag = image
    plugins = tmp_path / "device-plugins"
    kubelet = Kubelet(plugins).start()
    validations = tmp_path / "validations"
    validations.mkdir()
    config = write_nvct_config(
        tmp_path / "nvct" / "config.toml",
        sim_driver,
        **{"device-plugin.plugin-dir": f'"{plugins}"'},
    )
    root = sim_driver.driver_root
    name = f"nvct-operator-{container_id}"
    try:
        dockerd.docker(
            "run", "-d", "--name", name, "--network", "none",
            "-v", f"{plugins}:{plugins}", "-v", f"{root}:{root}:ro",
            "-v", f"{config.parent}:{config.parent}",
            "-v", f"{validations}:/run/nvidia/validations:ro", "-e", f"NVCT_CONFIG={config}",
            tag, "/bin/sh", "-c", OPERATOR_ENTRYPOINT,
            timeout=120,
        )  # fmt: skip
        assert not kubelet.wait(lambda: "nvidia.com/gpu" in kubelet.plugins, timeout=2)
        ready = f"IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/\nDRIVER_ROOT_CTR_PATH={root}\n"
        (validations / "driver-ready").write_text(ready)
        registered = kubelet.wait(lambda: "nvidia.com/gpu" in kubelet.plugins, timeout=60)
        logs = dockerd.docker("logs", name, check=False)
        assert registered, (logs.stdout, logs.stderr)
        assert set(kubelet.devices("nvidia.com/gpu")) == {g.uuid for g in sim_driver.spec.gpus}
        # exec'd: the container's first process is the plugin, started by NVIDIA's name
        argv = dockerd.docker("exec", name, "cat", "/proc/1/cmdline").stdout.split("\0")
        assert "/usr/bin/nvidia-device-plugin" in argv, argv
        target = dockerd.docker("exec", name, "readlink", "-f", "/usr/bin/nvidia-device-plugin")
        assert target.stdout.strip() == "/usr/bin/nvct-device-plugin"
    finally:
        dockerd.docker("rm", "-f", name, check=False)
        kubelet.stop()


SCRAPE = (
    "import urllib.request; "
    "print(urllib.request.urlopen('http://127.0.0.1:9400/metrics', timeout=10).read().decode())"
)


def test_the_images_exporter_labels_a_gpu_with_the_kubelets_pod(
    image, sim_driver: Any, tmp_path: Path, container_id: str
) -> None:
    """docker run of the image's ``nvct-cli exporter`` (the pod-resources directory mounted
    read-only as the DaemonSet mounts it, the simulated driver as its driver root): its own
    scrape, from inside the container, carries the stand-in's pod on the GPU it holds."""
    from integration.kubelet.podresources import Container, PodResources

    dockerd, tag = image
    sockets = tmp_path / "pod-resources"
    server = PodResources(sockets / "kubelet.sock").start()
    uuids = [g.uuid for g in sim_driver.spec.gpus]
    server.set_containers(
        [Container("train-0", "team-a", "trainer", {"nvidia.com/gpu": [uuids[1]]})]
    )
    server.set_allocatable({"nvidia.com/gpu": uuids})
    root = sim_driver.driver_root
    name = f"nvct-exporter-{container_id}"
    try:
        dockerd.docker(
            "run", "-d", "--name", name, "--network", "none",
            "-v", f"{root}:{root}:ro", "-v", f"{sockets}:/var/lib/kubelet/pod-resources:ro", tag,
            "nvct-cli", "--driver-root", str(root), "--dev-root", str(sim_driver.dev_root),
            "--proc-root", str(sim_driver.proc_root), "exporter", "--interval", "1",
            "--hostname", "node-a",
            timeout=120,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        text = ""
        while 'pod="train-0"' not in text and time.monotonic() < deadline:
            done = dockerd.docker("exec", name, "python3", "-c", SCRAPE, check=False, timeout=60)
            text = done.stdout
            time.sleep(0.5)
        logs = dockerd.docker("logs", name, check=False)
        assert 'pod="train-0"' in text, (text[-2000:], logs.stdout, logs.stderr)
        util = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
        held = [line for line in util if 'pod="train-0"' in line]
        assert len(util) == len(uuids) and len(held) == 1
        assert f'UUID="{uuids[1]}"' in held[0] and 'namespace="team-a"' in held[0]
        assert 'container="trainer"' in held[0] and 'Hostname="node-a"' in held[0]
    finally:
        dockerd.docker("rm", "-f", name, check=False)
        server.stop()
