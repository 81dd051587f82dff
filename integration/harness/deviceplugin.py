"""nvct-device-plugin as a real process on the simulated driver, for the tests that run it
against the kubelet stand-in (integration/kubelet)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from integration.conftest import write_nvct_config
from integration.harness.processes import terminate


class PluginProcess:
    """``python -m nvct.deviceplugin`` (or ``program``, e.g. the installed
    /usr/bin/nvct-device-plugin) with a config for the simulated driver."""

    def __init__(
        self,
        work: Path,
        sim: Any,
        plugin_dir: Path,
        *args: str,
        program: tuple[str, ...] = (sys.executable, "-m", "nvct.deviceplugin"),
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
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PluginProcess:
        self.control.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
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


def numa_sysfs(work: Path, sim: Any) -> None:
    for i, gpu in enumerate(sim.spec.gpus):
        domain, _, rest = gpu.pci_bus_id.lower().partition(":")
        node = work / "sys/bus/pci/devices" / f"{domain[-4:]}:{rest}"
        node.mkdir(parents=True, exist_ok=True)
        (node / "numa_node").write_text(f"{i // 2}\n")
