"""A Kubernetes node in miniature for the CRI tests: a private containerd configured by
``nvct-cli configure --runtime containerd``, the kubelet's two faces (the device plugin
stand-in, integration/kubelet/standin.py, and the CRI stand-in, integration/kubelet/cri.py),
and nvct-device-plugin processes on the simulated driver.

Runtime handlers, each running nvct-runtime:
- ``nvidia`` (also containerd's default runtime): the shipped guarded settings,
  ``only-allocated-gpus`` and ``accept-volume-mounts``, through ``NVCT_CONFIG`` in containerd's
  environment (its shims and runtimes inherit it, as /etc/nvct/config.toml on a node);
- more handlers (``add_handler``) run a wrapper named nvct-runtime that points nvct-runtime at a
  config of their own (the guard off; another simulated driver).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from integration.harness import HarnessError
from integration.harness.containerd import Containerd
from integration.harness.ctrimages import PAUSE_TAG, pause_archive, rootfs_archive
from integration.harness.deviceplugin import PLUGIN_MODULE, PluginProcess
from integration.harness.nvct_config import NVCT_BIN, write_nvct_config
from integration.harness.skips import need_binary, need_busybox, need_root, require
from integration.kubelet.cri import CriKubelet, Exited
from integration.kubelet.standin import Kubelet

IMAGE = "nvct.local/cuda-like:test"
# A CUDA image's variables: without the guard they would give every GPU to any container.
IMAGE_ENV = ("NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.4.0")
GUARDED = {"request.only-allocated-gpus": "true", "request.accept-volume-mounts": "true"}
OPEN = {"request.only-allocated-gpus": "false", "request.accept-volume-mounts": "true"}


def configure(config: Path, *args: str) -> str:
    """``nvct-cli configure --runtime containerd`` on ``config``; its output."""
    done = subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", "configure", "--runtime", "containerd",
         "--config", str(config), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise HarnessError(f"nvct-cli configure failed: {done.stderr.strip()}")
    return done.stdout


def plugin_work(work: Path, sim: Any) -> Path:
    """The device plugin's directory (its config, device nodes, CDI spec) for driver ``sim``."""
    return work / f"plugin-{Path(sim.driver_root).parent.name}"


@dataclass
class Node:
    """The node; ``close()`` stops what it started."""

    work: Path
    sim: Any
    containerd: Containerd
    plugins: Kubelet
    cri: CriKubelet
    handlers: dict[str, Path] = field(default_factory=dict)  # handler -> nvct config
    drivers: dict[str, Any] = field(default_factory=dict)  # handler -> simulated driver

    def add_handler(self, name: str, sim: Any, spec_dir: Path, **toml: str) -> Path:
        """Configure handler ``name`` with nvct-runtime on ``sim`` (restart to take effect)."""
        config = write_nvct_config(
            self.work / name / "config.toml", sim, **toml, **{"cdi.spec-dirs": f'["{spec_dir}"]'}
        )
        wrapper = self.work / name / "bin" / "nvct-runtime"
        wrapper.parent.mkdir(parents=True)
        wrapper.write_text(
            f'#!/bin/sh\nNVCT_CONFIG={config} exec {NVCT_BIN / "nvct-runtime"} "$@"\n'
        )
        wrapper.chmod(0o755)
        configure(self.containerd.config, "--runtime-name", name, "--runtime-path", str(wrapper))
        self.handlers[name] = config
        self.drivers[name] = sim
        return config

    @contextlib.contextmanager
    def plugin(
        self,
        *args: str,
        sim: Any = None,
        resource: str = "nvidia.com/gpu",
        program: tuple[str, ...] = PLUGIN_MODULE,
        **toml: str,
    ) -> Iterator[PluginProcess]:
        """nvct-device-plugin registered with the stand-in (its CDI spec in
        ``work/plugin-<driver>/cdi``), stopped after the block; ``program``: run as that
        command instead of ``python -m nvct.deviceplugin``."""
        sim = sim or self.sim
        old = self.plugins.registered(resource)
        plugin = PluginProcess(
            self.plugin_work(sim), sim, self.plugins.plugin_dir, *args, program=program, **toml
        )
        plugin.start()
        try:
            ready = self.plugins.wait(
                lambda: (
                    (r := self.plugins.plugins.get(resource)) is not None
                    and r is not old
                    and r.updates > 0
                ),
                timeout=20,
            )
            assert ready, plugin.output()
            yield plugin
        finally:
            plugin.stop()

    def plugin_work(self, sim: Any) -> Path:
        return plugin_work(self.work, sim)

    def run(self, pod: Any, config: Any) -> Exited:
        return self.cri.run(pod, config)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.cri.close()
        self.plugins.stop()
        self.containerd.stop()


def start_node(work: Path, sim: Any) -> Node:
    """The node, its containerd not started yet: the base config with ``nvidia`` configured
    as the default runtime (the guarded settings); the device plugin stand-in up. Add handlers,
    then ``start_containerd``."""
    spec_dir = plugin_work(work, sim) / "cdi"
    spec_dir.mkdir(parents=True)
    guarded = write_nvct_config(
        work / "nvidia" / "config.toml", sim, **GUARDED, **{"cdi.spec-dirs": f'["{spec_dir}"]'}
    )
    containerd = Containerd(env={"NVCT_CONFIG": str(guarded)})
    try:
        containerd.write_base_config(PAUSE_TAG)
        configure(
            containerd.config, "--runtime-path", str(NVCT_BIN / "nvct-runtime"), "--set-as-default"
        )
        plugins = Kubelet(work / "device-plugins").start()
        node = Node(
            work, sim, containerd, plugins, CriKubelet(containerd.socket, containerd.pod_logs)
        )
        node.handlers["nvidia"] = guarded
        node.drivers["nvidia"] = sim
        return node
    except BaseException:
        containerd.stop()
        raise


def start_containerd(node: Node, rootfs: Path) -> None:
    """Start the node's containerd and import the images (after every handler is added)."""
    node.containerd.start()
    node.containerd.import_image(pause_archive(node.work))
    node.containerd.import_image(rootfs_archive(rootfs, IMAGE, env=IMAGE_ENV))


@contextlib.contextmanager
def running_node(work: Path, sim: Any, rootfs: Path) -> Iterator[Node]:
    """A node with the default handler and its containerd running, closed at the end (every
    daemon by its pid); skips only where containerd, runc, gcc or busybox are truly absent."""
    require(need_root(), need_binary("containerd"), need_binary("ctr"), need_binary("runc"))
    require(need_binary("gcc"), need_busybox(), need_binary("unshare"))
    node = start_node(work, sim)
    try:
        start_containerd(node, rootfs)
        yield node
    finally:
        node.close()


@pytest.fixture(scope="module")
def cri_node(
    tmp_path_factory: pytest.TempPathFactory, sim_driver: Any, glibc_rootfs_dir: Path
) -> Iterator[Node]:
    """``running_node`` on the session's simulated driver, one per test module that asks."""
    with running_node(tmp_path_factory.mktemp("cri-node"), sim_driver, glibc_rootfs_dir) as node:
        yield node
