"""A private, real containerd (Debian's package) whose CRI plugin the CRI kubelet stand-in
(integration/kubelet/cri.py) drives, as a kubelet drives a node's containerd.

Each ``Containerd`` lives in its own short directory D under /tmp: root, state, the gRPC
socket, its config and log, the pods' log directories. The config is a base of ours
(``base_config``: the CRI plugin with ``sandbox_image`` = the local pause image,
``restrict_oom_score_adj``, a snapshotter that works on this filesystem, no CNI needed for
host-network pods) that ``nvct-cli configure --runtime containerd`` (or the node installer)
then edits, as on a node. Images are imported into the ``k8s.io`` namespace with
``ctr images import``; there is no registry.

Everything it started is stopped by pid: containerd (SIGTERM, then SIGKILL), then any process
whose command line still names D (the runc shims: their ``-address`` is D's socket). Mounts
left under D are detached before D is removed. runc keeps its state under D (the handlers'
``Root`` option); containerd 1.6 puts its shims' sockets under /run/containerd/s whatever its
config says, named by a hash of D's socket, so they never collide with another containerd's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from integration.harness import HarnessError, run_command, tail
from integration.harness.processes import (
    cmdline,
    pids_naming,
    remove_daemon_dir,
    stop_daemon,
    terminate,
)

__all__ = ["Containerd", "ContainerdError", "base_config", "snapshotter_for"]

CRI = 'plugins."io.containerd.grpc.v1.cri"'


class ContainerdError(HarnessError):
    """A private containerd failed to start or stop."""


def snapshotter_for(directory: Path) -> str:
    """``overlayfs`` where an overlay mount works under ``directory`` (not on an overlay or
    tmpfs root, say in a container), else ``native`` (copies, always works)."""
    probe = Path(tempfile.mkdtemp(prefix="ovl-", dir=directory))
    try:
        for sub in ("lower", "upper", "work", "merged"):
            (probe / sub).mkdir()
        options = f"lowerdir={probe}/lower,upperdir={probe}/upper,workdir={probe}/work"
        done = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(probe / "merged")],
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            return "native"
        subprocess.run(["umount", str(probe / "merged")], check=True)
        return "overlayfs"
    finally:
        shutil.rmtree(probe)


def base_config(root: Path, sandbox_image: str, snapshotter: str) -> str:
    """containerd's config for a node of its own under ``root``, before nvct configures it."""
    return f"""# a private containerd of the nvct tests (integration/harness/containerd.py)
version = 2
root = "{root}/root"
state = "{root}/state"

[grpc]
  address = "{root}/c.sock"

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"

[{CRI}]
  sandbox_image = "{sandbox_image}"
  # this VM refuses to lower a process's oom_score_adj (the pause container's -998)
  restrict_oom_score_adj = true
  [{CRI}.containerd]
    snapshotter = "{snapshotter}"
    default_runtime_name = "runc"
    [{CRI}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{CRI}.containerd.runtimes.runc.options]
        # runc's state here, not under /run/containerd/runc (nvct's handlers copy the option)
        Root = "{root}/runc"
  [{CRI}.cni]
    bin_dir = "{root}/cni/bin"
    conf_dir = "{root}/cni/conf"
"""


class Containerd:
    """A private containerd: ``start()``, then ``stop()``.

    ``env``: added to containerd's environment, which its shims and so the runtimes inherit
    (``NVCT_CONFIG`` for nvct-runtime).
    """

    def __init__(
        self,
        *,
        base_dir: Path = Path("/tmp"),
        env: Mapping[str, str] | None = None,
        start_timeout: float = 60.0,
        stop_timeout: float = 20.0,
        enter: Sequence[str] = (),
        config: tuple[Path, str] | None = None,
    ) -> None:
        """``enter``: an argv prefix that runs containerd elsewhere (a node root's namespace,
        integration/harness/noderoot.py); ``config``: its config file as this process reaches
        it and as containerd names it there (default D/config.toml)."""
        self.root = Path(tempfile.mkdtemp(prefix="nvc-", dir=base_dir))
        self.socket = self.root / "c.sock"
        self.config, self.config_arg = config or (self.root / "config.toml", "")
        self.config_arg = self.config_arg or str(self.config)
        self.enter = list(enter)
        self.log_path = self.root / "containerd.log"
        self.pod_logs = self.root / "pods"
        self.env = dict(env or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._removed = False

    def __repr__(self) -> str:
        return f"<Containerd pid={self.pid} root={self.root}>"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def write_base_config(self, sandbox_image: str) -> str:
        """Write (and return) the base config; the snapshotter is probed under D."""
        text = base_config(self.root, sandbox_image, snapshotter_for(self.root))
        self.config.write_text(text)
        return text

    def start(self) -> Containerd:
        """Start containerd on ``config`` and wait until its CRI plugin answers.

        Raises:
            ContainerdError: it exited, or did not answer in time; the message has its log.
        """
        if self._proc is not None and self._proc.poll() is not None:
            self._proc = None  # it exited (killed by a restart, say): start it again
        if self._removed or self._proc is not None:
            raise ContainerdError(f"{self!r} cannot start: stopped for good or running")
        containerd = "containerd" if self.enter else shutil.which("containerd") or "containerd"
        argv = [*self.enter, containerd, "--config", self.config_arg]
        with self.log_path.open("ab") as log:
            log.write(f"=== harness: starting {' '.join(argv)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,  # a ^C reaches pytest, whose teardown stops it
            )
        try:
            self._wait_ready()
        except BaseException:
            self._stop_processes()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ContainerdError(
                    f"containerd exited with status {self._proc.returncode} while starting; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            if self.socket.exists() and self._cri_ready():
                return
            time.sleep(0.1)
        raise ContainerdError(
            f"containerd's CRI plugin not ready after {self.start_timeout} s; last lines of "
            f"{self.log_path}:\n{self.log_tail()}"
        )

    def _cri_ready(self) -> bool:
        from integration.kubelet.cri import cri_version

        try:
            cri_version(self.socket, timeout=2)
        except Exception:
            return False
        return True

    def wait_exit(self, timeout: float = 30) -> bool:
        """Whether containerd exits within ``timeout`` (stopped by someone else, by pid)."""
        if self._proc is None:
            return True
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def restart(self) -> None:
        """Stop containerd (not its shims: running containers live on) and start it again on
        the same directories, reading its config anew, as ``systemctl restart`` does."""
        self._stop_daemon()
        self.start()

    def stop(self) -> None:
        """Stop containerd and every shim it started, detach mounts under D, remove D."""
        if self._removed:
            return
        self._stop_processes()
        remove_daemon_dir(self.root, ContainerdError)
        self._removed = True

    def _stop_daemon(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            terminate(proc, self.stop_timeout)

    def _stop_processes(self) -> None:
        proc, self._proc = self._proc, None
        stop_daemon(proc, self.root, self.stop_timeout, ContainerdError, helper_timeout=5)

    def process_ids(self) -> list[int]:
        """Live processes of this containerd: itself and its shims (all name D)."""
        return pids_naming(str(self.root))

    def ctr(self, *args: str, input: bytes | None = None, timeout: float = 300) -> str:
        """``ctr`` against this containerd in the ``k8s.io`` namespace (the CRI's)."""
        argv = ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args]
        return run_command(argv, input=input, timeout=timeout).stdout

    def import_image(self, archive: bytes) -> None:
        """``ctr images import`` of a docker-archive tar, unpacked for the CRI's snapshotter."""
        self.ctr("images", "import", "--snapshotter", self.snapshotter(), "-", input=archive)

    def leftovers(self, ids: list[str]) -> list[str]:
        """What still names one of ``ids`` (containers, sandboxes): processes, mounts, task
        state, runc state, snapshots; empty when containerd removed them all."""
        found = [f"process {pid}: {cmdline(pid)}" for i in ids for pid in pids_naming(i)]
        mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
        found += [f"mount {line.split()[4]}" for line in mountinfo if any(i in line for i in ids)]
        for i in ids:
            for state in (
                self.root / "state/io.containerd.runtime.v2.task/k8s.io" / i,
                self.root / "runc/k8s.io" / i,
            ):
                if state.exists():
                    found.append(f"state {state}")
        snapshots = self.ctr("snapshots", "--snapshotter", self.snapshotter(), "ls")
        found += [
            f"snapshot {line}" for line in snapshots.splitlines() if any(i in line for i in ids)
        ]
        return found

    def snapshotter(self) -> str:
        return "native" if 'snapshotter = "native"' in self.config.read_text() else "overlayfs"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return tail(self.log_path.read_text(errors="replace"), lines)
        except FileNotFoundError:
            return "(no log)"
