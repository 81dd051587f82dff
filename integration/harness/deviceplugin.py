"""nvct-device-plugin as a real process on the simulated driver, for the tests that run it
against the kubelet stand-in (integration/kubelet); the fixtures that start both, and an
Allocate answer applied to an OCI spec as containerd's CRI plugin applies it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from integration.harness.bundles import runc_spec
from integration.harness.nvct_config import write_nvct_config
from integration.harness.processes import terminate
from integration.kubelet.standin import Kubelet

P = TypeVar("P", bound="SimProcess")
# How the tests run the plugin by default: this checkout's module under the test's Python.
PLUGIN_MODULE = (sys.executable, "-m", "nvct.deviceplugin")


class SimProcess:
    """An nvct program as a real process on the simulated driver: its own log, and this
    test's NVML events and state (the plugin's device nodes, its control directory)."""

    argv: list[str]
    log: Path
    dev_root: Path
    control: Path
    proc: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = {}  # noqa: RUF012 - replaced, never changed in place

    def start(self: P) -> P:
        self.control.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **self.extra_env,
            "NVCT_SIM_DEV_ROOT": str(self.dev_root),
            "NVCT_SIM_CONTROL_DIR": str(self.control),  # this test's NVML events and state
        }
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=out, env=env)
        return self

    def stop(self) -> int:
        assert self.proc is not None
        return terminate(self.proc)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class PluginProcess(SimProcess):
    """``python -m nvct.deviceplugin`` (or ``program``, e.g. the installed
    /usr/bin/nvct-device-plugin) with a config for the simulated driver."""

    def __init__(
        self,
        work: Path,
        sim: Any,
        plugin_dir: Path,
        *args: str,
        program: tuple[str, ...] = PLUGIN_MODULE,
        **toml: str,
    ) -> None:
        self.work = work
        self.dev_root = work / "devroot"  # the plugin's own device nodes: tests remove some
        if not (self.dev_root / "dev").exists():
            from integration.simdriver import make_dev_nodes

            make_dev_nodes(sim.spec, self.dev_root)
        self.config = write_nvct_config(work / "nvct" / "config.toml", sim, **toml)
        self.argv = [
            *program, "--config", str(self.config),
            "--dev-root", str(self.dev_root), "--plugin-dir", str(plugin_dir),
            "--cdi-spec-dir", str(work / "cdi"), "--sysfs-root", str(work / "sys"),
            "--quiet-period", "1", *args,
        ]  # fmt: skip
        self.log = work / "plugin.log"
        self.control = work / "nvml-control"
        self.proc = None


class MpsControlProcess(SimProcess):
    """``nvct-cli mps-control`` with a plugin's config, roots and simulated-driver controls:
    the MPS daemons that plugin's probes ask."""

    def __init__(self, plugin: PluginProcess, mps_root: Path, *, config: Path | None = None):
        self.argv = [
            sys.executable, "-m", "nvct.cli.main", "--config", str(config or plugin.config),
            "--dev-root", str(plugin.dev_root), "mps-control", "--mps-root", str(mps_root),
        ]  # fmt: skip
        self.log = plugin.work / f"mps-control-{time.monotonic_ns()}.log"  # one per process
        self.dev_root, self.control = plugin.dev_root, plugin.control
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: what its pod's end does to it, without the cgroup taking the daemons."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()


def numa_sysfs(work: Path, sim: Any) -> None:
    for i, gpu in enumerate(sim.spec.gpus):
        domain, _, rest = gpu.pci_bus_id.lower().partition(":")
        node = work / "sys/bus/pci/devices" / f"{domain[-4:]}:{rest}"
        node.mkdir(parents=True, exist_ok=True)
        (node / "numa_node").write_text(f"{i // 2}\n")


@pytest.fixture
def kubelet() -> Iterator[Kubelet]:
    # A short directory, as the kubelet's own: pytest's tmp_path plus a long test name and a
    # resource's socket name can pass the 107 bytes a Unix socket path may have.
    short = Path(tempfile.mkdtemp(prefix="dp-"))
    standin = Kubelet(short / "device-plugins").start()
    try:
        yield standin
    finally:
        standin.stop()
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def plugin_factory(tmp_path: Path, sim_driver: Any, kubelet: Kubelet) -> Iterator[Any]:
    numa_sysfs(tmp_path, sim_driver)
    started: list[PluginProcess] = []

    def make(*args: str, start: bool = True, **toml: str) -> PluginProcess:
        plugin = PluginProcess(tmp_path, sim_driver, kubelet.plugin_dir, *args, **toml)
        started.append(plugin)
        return plugin.start() if start else plugin

    yield make
    for plugin in started:
        if plugin.proc is not None:
            plugin.stop()


def uuids(sim: Any) -> list[str]:
    return [g.uuid for g in sim.spec.gpus]


def apply(response: Any, env: list[str]) -> dict[str, Any]:
    """What the CRI plugin puts in the OCI spec: envs, mounts, annotations."""
    mounts = [
        {
            "destination": m.container_path,
            "source": m.host_path,
            "type": "bind",
            "options": ["rbind", "ro" if m.read_only else "rw"],
        }
        for m in response.mounts
    ]
    return {
        "env": [*env, *(f"{k}={v}" for k, v in response.envs.items())],
        "extra": {
            "mounts": [*runc_spec()["mounts"], *mounts],
            "annotations": dict(response.annotations),
        },
    }
