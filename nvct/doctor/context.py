"""What every check reads the host through: roots, overridable paths, a command runner.

Every host path a check opens is built from this context (the config's driver, dev and proc
roots, and the paths below), so tests point doctor at temporary trees and fake commands.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvct.base.defaults import CDI_SPEC_DIRS, DEFAULT_SOCKET
from nvct.config import Config

if TYPE_CHECKING:
    from nvct.host.inventory import Inventory

DEFAULT_CDI_DIRS = tuple(Path(d) for d in CDI_SPEC_DIRS)


@dataclass(frozen=True, slots=True)
class Completed:
    """A finished command: exit status (127 when it could not start) and its output."""

    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str]], Completed]
Which = Callable[[str], "str | None"]
# The spec ``nvct-cli cdi generate`` would write now for a spec on disk (same kind, names and
# hook), or None when it cannot be built; the cli supplies it (doctor does not import cdi).
SpecGenerator = Callable[[Mapping[str, Any]], "dict[str, Any] | None"]
# The driver's inventory, freshly discovered, or None when it cannot be (the nvml check says
# why); the cli supplies it, tests a recorded one.
InventoryLoader = Callable[[], "Inventory | None"]


def run_command(argv: Sequence[str], timeout: float = 15.0) -> Completed:
    """Run a command with a timeout; never raises."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        return Completed(127, "", f"{argv[0]}: not found")
    except subprocess.TimeoutExpired:
        return Completed(124, "", f"{' '.join(argv)}: timed out after {timeout:.0f} s")
    except OSError as err:
        return Completed(126, "", f"{argv[0]}: {err.strerror}")
    return Completed(proc.returncode, proc.stdout, proc.stderr)


@dataclass(frozen=True, slots=True, kw_only=True)
class DoctorContext:
    """Inputs of the checks. ``None`` paths mean "work it out" (see each check)."""

    config: Config
    config_file: str | None = None
    docker_config: Path | None = None  # None: the running dockerd's --config-file, else default
    docker_host: str | None = None  # None: $DOCKER_HOST, else the docker CLI's default
    docker_pidfile: Path = Path("/var/run/docker.pid")
    containerd_config: Path = Path("/etc/containerd/config.toml")
    crio_config: Path = Path("/etc/crio/crio.conf")
    crio_dropin_dir: Path = Path("/etc/crio/crio.conf.d")
    cdi_dirs: tuple[Path, ...] = DEFAULT_CDI_DIRS
    shim_socket: Path = Path(DEFAULT_SOCKET)
    sysfs_root: Path = Path("/sys")
    host_proc: Path = Path("/proc")  # processes and boot time; config.proc_root is the driver's
    snap_dir: Path = Path("/snap")
    many_gpus: int = 4
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    run: Runner = run_command
    which: Which = shutil.which
    cdi_generate: SpecGenerator | None = None
    inventory: InventoryLoader | None = None
    kubernetes: bool | None = None  # the Kubernetes node checks: None runs them on a k8s node
    plugin_dir: Path | None = None  # None: the config's [device-plugin] plugin-dir
    plugin_timeout: float = 2.0  # seconds a device plugin socket has to answer

    def device_plugin_dir(self) -> Path:
        """The kubelet's device-plugins directory doctor looks in."""
        return self.plugin_dir or Path(self.config.device_plugin.plugin_dir)

    def docker_cli(self, *args: str) -> list[str]:
        """argv for the docker CLI against the daemon doctor looks at."""
        host = self.docker_host or self.env.get("DOCKER_HOST")
        return ["docker", *(["-H", host] if host else []), *args]
