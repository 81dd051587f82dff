"""A private, real dockerd for one test session (or one test).

Each ``Dockerd`` lives in its own short directory D under /tmp (unix socket paths are limited to
108 bytes, and containerd puts its sockets under the exec root): data root, exec root, socket,
pidfile, ``daemon.json``, its log and the docker CLI's config. dockerd starts its own managed
containerd under D/exec, so several daemons run side by side and none touches the system one.

Everything it started is stopped by pid: dockerd (SIGTERM, then SIGKILL), and then any process
whose command line still names D (the managed containerd, container shims). Mounts left under D
are detached before D is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from integration.harness import CommandFailed, HarnessError, run_command, tail
from integration.harness.processes import pids_naming, remove_daemon_dir, stop_daemon

__all__ = ["Dockerd", "DockerdError", "DockerdFactory"]

# containerd's default socket: dockerd uses a containerd listening there instead of starting
# its own managed one, so its presence changes how a private dockerd is isolated.
SYSTEM_CONTAINERD_SOCKET = Path("/run/containerd/containerd.sock")
# Longest socket path we create under D (containerd's debug socket), against sun_path's 108.
_LONGEST_SOCKET = "exec/containerd/containerd-debug.sock"


class DockerdError(HarnessError):
    """A private dockerd failed to start or stop."""


def _system_containerd_listening() -> bool:
    """Whether a containerd answers on the default socket (a stale socket file is an error)."""
    if not SYSTEM_CONTAINERD_SOCKET.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(str(SYSTEM_CONTAINERD_SOCKET))
        except OSError as exc:
            raise DockerdError(
                f"{SYSTEM_CONTAINERD_SOCKET} exists but nothing answers ({exc}); dockerd would "
                "try to use it instead of starting its own containerd: remove the stale socket"
            ) from None
    return True


class DockerdFactory(Protocol):
    """The ``dockerd_factory`` fixture: start a private dockerd, stopped at session end."""

    def __call__(self, daemon_json: Mapping[str, Any] | None = None) -> Dockerd: ...


class Dockerd:
    """A private dockerd; use as a context manager, or ``start()`` and ``stop()``.

    ``daemon_json`` is written to D/daemon.json, e.g.
    ``{"runtimes": {"nvidia": {"path": "/abs/nvct-runtime", "args": []}}}``.
    """

    def __init__(
        self,
        daemon_json: Mapping[str, Any] | None = None,
        *,
        base_dir: Path = Path("/tmp"),
        start_timeout: float = 60.0,
        stop_timeout: float = 20.0,
        docker_cli: str | None = None,
        storage_driver: str = "vfs",
    ) -> None:
        self.daemon_json: dict[str, Any] = dict(daemon_json or {})
        self.storage_driver = storage_driver
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.root = Path(tempfile.mkdtemp(prefix="nvd-", dir=base_dir))
        if len(str(self.root / _LONGEST_SOCKET)) >= 100:
            shutil.rmtree(self.root)
            raise DockerdError(f"{base_dir} is too long a base for unix socket paths")
        self.data_root = self.root / "data"
        self.exec_root = self.root / "exec"
        self.socket = self.root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.pidfile = self.root / "docker.pid"
        self.config_file = self.root / "daemon.json"
        self.log_path = self.root / "dockerd.log"
        self.cli_config = self.root / "cli"
        self.cli_config.mkdir()
        self.docker_cli = docker_cli or os.environ.get("NVCT_DOCKER_CLI") or "docker"
        self.pid: int | None = None
        # False when a system containerd was already listening: then dockerd uses it, and this
        # daemon is kept apart from others by its own containerd namespaces.
        self.managed_containerd = True
        self._proc: subprocess.Popen[bytes] | None = None
        self._removed = False

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Dockerd:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Dockerd pid={self.pid} root={self.root}>"

    def start(self) -> Dockerd:
        """Start dockerd and wait until ``docker info`` answers."""
        if self._removed:
            raise DockerdError(f"{self!r} was stopped and its directory removed")
        if self._proc is not None:
            raise DockerdError(f"{self!r} is already running")
        self.config_file.write_text(json.dumps(self.daemon_json, indent=2) + "\n")
        argv = [
            shutil.which("dockerd") or "dockerd",
            "--iptables=false",
            "--bridge=none",
            f"--storage-driver={self.storage_driver}",
            f"--data-root={self.data_root}",
            f"--exec-root={self.exec_root}",
            f"-H={self.host}",
            f"--pidfile={self.pidfile}",
            f"--config-file={self.config_file}",
        ]
        self.managed_containerd = not _system_containerd_listening()
        if not self.managed_containerd:
            namespace = "nvct-" + self.root.name
            argv += [
                f"--containerd-namespace={namespace}",
                f"--containerd-plugins-namespace={namespace}-plugins",
            ]
        with self.log_path.open("ab") as log:
            log.write(f"=== harness: starting {' '.join(argv)}\n".encode())
            log.flush()
            # Own session: a ^C in the test terminal reaches pytest (whose teardown stops the
            # daemon in order), not dockerd directly.
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self._proc.pid
        try:
            self._wait_ready()
        except BaseException:
            self._stop_processes()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise DockerdError(
                    f"dockerd exited with status {self._proc.returncode} while starting; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            if self.socket.exists():
                done = self.docker("info", "--format", "{{.ID}}", check=False, timeout=10)
                if done.returncode == 0:
                    break
                last = done.stderr
            time.sleep(0.1)
        else:
            raise DockerdError(
                f"dockerd not ready after {self.start_timeout} s ({last.strip()}); "
                f"last lines of {self.log_path}:\n{self.log_tail()}"
            )
        pid_text = self.pidfile.read_text().strip() if self.pidfile.exists() else ""
        if pid_text != str(self._proc.pid):
            raise DockerdError(
                f"{self.pidfile} says {pid_text!r}, but the dockerd started is {self._proc.pid}"
            )

    def restart(self, new_daemon_json: Mapping[str, Any] | None = None) -> None:
        """Stop dockerd and start it again on the same directories, with a new config if given.

        Containers do not survive it (no live-restore); images do.
        """
        if new_daemon_json is not None:
            self.daemon_json = dict(new_daemon_json)
        self._stop_processes()
        self.start()

    def stop(self) -> None:
        """Stop dockerd and everything it started, detach mounts left under D, remove D."""
        if self._removed:
            return
        self._stop_processes()
        remove_daemon_dir(self.root, DockerdError)
        self._removed = True

    def _stop_processes(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            self._kill_containers()
        # dockerd, then its containerd and shims (or the leftovers of one that died on its own)
        stop_daemon(proc, self.root, self.stop_timeout, DockerdError)
        self.pid = None

    def _kill_containers(self) -> None:
        """SIGKILL running containers: on SIGTERM dockerd would give each 10 s to stop."""
        with contextlib.suppress(CommandFailed):  # a hung daemon: SIGTERM/SIGKILL follow
            running = self.docker("ps", "-q", check=False, timeout=20).stdout.split()
            if running:
                self.docker("kill", *running, check=False, timeout=30)

    def process_ids(self) -> list[int]:
        """Live processes of this daemon: dockerd, its containerd, shims (all name D)."""
        return pids_naming(str(self.root))

    # -- use -------------------------------------------------------------------------------

    def cli_env(self) -> dict[str, str]:
        """Environment for the docker CLI: no user config, context or host overrides."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")
        }
        env["DOCKER_CONFIG"] = str(self.cli_config)
        return env

    def docker(
        self,
        *args: str,
        check: bool = True,
        input: str | bytes | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against this daemon; raises ``CommandFailed`` if ``check``."""
        return run_command(
            [self.docker_cli, "-H", self.host, *args],
            input=input,
            timeout=timeout,
            env=self.cli_env(),
            check=check,
        )

    def info(self) -> dict[str, Any]:
        """``docker info`` as a dict (``Runtimes``, ``CgroupDriver``, ``DefaultRuntime`` ...)."""
        out = self.docker("info", "--format", "{{json .}}").stdout
        data: dict[str, Any] = json.loads(out)
        return data

    def log_tail(self, lines: int = 40) -> str:
        try:
            return tail(self.log_path.read_text(errors="replace"), lines)
        except FileNotFoundError:
            return "(no log)"
