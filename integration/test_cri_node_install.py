"""deployments/node-install.sh on a node (integration/harness/noderoot.py: this machine's / under
an overlay, in a namespace of its own) whose containerd the CRI kubelet stand-in drives: the
installer configures and restarts it (by pid), a pod with runtime handler ``nvidia`` gets its
GPU through the installed /usr/bin/nvct-runtime, a newer image upgrades nvct while that pod
runs, uninstall restores containerd's config byte for byte but keeps the runtime the pod's
shim still needs, and a node without a GPU is left alone. The runtime the installer registers
for the RuntimeClass nvct-system gives an unprivileged system pod every GPU, and a workload on
``nvidia`` none, whatever namespace it runs in or forges.

The image's files are staged from this checkout (the native launcher, nvct-cli), as
packaging/image.sh would lay them out for the installer; integration/test_image.py runs the
installer from the real image."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import pytest
import yaml

from integration.cri import runtime_v1_pb2 as cri
from integration.harness.containerd import Containerd
from integration.harness.crinode import GUARDED, IMAGE, IMAGE_ENV, plugin_work
from integration.harness.ctrimages import PAUSE_TAG, pause_archive, rootfs_archive
from integration.harness.deviceplugin import PluginProcess
from integration.harness.noderoot import NodeRoot
from integration.harness.nvct_config import NVCT_BIN, write_nvct_config
from integration.harness.skips import need_binary, need_busybox, need_root, require
from integration.kubelet.cri import CriKubelet, container_config
from integration.kubelet.standin import Kubelet

pytestmark = [pytest.mark.root, pytest.mark.runc]
ROOT = Path(__file__).resolve().parent.parent
GPU = "nvidia.com/gpu"
CONFIG = "etc/containerd/config.toml"
RUNTIME = "usr/bin/nvct-runtime"
SYSTEM_RUNTIME = "usr/bin/nvct-system-runtime"


def stage_image(dest: Path, socket: str) -> Path:
    """The image's files the installer copies: a native nvct-runtime (``socket``: the shim
    daemon socket compiled in, so two versions differ), nvct-cli, the shipped config."""
    (dest / "usr/bin").mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "nvct.runtime.launch.build", "--output",
         str(dest / RUNTIME), "--native", "--socket", socket],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    cli = dest / "usr/bin/nvct-cli"
    cli.write_text(f'#!/bin/sh\nexec {NVCT_BIN / "nvct-cli"} "$@"\n')
    cli.chmod(0o755)
    (dest / "etc/nvct").mkdir(parents=True)
    shutil.copyfile(ROOT / "config/config.toml", dest / "etc/nvct/config.toml")
    # the RuntimeClass nvct-system's runtime and config, as packaging/image.sh and the
    # installer's ConfigMap put them in the image
    shutil.copy2(ROOT / "deployments/nvct-system-runtime", dest / SYSTEM_RUNTIME)
    (dest / "etc/nvct/system.toml").write_text(shipped_system_toml())
    return dest


def shipped_system_toml() -> str:
    """The installer's ConfigMap's system.toml (/etc/nvct/system.toml on the nodes)."""
    for doc in yaml.safe_load_all((ROOT / "deployments/installer.yaml").read_text()):
        if doc and doc["kind"] == "ConfigMap" and "system.toml" in doc["data"]:
            text: str = doc["data"]["system.toml"]
            return text
    raise AssertionError("deployments/installer.yaml has no system.toml")


def system_config(path: Path, sim: Any, spec_dir: Path) -> Path:
    """The shipped system.toml's settings on the simulated driver (its paths added)."""
    settings = tomllib.loads(shipped_system_toml())
    dotted = {
        f"{section}.{key}": json.dumps(value)
        for section, table in settings.items()
        for key, value in table.items()
    }
    return write_nvct_config(path, sim, **dotted, **{"cdi.spec-dirs": f'["{spec_dir}"]'})


@dataclass
class Site:
    node: NodeRoot
    containerd: Containerd
    cri: CriKubelet
    work: Path
    base: bytes  # containerd's config before nvct

    def install(self, action: str, src: Path, dev_root: Path) -> subprocess.CompletedProcess[str]:
        env = [
            "HOST=/", f"SRC={src}", f"DEV_ROOT={dev_root}", "ENGINE=containerd",
            f"NVCT_CLI={NVCT_BIN / 'nvct-cli'}", f"RESTART=kill {self.containerd.pid}",
        ]  # fmt: skip
        return subprocess.run(
            [*self.node.enter(), "env", *env, "sh", str(ROOT / "deployments/node-install.sh"),
             action],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    def config(self) -> bytes:
        return self.node.path(CONFIG).read_bytes()


@pytest.fixture
def site(sim_driver: Any, glibc_rootfs_dir: Path, tmp_path: Path) -> Iterator[Site]:
    require(need_root(), need_binary("containerd"), need_binary("ctr"), need_binary("runc"))
    require(need_binary("gcc"), need_busybox(), need_binary("unshare"), need_binary("nsenter"))
    node = NodeRoot(Path(tempfile.mkdtemp(prefix="nvct-node-", dir="/var/tmp"))).start()
    spec_dir = plugin_work(tmp_path, sim_driver) / "cdi"
    spec_dir.mkdir(parents=True)
    runtime_config = write_nvct_config(
        tmp_path / "nvct/config.toml", sim_driver, **GUARDED, **{"cdi.spec-dirs": f'["{spec_dir}"]'}
    )
    # The node's two configs (/etc/nvct/config.toml and system.toml) on the simulated driver,
    # through the environment containerd hands its shims and runtimes.
    system = system_config(tmp_path / "nvct/system.toml", sim_driver, spec_dir)
    containerd = Containerd(
        env={"NVCT_CONFIG": str(runtime_config), "NVCT_SYSTEM_CONFIG": str(system)},
        enter=node.enter(),
        config=(node.path(CONFIG), f"/{CONFIG}"),
    )
    try:
        node.path("etc/containerd").mkdir(parents=True, exist_ok=True)
        base = containerd.write_base_config(PAUSE_TAG).encode()
        containerd.start()
        containerd.import_image(pause_archive(tmp_path))
        containerd.import_image(rootfs_archive(glibc_rootfs_dir, IMAGE, env=IMAGE_ENV))
        yield Site(
            node, containerd, CriKubelet(containerd.socket, containerd.pod_logs), tmp_path, base
        )
    finally:
        containerd.stop()
        node.stop()
        shutil.rmtree(node.work)


def restarted(site: Site, pid: int | None) -> bool:
    """Whether the installer's RESTART stopped containerd ``pid``; if so, start it again (as
    systemd would) and wait for its CRI."""
    if not site.containerd.wait_exit(timeout=3):
        return False
    site.containerd.start()
    return site.containerd.pid != pid


def test_install_gives_a_pod_its_gpu_upgrade_and_uninstall_keep_it_running(
    site: Site, sim_driver: Any, tmp_path: Path
) -> None:
    v1 = stage_image(tmp_path / "v1", "/run/nvct/shim.sock")
    done = site.install("install", v1, sim_driver.dev_root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert restarted(site, site.containerd.pid), done.stdout
    config = site.config().decode()
    assert 'BinaryName = "/usr/bin/nvct-runtime"' in config
    assert 'container_annotations = ["cdi.k8s.io/*"]' in config
    assert site.node.path(RUNTIME).read_bytes() == (v1 / RUNTIME).read_bytes()

    kubelet = Kubelet(tmp_path / "device-plugins").start()
    plugin = PluginProcess(
        plugin_work(tmp_path, sim_driver), sim_driver, kubelet.plugin_dir,
        "--device-list-strategy", "cdi-annotations",
    ).start()  # fmt: skip
    uuid = sim_driver.spec.gpus[1].uuid
    try:
        assert kubelet.wait(lambda: GPU in kubelet.plugins, timeout=20), plugin.output()
        answer = kubelet.allocate(GPU, [uuid])
    finally:
        plugin.stop()
        kubelet.stop()
    pod = site.cri.run_pod("gpu", handler="nvidia")
    script = "nvidia-smi -L; exec sleep 600"
    container = site.cri.create(
        pod, container_config(pod, "main", IMAGE, ["/bin/sh", "-c", script], [answer])
    )
    site.cri.runtime.StartContainer(cri.StartContainerRequest(container_id=container), timeout=60)
    log = pod.log_directory / "main/0.log"
    deadline = time.monotonic() + 30
    while uuid not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, site.cri.status(container)
        time.sleep(0.05)
    assert log.read_text().count("UUID: GPU-") == 1

    # a newer image while the pod runs: nvct replaced, containerd not restarted (same config)
    v2 = stage_image(tmp_path / "v2", "/run/nvct/shim-v2.sock")
    pid = site.containerd.pid
    done = site.install("install", v2, sim_driver.dev_root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not restarted(site, pid) and "config unchanged" in done.stdout
    assert site.node.path(RUNTIME).read_bytes() == (v2 / RUNTIME).read_bytes()
    assert site.cri.status(container).status.state == cri.CONTAINER_RUNNING

    # uninstall while it runs: the config as it was, the runtime its shim needs kept
    done = site.install("uninstall", v2, sim_driver.dev_root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert restarted(site, pid)
    assert site.config() == site.base
    assert "kept /usr/bin/nvct-runtime" in done.stdout
    assert site.node.path(RUNTIME).exists()
    assert not site.node.path("usr/bin/nvct-cli").exists()
    assert site.cri.status(container).status.state == cri.CONTAINER_RUNNING
    site.cri.delete_pod(pod)  # its shim stops and deletes it with the kept runtime
    assert site.cri.containers() == [] and site.cri.sandboxes() == []
    done = site.install("uninstall", v2, sim_driver.dev_root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not site.node.path(RUNTIME).exists()
    assert not site.node.path("var/lib/nvct/node-install.list").exists()
    assert site.config() == site.base


def test_a_node_without_a_gpu_keeps_its_containerd_running_untouched(
    site: Site, tmp_path: Path
) -> None:
    no_gpu = tmp_path / "no-gpu"
    (no_gpu / "dev").mkdir(parents=True)
    pid = site.containerd.pid
    done = site.install("install", stage_image(tmp_path / "v1", ""), no_gpu)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no NVIDIA GPU on this node" in done.stdout
    assert not restarted(site, pid) and site.containerd.pid == pid
    assert site.config() == site.base
    assert not site.node.path(RUNTIME).exists()


def run_to_end(site: Site, handler: str, namespace: str, forged: dict[str, str]) -> str:
    """``nvidia-smi -L`` in a pod of the CUDA-like image (NVIDIA_VISIBLE_DEVICES=all) asking
    the scheduler for no GPU; its output."""
    pod = site.cri.run_pod("p", handler=handler, namespace=namespace, annotations=forged)
    try:
        config = container_config(pod, "main", IMAGE, ["/bin/sh", "-c", "nvidia-smi -L; true"])
        exited = site.cri.run(pod, config)
    finally:
        site.cri.delete_pod(pod)
    assert exited.exit_code == 0, exited.output
    return exited.output


def test_the_system_runtime_class_gives_every_gpu_and_a_workload_cannot_claim_it(
    site: Site, sim_driver: Any, tmp_path: Path
) -> None:
    """The installer registers nvct-system (RuntimeClass nvct-system): a pod on it, as the
    device plugin, labeller and exporter run, sees every GPU by NVIDIA_VISIBLE_DEVICES=all,
    unprivileged. A workload on nvidia in nvct's namespace, or forging the sandbox-namespace
    annotations containerd sets, sees none: the exemption is the handler, which only
    admission (deployments/admission.yaml, tests/deployments/test_admission.py) lets a pod name."""
    done = site.install("install", stage_image(tmp_path / "v1", ""), sim_driver.dev_root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert restarted(site, site.containerd.pid), done.stdout
    config = site.config().decode()
    assert f'BinaryName = "/{SYSTEM_RUNTIME}"' in config
    assert (
        site.node.path(SYSTEM_RUNTIME).read_bytes()
        == (ROOT / "deployments/nvct-system-runtime").read_bytes()
    )

    everyone = [g.uuid for g in sim_driver.spec.gpus]
    system = run_to_end(site, "nvct-system", "nvct-system", {})
    assert sorted(u for u in everyone if u in system) == sorted(everyone), system
    forged = {
        "io.kubernetes.cri.sandbox-namespace": "nvct-system",
        "io.kubernetes.cri.runtime-handler": "nvct-system",
        "io.kubernetes.pod.namespace": "nvct-system",
    }
    for namespace, pod_annotations in (("nvct-system", {}), ("default", forged)):
        workload = run_to_end(site, "nvidia", namespace, pod_annotations)
        assert "UUID: GPU-" not in workload, (namespace, workload)

    done = site.install("uninstall", stage_image(tmp_path / "v2", ""), sim_driver.dev_root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert restarted(site, site.containerd.pid) and site.config() == site.base
    assert not site.node.path(SYSTEM_RUNTIME).exists()
